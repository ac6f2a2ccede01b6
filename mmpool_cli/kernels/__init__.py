"""Kernels: the compiled twins of mmpool's reference Python code, and their loader (``native``).

``_fastsim`` is the trace reader and cuda_ipc replay in C (twin of ``traces.reader`` and
``pools.cuda_ipc``/``pools.replay``), ``_stackdist`` the one-pass cache curve (twin of
``caches.curve``), ``_cachereplay`` the cache replays where one pass is not exact (twins of the
replays of vLLM's processor and encoder caches, ``engines/vllm/processor_replay.py`` and
``encoder_replay.py``) and the preparation of ``caches.lru``'s pass, ``_prefixreplay`` the radix prefix
replay (twin of ``caches/radix.py``'s ``RadixReplay``). Each is optional: built at
install where a C compiler is at hand, else the Python code runs, with the same results. Standard
library only.
"""
