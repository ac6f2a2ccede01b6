"""``mmpool plan``: what SGLang will do with a pool budget."""

from __future__ import annotations

import dataclasses
import os

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.options import (
    EngineChoice,
    EngineOpt,
    FormatOpt,
    OutputFormat,
    told,
)
from mmpool_cli.cli.pool_options import PoolOptions, with_pool_options
from mmpool_cli.cli.vllm_options import VllmOptions, refuse_mixed, vllm_workload, with_vllm_options
from mmpool_cli.cli.workload_options import WorkloadOptions, with_workload_options
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK
from mmpool_cli.render import render
from mmpool_cli.usecases.plan import plan as make_plan


@app.command(
    short_help="What SGLang will do with a pool budget.",
    epilog=epilog(
        [
            "mmpool plan",
            "mmpool plan --size 1GiB --workers 4 --tp 8 --feature-size 48MiB",
            "mmpool plan --model qwen2.5-vl --image 1920x1080 --workers 4 --tp 8",
            "mmpool plan --engine vllm --model qwen2.5-vl --data-parallel-size 4",
        ],
        "0 the plan is valid; 1 the engine would fail with it (the plan is still printed); 2 usage error; "
        "70 internal error.",
    ),
)
@with_pool_options
@with_workload_options
@with_vllm_options
def plan(
    ctx: typer.Context,
    pool: PoolOptions,
    workload: WorkloadOptions,
    vllm: VllmOptions,
    engine: EngineOpt = EngineChoice.sglang,
    output: FormatOpt = OutputFormat.human,
) -> None:
    """Show exactly what SGLang will do with a pool budget: split, header, capacity, HBM.

    With --model and the items of one request (--image, --video, --audio), the tensors they put
    in the pool join the capacity table; with a model directory, the KV-cache cost too.
    With --engine vllm: vLLM's processor cache, encoder cache and GPU decode pool instead.
    """
    with reported():
        refuse_mixed(engine.value, pool.given(), vllm.given())
    if engine is EngineChoice.vllm:
        _plan_vllm(workload, vllm, output)
        return
    with reported():
        request = pool.request(os.environ, told(ctx))
        load, kv = workload.resolve(os.environ)
        request = dataclasses.replace(request, workload=load, kv=kv)
    result = make_plan(request)
    emit(render("plan", output.value, result))
    raise typer.Exit(EXIT_FINDINGS if result.status == "fail" else EXIT_OK)


def _plan_vllm(workload: WorkloadOptions, vllm: VllmOptions, output: OutputFormat) -> None:
    from mmpool_cli.usecases.plan import plan as run_plan

    with reported():
        model, items = vllm_workload(workload)
        request = vllm.request(os.environ, model, items)
    result = run_plan(request, engine_name="vllm")
    emit(render("vllm-plan", output.value, result))
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FINDINGS)
