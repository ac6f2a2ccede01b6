"""``mmpool check --from``: the launch held to its traffic, its row scored as ``mmpool tune`` scores today's launch."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from mmpool_cli.core.reports import Report
from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.core.findings import Finding
    from mmpool_cli.engines.sglang.launch import TuneLaunch
    from mmpool_cli.usecases.check import TrafficBounds
    from mmpool_cli.usecases.tune import TuneQuery


def traffic_bounds(
    traffic: list[str] | None, max_fallback: int | None, min_prefix_hit: str | None
) -> TrafficBounds | None:
    """The bounds of --from, checked (a usage error without --from, or out of range); None without --from."""
    from mmpool_cli.usecases.check import TrafficBounds

    if not traffic:
        given = "--max-fallback" if max_fallback is not None else "--min-prefix-hit" if min_prefix_hit else None
        if given:
            raise MmpoolError(
                f"{given} holds the launch to its traffic: add --from FILE (a server log or OpenAI bodies)"
            )
        return None
    if max_fallback is not None and max_fallback < 0:
        raise MmpoolError(f"--max-fallback {max_fallback}: a count of features, 0 or more")
    hit = None
    if min_prefix_hit is not None:
        try:
            hit = Fraction(Decimal(min_prefix_hit.strip()))
        except (InvalidOperation, ValueError):
            hit = None
        if hit is None or not 0 <= hit <= 100:
            raise MmpoolError(f"--min-prefix-hit {min_prefix_hit}: a percentage from 0 to 100, e.g. 30 or 99.5")
    return TrafficBounds(max_fallback, hit)


def hold_to_traffic(
    report: Report,
    command: list[str],
    environ: Mapping[str, str],
    assume: Any,
    traffic: list[str],
    bounds: TrafficBounds,
) -> Report:
    """The report with the launch's row over ``traffic`` (as ``tune`` scores today's) held to ``bounds``; a launch
    that fails its check already is left as it is (it would not start)."""
    from mmpool_cli.engines.sglang.launch import tune_launch
    from mmpool_cli.usecases.check import traffic_findings
    from mmpool_cli.usecases.tune import tune_at

    launch = tune_launch(command, environ, assume)
    if launch is None:
        return report
    row = tune_at(_tune_query(launch, traffic, environ))
    return _with_findings(report, traffic_findings(row, traffic, bounds))


def hold_vllm_to_traffic(
    report: Report,
    command: list[str],
    environ: Mapping[str, str],
    assume: Any,
    traffic: list[str],
    bounds: TrafficBounds,
) -> Report:
    """``hold_to_traffic`` for a vLLM launch: its row over ``traffic`` as ``tune --engine vllm`` scores today's,
    the launch's flags read as ``check`` reads them; a launch that fails its check already is left as it is."""
    from mmpool_cli.cli.prefix_options import vllm_prefix_flags
    from mmpool_cli.core.findings import Finding, Severity
    from mmpool_cli.engines.vllm.engine import read_launch_request
    from mmpool_cli.engines.vllm.prefix import flags_of_launch
    from mmpool_cli.usecases import tune_vllm
    from mmpool_cli.usecases.check import TRAFFIC, traffic_findings

    if report.results[-1].fails():  # the launch's result
        return report
    launch = read_launch_request(command, environ, assume)
    if launch.request.model is None or launch.model_dir is None:
        raise MmpoolError(
            "--from: the launch's model is not a local directory, so its traffic and KV blocks cannot be sized; "
            "pass --model DIR (the model's folder, with its config.json)"
        )
    read = flags_of_launch(launch.reading, launch.model_dir)
    if read.num_blocks is None:
        raise MmpoolError(
            "--from: the launch gives no --num-gpu-blocks-override, so its KV blocks are unknown offline; add the "
            "num_gpu_blocks vLLM reports once started (its vllm:cache_config_info metric) to the launch"
        )
    # the bounds `tune --engine vllm` holds these flags to; the launch's own --block-size, not a default for 0
    flags = vllm_prefix_flags(
        not read.enabled, read.num_blocks, launch.reading.get("block_size"), read.tokenizer, launch.model_dir
    )
    # the launch's items (--image, --video) describe one request of `check`'s plan, not the traffic: tune's none
    request = dataclasses.replace(launch.request, items=())
    req = tune_vllm.tune_request(traffic, request, flags, environ=environ)
    found = traffic_findings(tune_vllm.tune_at(req), traffic, bounds, engine_name="vllm")
    # a video the pool cannot size is in no count: said as tune says it, never read as a video that fits
    found += [
        Finding(Severity.warning, "vllm-tune-video-unsized", why, TRAFFIC) for why in tune_vllm.video_warnings(req)
    ]
    return _with_findings(report, found)


def _with_findings(report: Report, found: list[Finding]) -> Report:
    """``report`` with ``found`` added to its launch's result (the last: the environment's file findings are
    folded into it)."""
    result = report.results[-1]
    results = [*report.results[:-1], dataclasses.replace(result, findings=result.findings + found)]
    return dataclasses.replace(report, results=results)


def _tune_query(launch: TuneLaunch, traffic: list[str], environ: Mapping[str, str]) -> TuneQuery:
    """What ``mmpool tune`` is asked for this launch's flags and traffic (tune's own query, so one rule reads
    both), with the launch's pool request and the environment checked (``--env``, ``--env-file``)."""
    from mmpool_cli.cli.cache_options import LogFormat
    from mmpool_cli.cli.prefix_options import prefix_options
    from mmpool_cli.cli.tune import tune_query

    if launch.model_path is None:
        raise MmpoolError("--from: the launch names no --model-path, so its traffic cannot be sized")
    if launch.max_total_tokens is None:
        raise MmpoolError(
            "--from: the launch gives no --max-total-tokens, so its KV capacity is unknown offline; add the "
            "max_total_num_tokens SGLang prints at start-up to the launch"
        )
    if launch.pools is None:
        raise MmpoolError(
            "--from: the launch makes no feature pool (its transport resolves to cpu: every feature takes the CPU "
            "path), and its traffic is replayed through the pool tune divides; add --mm-feature-transport cuda_ipc"
        )
    query = tune_query(
        launch.model_path,
        traffic,
        None,
        "no-fallback",
        2,
        None,
        launch.workers,
        launch.tp,
        LogFormat.auto,
        None,
        None,
        None,
        prefix_options(launch.max_total_tokens, launch.disable_radix_cache, launch.page_size, launch.tokenizer_path),
    )
    cache = dataclasses.replace(query.cache, environ=environ)
    return dataclasses.replace(query, cache=cache, pools=launch.pools)
