"""An exact simulation of SGLang's feature pools under load, knowing no engine.

``allocator`` is the protocol every pool follows, ``cuda_ipc`` one worker's best-fit pool and
``cuda_vmm`` the VMM transport's packing of a request's features into chunks; ``replay`` replays
timed alloc/free events (``events``: compact columns) over W pools with the recycler's ticks,
``trace`` reads a recorded JSON-lines trace, ``synthetic`` makes a seeded one, and
``budget_search`` finds the smallest safe budget. Pure core: standard library only (msgspec reads
traces when it is there).
"""
