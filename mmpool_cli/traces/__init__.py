"""Traces: what reaches the memory mmpool models, as a stream of requests' items.

The events (``events``: alloc and free columns), every reader and writer of a trace (JSON lines
``jsonl``, Parquet ``parquet`` / ``parquet_writer``, the bounded byte reading ``bounded``, the checks
of time order and pairing ``order``, the reader ``reader``), a seeded synthetic trace (``synthetic``)
and ``mmpool record``'s recordings read back (``recording``, ``record_stream``, ``recorded_layout``).
Neutral: knows no engine and no model of memory; it imports ``core`` and ``kernels`` (the compiled
reader) only, never ``pools``, ``caches``, an engine, typer, rich or torch.
"""
