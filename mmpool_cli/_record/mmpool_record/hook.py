"""The import hook: when SGLang's pool and cache modules, or vLLM's cache modules, are imported, recognise
their code and wrap it.

A meta-path finder lets the module's own loader run it, then checks every target method's digest
(``digest.py``) against ``digests.json``. Known code is wrapped (``pools.py``); any unknown method
leaves the module untouched, one line on stderr says so, and the program runs as if mmpool were
absent. Standard library only: this runs in the server's own Python.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any

from mmpool_record import caches, caches_vllm, digest, pools
from mmpool_record.config import from_environ
from mmpool_record.recorder import RECORDER
from mmpool_record.say import say

IPC_POOL = "sglang.srt.multimodal.transport.memory_pool"
IPC = "sglang.srt.multimodal.transport.cuda_ipc"
VMM = "sglang.srt.utils.cuda_vmm_transport_utils"
EMBEDDING_CACHE = "sglang.srt.mem_cache.multimodal_cache"
MM_SCHEDULE = "sglang.srt.managers.mm_schedule"  # where the scheduler's batches of embedding lookups begin
PREPROCESS_CACHE = "sglang.srt.multimodal.cache.preprocess_cache"
VLLM_CACHE = "vllm.multimodal.cache"  # 0.30.0: the processor cache's one module (later a package)
VLLM_BASE = "vllm.multimodal.cache.base"
VLLM_LRU = "vllm.multimodal.cache.lru"
VLLM_SHM = "vllm.multimodal.cache.shm"
VLLM_PROCESSOR = (VLLM_CACHE, VLLM_BASE, VLLM_LRU, VLLM_SHM)
VLLM_ENCODER = "vllm.v1.core.encoder_cache_manager"
CACHE_MODULES = (EMBEDDING_CACHE, PREPROCESS_CACHE, *VLLM_PROCESSOR, VLLM_ENCODER)
ALL = (IPC_POOL, IPC, VMM, EMBEDDING_CACHE, MM_SCHEDULE, PREPROCESS_CACHE, *VLLM_PROCESSOR, VLLM_ENCODER)

# what the finder has done: the digests it knows, the methods it replaced, the modules it left alone
_state: dict[str, Any] = {"known": None, "originals": {}, "code_of": {}, "off": set()}


def _known() -> dict[str, dict[str, dict[str, list[str]]]]:
    if _state["known"] is None:
        known = digest.load()
        config = RECORDER.config
        if config is not None and config.digests:
            known = digest.merge(known, digest.load(config.digests))
        _state["known"] = known
    return _state["known"]  # type: ignore[no-any-return]


def recognise(module: types.ModuleType) -> tuple[str | None, list[str]]:
    """Why ``module``'s pool code is not known (None when it is), and the releases that ship it."""
    name = module.__name__
    loader = getattr(module.__spec__, "loader", None)
    get_source = getattr(loader, "get_source", None)
    source = get_source(name) if get_source is not None else None
    if not source:
        return "its source is not readable (a build without .py files)", []
    known = _known().get(name, {})
    releases: set[str] | None = None
    for cls_name, names in digest.TARGETS[name].items():
        cls = getattr(module, cls_name, None) if cls_name else module
        if cls_name and not isinstance(cls, type):
            return f"it has no class {cls_name}", []
        found = digest.methods(source, cls_name)
        for method in names:
            qual = digest.qualified(cls_name, method)
            attr = cls.__dict__.get(method)
            fn = attr.fget if isinstance(attr, property) else attr
            code = getattr(fn, "__code__", None)
            if method not in found or code is None:
                return f"{qual} is missing", []
            first, sha = found[method]
            if code.co_firstlineno != first:
                return f"{qual} is not the code in its file (replaced at run time)", []
            if sha not in known.get(qual, {}):
                return f"{qual} is code mmpool does not know (another release, or a local patch)", []
            shipped = set(known[qual][sha])
            releases = shipped if releases is None else releases & shipped
    if not releases:
        return "its methods come from different releases (a local mix)", []
    return None, sorted(releases)


def patch(module: types.ModuleType) -> None:
    """Wrap ``module``'s pool if its code is known; otherwise leave it (and what depends on it) untouched."""
    name = module.__name__
    try:
        if name == IPC and IPC_POOL in _state["off"]:
            return  # said once already, for the pool it builds on
        if name == VLLM_CACHE and hasattr(module, "__path__"):
            return  # 0.31.0 and later: the package; its modules are recognised one by one
        why, releases = recognise(module)
        if why is not None:
            _state["off"].add(name)
            if name == MM_SCHEDULE:  # the cache itself is recorded all the same: only its batches are not marked
                say(
                    f"{name}: {why}: the embedding cache's batches are not marked (its records are kept; a replay at "
                    "other sizes reads its batches from them, as docs/record.md says)"
                )
                return
            what = "cache" if name in CACHE_MODULES else "pool"
            say(f"{name}: {why}: this {what} is not recorded, and runs as it would without mmpool")
            if name == IPC:
                _restore(IPC_POOL)  # the cuda_ipc pool's miss is read through MmItemMemoryPool's code
            return
        _state["code_of"][name] = releases
        for transport in ("cuda_ipc", "cuda_vmm"):
            RECORDER.releases[transport] = code_of(transport)
        RECORDER.releases["embedding"] = sorted(_state["code_of"].get(EMBEDDING_CACHE, []))
        RECORDER.releases["preprocess"] = sorted(_state["code_of"].get(PREPROCESS_CACHE, []))
        RECORDER.releases["vllm_processor"] = _common(VLLM_PROCESSOR)
        RECORDER.releases["vllm_encoder"] = sorted(_state["code_of"].get(VLLM_ENCODER, []))
        if name == IPC_POOL:
            cls = module.StreamOrderedMmFeaturePool
            _keep(name, cls, ("_allocate_locked", "_release_locked", "_recycle_ready_leases_locked"))
            pools.wrap_ipc(cls)
        elif name == VMM:
            cls = module.CudaVmmMemoryPool
            _keep(name, cls, ("_reserve_chunk", "_release_reserved_chunk", "_recycle_chunks", "_merge_chunks"))
            pools.wrap_vmm(cls)
        elif name == EMBEDDING_CACHE:
            cls = module.MultiModalStaticCache
            _keep(name, cls, ("get", "get_single", "set", "free", "clear"))
            caches.wrap_embedding(cls)
        elif name == MM_SCHEDULE:
            _keep(name, module, caches.BATCHES)
            caches.wrap_batches(module)
        elif name == PREPROCESS_CACHE:
            cls = module.MultimodalPreprocessCache
            _keep(name, cls, ("get", "get_if_present", "lookup_or_claim_many", "put", "pop", "clear"))
            caches.wrap_preprocess(cls)
        elif name in VLLM_PROCESSOR:
            if name in (VLLM_CACHE, VLLM_BASE):
                base = module.BaseMultiModalProcessorCache
                _keep(name, base, ("is_cached",))
                caches_vllm.wrap_is_cached(base)
            for cls_name, cache_type in caches_vllm.SENDERS.items():
                cls = getattr(module, cls_name, None)
                if cls_name in digest.TARGETS[name] and isinstance(cls, type):
                    own = tuple(m for m in ("get_and_update_item", "clear_cache", "invalidate") if m in cls.__dict__)
                    _keep(name, cls, own)
                    caches_vllm.wrap_processor(cls, cache_type)
        elif name == VLLM_ENCODER:
            cls = module.EncoderCacheManager
            _keep(name, cls, ("check_and_update_cache", "can_allocate", "allocate", "free_encoder_input", "reset"))
            caches_vllm.wrap_encoder(cls)
    except Exception as e:
        _restore(name)
        say(f"{name}: not recorded ({type(e).__name__}: {e})")


def code_of(transport: str) -> list[str]:
    """The releases whose code the pools of ``transport`` matched."""
    modules = (IPC_POOL, IPC) if transport == "cuda_ipc" else (VMM,)
    return _common(modules)


def _common(modules: tuple[str, ...]) -> list[str]:
    """The releases whose code every one of ``modules`` that was recognised matched."""
    found = [set(_state["code_of"][m]) for m in modules if m in _state["code_of"]]
    return sorted(set.intersection(*found)) if found else []


def _keep(name: str, cls: Any, methods: tuple[str, ...]) -> None:  # a class, or a module for its functions
    _state["originals"].setdefault(name, []).append((cls, {m: cls.__dict__[m] for m in methods}))


def _restore(name: str) -> None:
    for cls, methods in _state["originals"].pop(name, []):
        for method, fn in methods.items():
            setattr(cls, method, fn)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then ``patch``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.inner  # get_source, resources and the rest stay the loader's own
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        patch(module)


class Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the pool modules it asks the finders after it, then wraps the loader."""

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> Any:
        if fullname not in digest.TARGETS:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader)
                    return spec
        except Exception as e:
            say(f"{fullname}: not recorded ({type(e).__name__}: {e})")
        return None


def install() -> None:
    """Read the settings; when recording is on, put the finder first on ``sys.meta_path``."""
    try:
        config = from_environ()
    except ValueError as e:
        say(f"nothing is recorded: {e}")
        return
    if config is None or any(isinstance(f, Finder) for f in sys.meta_path):
        return
    RECORDER.setup(config)
    sys.meta_path.insert(0, Finder())
    # imported before the bootstrap ran: wrap them now
    for name in ALL:
        if name in sys.modules:
            patch(sys.modules[name])
    os.register_at_fork(after_in_child=RECORDER.after_fork)
