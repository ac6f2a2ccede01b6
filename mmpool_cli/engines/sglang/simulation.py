"""What ``mmpool simulate`` needs of SGLang: which releases it can replay, their pool rules, the recycler.

The simulator itself (``mmpool_cli.simulate``) knows no engine; this module reads the chosen
release's record and SGLang's environment into the neutral ``PoolRules`` and interval it takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from mmpool_cli.core.bounds import MAX_WORKERS
from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import NS_PER_S
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.env_vars import recycle_from_env
from mmpool_cli.engines.sglang.models import Plan, PlanRequest
from mmpool_cli.engines.sglang.versions import Release
from mmpool_cli.errors import MmpoolError
from mmpool_cli.simulate.allocator import PoolRules
from mmpool_cli.simulate.sim_report import PoolSetup


def refusal(rel: Release, transport: str) -> str | None:
    """Why ``rel`` with ``transport`` cannot be simulated (a usage error), or None when it can."""
    if transport != "cuda_ipc":
        return "simulate models cuda_ipc only: the cuda_vmm allocator (packed leases, no slot cap) is not"
    if not rel.stream_ordered:
        stream_ordered = [v for v in versions.known() if versions.release(v).stream_ordered]
        first, last = stream_ordered[0], versions.known()[-1]
        return (
            f"simulate models the stream-ordered pool of SGLang {first} and later (its allocator is the same "
            f"through {last}); SGLang {rel.version} has the older shm-counter pool: pick "
            f"--sglang-version {first} or later"
        )
    return None


def pool_rules(rel: Release) -> PoolRules:
    """The cuda_ipc allocator's rules in ``rel`` (a stream-ordered release: ``refusal`` is None)."""
    assert rel.max_inflight_slices is not None, "only a stream-ordered pool is simulated"
    return PoolRules("cuda_ipc", rel.data_alignment, rel.max_inflight_slices)


def recycle_interval_ns(environ: Mapping[str, str]) -> tuple[int, str]:
    """The recycler's interval in whole nanoseconds, read as SGLang reads it, and where it came from.

    A value Python's ``float()`` rejects falls back to SGLang's 0.05 s (SGLang only warns); one
    SGLang refuses or cannot run with (not positive, NaN, too large to wait on) is a usage error.
    """
    recycle = recycle_from_env(environ)
    seconds = recycle.seconds
    if recycle.variable is None or recycle.invalid:
        source = "default"
    else:
        source = f"{recycle.variable}={recycle.raw}"
        if math.isnan(seconds) or not 0 < seconds <= sg.MAX_WAIT_SEC:
            raise MmpoolError(
                f"{source}: SGLang's recycler cannot run with this interval (see 'mmpool check'); "
                "set a positive number of seconds, e.g. 0.05"
            )
    ns = round(Fraction(seconds) * NS_PER_S)
    if ns <= 0:
        raise MmpoolError(f"{source}: the interval is under a nanosecond; set e.g. 0.05")
    return ns, source


def setup(request: PlanRequest, plan: Plan, environ: Mapping[str, str]) -> PoolSetup:
    """The pools of ``plan`` for the simulator; a layout SGLang refuses (no consumers) is a usage error."""
    if plan.consumers is None or request.workers < 1:  # a layout SGLang refuses: nothing to simulate
        raise MmpoolError(_first_error(plan) or "the parallel layout has no consumers")
    if request.workers > MAX_WORKERS:
        raise MmpoolError(f"--workers {request.workers}: simulate handles at most {MAX_WORKERS} tokenizer workers")
    rel = versions.release(request.sglang_version)
    header = rel.header_bytes(plan.consumers)
    recycle_ns, recycle_source = recycle_interval_ns(environ)
    refused = None
    if plan.per_worker_bytes is None or plan.per_worker_bytes <= header:
        refused = _first_error(plan) or "SGLang refuses this budget"
    return PoolSetup(
        workers=request.workers,
        per_worker_bytes=None if refused else plan.per_worker_bytes,
        header_bytes=header,
        consumers=plan.consumers,
        tp_size=request.tp_size,
        rules=pool_rules(rel),
        recycle_ns=recycle_ns,
        recycle_source=recycle_source,
        budget_bytes=plan.budget_bytes,
        budget_mb=plan.sglang_mm_feature_cache_mb,
        refused=refused,
        version=request.sglang_version,
        chosen=request.sglang_version_chosen,
    )


def _first_error(plan: Plan) -> str | None:
    return next((f.message for f in plan.findings if f.severity is Severity.error), None)
