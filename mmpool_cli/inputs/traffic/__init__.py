"""Traffic users already have, turned into mmpool traces: image headers, request bodies, the trace writer.

Knows no engine: the readers of one engine's logs live in its package (``engines/sglang/traffic/``).
Pure core: standard library only.
"""
