"""The scoring of ``mmpool tune --engine vllm``: one traffic and launch, any split's row (``Scorer``).

Each memory's rule, with the vLLM 0.34.0 code it follows, is in ``tune``'s docstring. A row's figures come
from the functions ``mmpool cache --engine vllm`` runs: the block cache replayed at the row's KV blocks
(``caches.prefix.BlockReplays``, as its curve replays each point: the block keys made once, the sizes
from which nothing is evicted sharing one replay), the encoder cache replayed behind it at the row's budget
(``encoder_replay.replay``), the decode pool's refusals as ``plan --engine vllm --video`` sizes them
(``plan.decode_requests``, ``gpu_pool.plan``). Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmpool_cli.caches import prefix
from mmpool_cli.core.workers import default_jobs, worker_start
from mmpool_cli.engines.vllm import cache_items, encoder_replay, gpu_pool
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import prefix as vllm_prefix
from mmpool_cli.engines.vllm.cache_traffic import ImageTraffic
from mmpool_cli.engines.vllm.caches import check_launch
from mmpool_cli.engines.vllm.gib import bytes_of
from mmpool_cli.engines.vllm.plan import decode_requests, kv_bytes_per_token, make_plan
from mmpool_cli.engines.vllm.request import H200, VllmPlan, VllmRequest
from mmpool_cli.errors import MmpoolError
from mmpool_cli.tune.split import Batches, Measures, Memory, Row
from mmpool_cli.workload.items import Video
from mmpool_cli.workload.qwen import ResizeError

KV, ENCODER, POOL = "kv", "encoder", "decode_pool"
MEMORIES = (
    Memory(KV, "--num-gpu-blocks-override", "blocks"),
    Memory(ENCODER, "--max-num-batched-tokens", "tokens"),
    Memory(POOL, "--mm-ipc-gpu-memory-gb", "bytes"),
)
PREFIX_ASSUMED, ENCODER_ASSUMED, STEP_ASSUMED, BATCH_ASSUMED, POOL_ASSUMED = range(5)  # _assumptions' order
MiB = 1 << 20
GiB = 1 << 30
MAX_BLOCKS = 1 << 40  # the bound of --num-gpu-blocks-override that `cache` applies


@dataclass(frozen=True)
class VllmTuneInput:
    """What ``mmpool cache --engine vllm`` is given (the launch, the traffic, its prefix flags, the encoder
    window) and the traffic's videos as the GPU decode pool sees them (``unsized``: why a video was not)."""

    request: VllmRequest
    traffic: ImageTraffic
    flags: vllm_prefix.PrefixFlags
    window: int = 1
    videos: tuple[Video, ...] = ()
    unsized: tuple[str, ...] = ()


@dataclass
class _Behind:
    """What the prefix cache at one KV size leaves the encoder cache."""

    served: list[int]  # per built request, the prompt tokens served
    spared: int  # distinct items inside a cached prefix: never encoded
    requests: list[list[str]]  # each request's items outside its cached prefix
    dense: encoder_replay.Dense | None
    lookup_tokens: int


class Scorer:
    """One traffic and launch: the memories' bytes and the measures of any split, each replay made once."""

    def __init__(self, inp: VllmTuneInput) -> None:
        req, traffic, flags = inp.request, inp.traffic, inp.flags
        check_launch(req)  # a launch `cache` refuses is refused here, in the same line
        self.inp = inp
        self.plan: VllmPlan = make_plan(req)
        enc = self.plan.encoder_cache
        if enc["budget_tokens"] is None or not enc["embedding_bytes_per_token"]:
            raise MmpoolError(
                "mmpool tune --engine vllm: the encoder cache of this model is not counted (Qwen2-VL, Qwen2.5-VL, "
                "Qwen3-VL and Gemma 3 are): see mmpool plan --engine vllm"
            )
        per_kv = kv_bytes_per_token(req)
        if per_kv is None:
            raise MmpoolError(
                "mmpool tune --engine vllm needs the KV cache's bytes per token: give --model DIR, a model "
                "directory whose config.json has the attention shape (a family name has none)"
            )
        self.block_size = flags.block_size
        self.block_bytes = per_kv * flags.block_size
        self.per_token: int = enc["embedding_bytes_per_token"]
        self.floor: int = enc["max_tokens_per_item"]
        self.mnbt: int = enc["max_num_batched_tokens"]
        self.today_tokens: int = enc["budget_tokens"]
        self.max_seqs = _max_num_seqs(req, enc["max_model_len"])
        self.known = cache_items.traffic_items(req, traffic)
        self.tokens = self.known.tokens
        family = req.model.family.name if req.model else ""
        self.built = vllm_prefix.build(traffic.requests, traffic.prompts, self.tokens, family, flags)
        self.prompt_tokens = sum(len(r.tokens) for r in self.built.requests)
        bs = flags.block_size
        self.lengths = Batches([-(-len(r.tokens) // bs) * bs for r in self.built.requests])
        # the block cache at any KV size, its keys made once (``prefix.BlockReplays``, as cache's curve replays)
        self.replays = prefix.BlockReplays(self.built.requests, bs) if self.built.requests and flags.enabled else None
        self.saturated: int | None = None if self.replays is None else self.replays.saturated
        self.api = max(1, self.plan.processor_cache.api_processes)
        self.decodes, self.decode_errors = self.decodes_of(req, inp.videos)
        self.today_pool = 0 if req.ipc_gb is None else req.ipc_gb.bytes
        self.assumptions = _assumptions(self)
        self._behind: dict[int, _Behind] = {}
        self._served: dict[int, list[int]] = {}  # replayed ahead (``prepare``), taken once
        self._encoder: dict[tuple[int, int], encoder_replay.EncoderReplay] = {}

    @staticmethod
    def decodes_of(req: VllmRequest, videos: Sequence[Video]) -> tuple[list[gpu_pool.DecodeRequest], list[str]]:
        """Each video's decode as ``plan --engine vllm --video`` sizes it (the loader fails some: said)."""
        out: list[gpu_pool.DecodeRequest] = []
        errors: list[str] = []
        for v in videos:
            try:
                out.extend(decode_requests(req, [v]))
            except ResizeError as e:
                errors.append(str(e))
        return out, errors

    # --- the memories' settings and bytes

    @property
    def pool_decides(self) -> bool:
        """Whether the decode pool has anything to decide: videos the launch decodes on the GPU."""
        return bool(self.decodes) and self.inp.request.gpu_video_backend

    def bytes_of(self, name: str, value: int) -> int:
        """The bytes per GPU worker one memory's setting takes."""
        if name == KV:
            return value * self.block_bytes
        if name == ENCODER:
            return value * self.per_token
        return value

    def mnbt_for(self, tokens: int) -> int:
        """The ``--max-num-batched-tokens`` that gives an encoder budget of ``tokens`` (at least the floor):
        the budget itself above the floor; at the floor the launch's own where it is no larger."""
        return tokens if tokens > self.floor else min(self.mnbt, self.floor)

    def today(self) -> dict[str, int] | None:
        """The launch's own split; None where its KV blocks are not given."""
        blocks = self.inp.flags.num_blocks
        if blocks is None:
            return None
        return {KV: blocks, ENCODER: self.today_tokens, POOL: self.today_pool}

    def check(self, values: Mapping[str, int]) -> dict[str, int]:
        """``values`` completed with the launch's own, each a setting vLLM accepts (else ``MmpoolError``)."""
        today = self.today()
        out: dict[str, int] = {}
        for name in (KV, ENCODER, POOL):
            if name in values:
                out[name] = values[name]
            elif today is not None:
                out[name] = today[name]
            else:
                raise MmpoolError(
                    "the launch's KV blocks are not given: give --num-gpu-blocks-override N (the blocks vLLM "
                    "logs at start-up) or the split's kv blocks"
                )
        unknown = sorted(set(values) - {KV, ENCODER, POOL})
        if unknown:
            raise MmpoolError(f"vLLM's memories are {KV}, {ENCODER} and {POOL}, not {', '.join(unknown)}")
        if not 2 <= out[KV] <= MAX_BLOCKS:
            raise MmpoolError(f"{KV} {out[KV]} blocks: from 2 (one is the null block) to {MAX_BLOCKS}")
        if out[ENCODER] < self.floor:
            raise MmpoolError(
                f"{ENCODER} {out[ENCODER]:,} tokens: vLLM's encoder budget is at least the largest item the launch "
                f"allows, {self.floor:,}"
            )
        if out[POOL] < 0 or (out[POOL] and out[POOL] // self.api < 1):
            raise MmpoolError(
                f"{POOL} {out[POOL]:,} B: 0 (off) or at least 1 byte for each of {self.api} API processes"
            )
        return out

    # --- the replays

    def prepare(self, blocks: Sequence[int]) -> None:
        """Replay the block cache at each of these KV sizes ahead, in forked workers where there are cores for
        more than one (each replay is its own, deterministic: the answer is the same either way)."""
        keys = sorted({b if self.saturated is None else min(b, self.saturated) for b in blocks} - set(self._behind))
        keys = [k for k in keys if 2 <= k != self.saturated]  # the unbounded replay's answer is at hand
        jobs = min(default_jobs(), len(keys))
        if self.replays is None or jobs < 2:
            return
        import multiprocessing

        if "fork" not in multiprocessing.get_all_start_methods():
            return
        _SHARED["replays"] = self.replays
        pool = multiprocessing.get_context("fork").Pool(jobs, initializer=worker_start)
        try:
            self._served.update(zip(keys, pool.map(_served_shared, keys, chunksize=1), strict=True))
        finally:
            pool.terminate()
            pool.join()
            _SHARED.clear()

    def behind(self, blocks: int) -> _Behind:
        """The prefix cache at ``blocks`` KV blocks and the items it leaves the encoder cache (each KV size from
        which nothing is evicted gives the unbounded replay's answer: replayed once)."""
        key = blocks if self.saturated is None else min(blocks, self.saturated)
        got = self._behind.get(key)
        if got is None:
            served = self._served.pop(key, None)
            if served is None:
                served = self.replays.served(key) if self.replays is not None else [0] * len(self.built.requests)
            _covered, spared, requests = self.built.behind(self.inp.traffic.requests, served)
            dense = encoder_replay.Dense.of(requests, self.tokens) if encoder_replay.FAST is not None else None
            lookup = sum(self.tokens[k] for r in requests for k in r)
            got = self._behind[key] = _Behind(served, spared, requests, dense, lookup)
        return got

    def encoder(self, blocks: int, tokens: int) -> encoder_replay.EncoderReplay:
        """The encoder cache of ``tokens`` replayed behind the prefix cache of ``blocks`` KV blocks."""
        b = self.behind(blocks)
        key = (blocks if self.saturated is None else min(blocks, self.saturated), tokens)
        got = self._encoder.get(key)
        if got is None:
            reqs: Any = b.requests if b.dense is None else b.dense
            got = self._encoder[key] = encoder_replay.replay(reqs, self.tokens, tokens, self.inp.window)
        return got

    def refused(self, pool: int) -> list[gpu_pool.DecodeItem]:
        """The videos whose decode one API process's share of ``pool`` bytes refuses (none without the GPU
        video backend, which never asks the pool; none at 0, where no pool gates the decodes)."""
        if not self.inp.request.gpu_video_backend:
            return []
        got = gpu_pool.plan(pool, self.api, tuple(self.decodes), gpu_video_backend=True)
        return [] if got is None else [i for i in got.items if not i.fits]

    # --- one row

    def row(self, values: Mapping[str, int], *, today: bool = False) -> Row:
        """The measures of one split, each from the replays above."""
        v = self.check(values)
        b = self.behind(v[KV])
        enc = self.encoder(v[KV], v[ENCODER])
        refused = self.refused(v[POOL])
        kv_tokens = (v[KV] - 1) * self.block_size
        measures = Measures(
            requests=len(self.inp.traffic.requests),
            prompt_tokens=self.prompt_tokens,
            prefix_served_tokens=sum(b.served),
            encoder_tokens=b.lookup_tokens - enc.saved,
            fallback_items=len(refused),
            fallback_bytes=sum(i.bytes for i in refused),
            kv_tokens=kv_tokens,
            batch=self.lengths.at(kv_tokens),
        )
        figures = {
            "kv_blocks": v[KV],
            "prefix_lookup_tokens": self.prompt_tokens,
            "prefix_served_tokens": sum(b.served),
            "items_served_by_prefix": b.spared,
            "encoder_lookups": sum(len(r) for r in b.requests),
            "encoder_lookup_tokens": b.lookup_tokens,
            "encoder_hits": enc.hits,
            "encoder_saved_tokens": enc.saved,
            "encoder_waited": len(enc.waited),
            "encoder_refused": len(enc.refused),
            "encoder_recomputed_tokens": enc.recomputed,
            "max_num_batched_tokens": self.mnbt_for(v[ENCODER]),
            "decode_refused": len(refused),
            "decode_share_bytes": v[POOL] // self.api,
        }
        return Row(
            values=dict(v),
            bytes={name: self.bytes_of(name, v[name]) for name in (KV, ENCODER, POOL)},
            measures=measures,
            settings=self.settings(v),
            today=today,
            assumed=self.assumed(v),
            figures=figures,
        )

    def assumed(self, v: Mapping[str, int]) -> tuple[int, ...]:
        """The assumptions (indices) a split's figures depend on: the replays' always; the step's activations
        where the split moves ``--max-num-batched-tokens``; the decode pool's where it decides."""
        out = [PREFIX_ASSUMED, ENCODER_ASSUMED, BATCH_ASSUMED]
        if self.mnbt_for(v[ENCODER]) != self.mnbt:
            out.append(STEP_ASSUMED)
        if self.pool_decides:
            out.append(POOL_ASSUMED)
        return tuple(sorted(out))

    def settings(self, v: Mapping[str, int]) -> tuple[str, ...]:
        """The flags to copy into the launch for split ``v``."""
        out = [f"--num-gpu-blocks-override {v[KV]}", f"--max-num-batched-tokens {self.mnbt_for(v[ENCODER])}"]
        if v[POOL] or self.today_pool:
            out.append(f"--mm-ipc-gpu-memory-gb {gib_text(v[POOL])}")
        if self.inp.flags.block_size != 16:
            out.append(f"--block-size {self.inp.flags.block_size}")
        return tuple(out)


_SHARED: dict[str, Any] = {}  # what forked workers inherit: the replays of one traffic


def _served_shared(blocks: int) -> list[int]:
    replays: prefix.BlockReplays = _SHARED["replays"]
    return replays.served(blocks)


def _max_num_seqs(req: VllmRequest, max_model_len: int | None) -> int:
    """``max_num_seqs`` as the launch sets it, else as vLLM defaults it for the GPU (1 where unknown)."""
    if req.max_num_seqs is not None:
        return req.max_num_seqs
    if max_model_len is None:
        return 1
    return eb.default_batched_tokens(
        req.release.batch_defaults,
        req.gpu or H200,
        performance_mode=req.performance_mode,
        max_model_len=max_model_len,
        chunked_prefill=req.chunked_prefill,
    ).max_num_seqs


def gib_text(nbytes: int) -> str:
    """The ``--mm-ipc-gpu-memory-gb`` float whose ``int(gb * 2**30)`` is exactly ``nbytes`` (a quotient by a
    power of two is exact below 2**53 bytes, and ``repr`` reads back as the same float).

    >>> gib_text(0), gib_text(64 << 20), gib_text(3 << 30)
    ('0', '0.0625', '3')
    """
    if nbytes == 0:
        return "0"
    text = repr(nbytes / GiB)
    text = text[:-2] if text.endswith(".0") else text
    if bytes_of(float(text)) != nbytes:  # beyond 2**53 bytes: no GPU has them
        raise MmpoolError(f"{nbytes:,} B is not a --mm-ipc-gpu-memory-gb value vLLM reads exactly")
    return text


def _assumptions(s: Scorer) -> list[str]:
    out = [
        f"prefix cache: {vllm_prefix.assumed(s.built, s.inp.flags)}",
        f"encoder cache: {encoder_replay.ASSUMED.format(window=s.inp.window)}",
        "--max-num-batched-tokens also sets the scheduler's step and the decoder's profile batch of that many "
        "tokens, whose activations vLLM takes out of the KV cache too (v1/worker/gpu/model_runner.py:1086-1091) and "
        "mmpool does not measure: only the encoder cache's bytes are counted; a row that raises it needs the "
        "start-up log's 'Available KV cache memory' to confirm its KV blocks fit",
        "KV: batch is the most requests whose prompts (in whole blocks) fit at once, the shortest first",
    ]
    if s.pool_decides:
        out.append(
            "decode pool: each video decoded once against one API process's share; concurrent decodes wait for "
            "room (gpu_ipc_memory.py:94-97), which no count here shows"
        )
    return out
