"""Pools: an exact model of the allocators that carry features to the model (SGLang's feature pools).

``allocator`` is the protocol every pool follows, ``cuda_ipc`` one worker's best-fit pool and
``cuda_vmm`` the VMM transport's packing of a request's features into chunks; ``replay`` replays a
trace's events over W pools with the recycler's ticks (``trace_file`` straight from a file), and
``recorded`` holds a replay against a recording. ``budget_search`` finds the smallest safe budget,
``curve`` the fallback at every budget; ``evaluator``, ``trials`` and ``executors`` decide and run
their replays, here or on Ray. Neutral: knows no engine; imports ``traces``, ``kernels`` and
``core``, never ``caches``, an engine, typer, rich or torch.
"""
