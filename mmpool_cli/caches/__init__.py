"""Caches: an exact model of the caches in front of a model's encoder and KV cache.

The byte-counted LRU and its one-pass stack-distance curve (``curve``, compiled twin
``kernels/_stackdist``), the replays of a cache's rules at each size where one pass is not exact
(``replay``), the result every engine shares (``report``), a trace's or a recording's items as the
caches see them (``from_trace``, ``recorded``), and the token-counted prefix cache in front of the
KV cache, a radix tree or chained block hashes, with its replay and curve (``prefix``; the rules in
``radix`` and ``blocks``). The engines describe how their caches key, size and drive items and call
this code. Neutral: knows no engine; imports ``traces``, ``kernels`` and ``core``, never ``pools``,
an engine, typer, rich or torch.
"""
