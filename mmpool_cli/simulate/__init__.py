"""An exact simulation of SGLang 0.5.23's cuda_ipc feature pools under load.

``pool`` is one tokenizer worker's allocator, ``engine`` replays timed alloc/free events over W
pools with the recycler's ticks, ``trace`` reads a recorded JSON-lines trace, ``workload`` makes
a seeded synthetic one, and ``budget`` searches for the smallest budget that meets a fallback
target. Pure core: standard library only.
"""
