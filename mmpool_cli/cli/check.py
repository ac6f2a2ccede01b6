"""``mmpool check``: an SGLang launch command and its environment, before launch; ``--exec`` runs it."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.check_traffic import hold_to_traffic, hold_vllm_to_traffic, traffic_bounds
from mmpool_cli.cli.options import (
    ContextOpt,
    EnvFileOpt,
    EnvOpt,
    ExitZeroOpt,
    FeatureOpt,
    GranularityOpt,
    NoProcessEnvOpt,
    QuietOpt,
    ReportFormat,
    ReportFormatOpt,
    SglangVersionOpt,
    StrictOpt,
    VerboseOpt,
    context_arg,
    environment,
    granularity_arg,
    sglang_release,
    size_arg,
    spelled,
)
from mmpool_cli.cli.vllm_options import VllmCheckOptions
from mmpool_cli.core.bounds import gpu_memory_problem, largest_gpu
from mmpool_cli.core.reports import Report
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK, MmpoolError
from mmpool_cli.render import render


@app.command(
    context_settings={"allow_interspersed_args": False},
    short_help="Check an SGLang or vLLM launch command before launch.",
    epilog=epilog(
        [
            "mmpool check -- python -m sglang.launch_server --model-path MODEL --tp 8",
            "mmpool check --exec --strict -- sglang serve MODEL --config sglang.yaml",
            "mmpool check -- vllm serve ./Qwen2.5-VL-7B-Instruct -dp 4 --config v.yaml",
            "mmpool check -v --from server.log -- sglang serve M --max-total-tokens N",
            "mmpool check --from b.jsonl -- vllm serve ./M --num-gpu-blocks-override N",
        ],
        "0 the launch is valid (with --exec: the launch command's own status); 1 an error finding (or a "
        "warning with --strict); 2 usage error, or not an SGLang or vLLM launch; 70 internal error.",
    ),
)
def check(
    ctx: typer.Context,
    command: Annotated[
        list[str], typer.Argument(metavar="-- LAUNCH COMMAND...", help="The SGLang or vLLM launch command, after --.")
    ],
    exec_: Annotated[
        bool, typer.Option("--exec", help="Run the launch command in mmpool's place when the check passes.")
    ] = False,
    record: Annotated[
        str | None,
        typer.Option("--record", metavar="DIR", help="With --exec: record SGLang's pools into DIR (mmpool record)."),
    ] = None,
    hf_model_type: Annotated[
        str | None,
        typer.Option("--hf-model-type", help="The model's config.json model_type, e.g. qwen3_vl, qwen3_vl_moe."),
    ] = None,
    sm90: Annotated[
        bool | None, typer.Option("--sm90/--no-sm90", help="The GPUs are Hopper (SM 9.0) with CUDA >= 12.3.")
    ] = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            "--gpu-memory", metavar="SIZE", help=f"Total memory of the smallest GPU: 1GiB to {largest_gpu()}."
        ),
    ] = None,
    feature_size: FeatureOpt = None,
    context_size: ContextOpt = None,
    vmm_granularity: GranularityOpt = "2MiB",
    probe_pidfd: Annotated[
        bool,
        typer.Option("--probe-pidfd/--no-probe-pidfd", help="Test pidfd_getfd rights when IPC needs them."),
    ] = True,
    env: EnvOpt = None,
    env_file: EnvFileOpt = None,
    no_process_env: NoProcessEnvOpt = False,
    output: ReportFormatOpt = ReportFormat.human,
    strict: StrictOpt = False,
    verbose: VerboseOpt = False,
    quiet: QuietOpt = False,
    exit_zero: ExitZeroOpt = False,
    sglang_version: SglangVersionOpt = None,
    vllm_version: Annotated[
        str | None, typer.Option("--vllm-version", metavar="X.Y.Z", help="vLLM launches: the release (0.30.0-0.34.0).")
    ] = None,
    gpu_name: Annotated[
        str | None, typer.Option("--gpu-name", metavar="NAME", help="vLLM launches: the GPU's name (batch defaults).")
    ] = None,
    host_memory: Annotated[
        str | None,
        typer.Option("--host-memory", metavar="SIZE", help="vLLM launches: host RAM (default: this machine's)."),
    ] = None,
    shm_size: Annotated[
        str | None,
        typer.Option("--shm-size", metavar="SIZE", help="vLLM launches: /dev/shm size (default: this machine's)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", metavar="NAME|PATH", help="vLLM launches: the model family or directory, for a hub id."
        ),
    ] = None,
    image: Annotated[
        list[str] | None, typer.Option("--image", metavar="WxH", help="vLLM launches: an image of a request.")
    ] = None,
    video: Annotated[
        list[str] | None,
        typer.Option(
            "--video", metavar="WxH:SECONDS:FPS", help="vLLM launches: a video of a request (or WxH:FRAMES@FPS)."
        ),
    ] = None,
    traffic: Annotated[
        list[str] | None,
        typer.Option(
            "--from",
            metavar="FILE",
            help="Traffic to hold the launch to (SGLang: a server log or OpenAI bodies; vLLM: OpenAI bodies); repeat.",
        ),
    ] = None,
    max_fallback: Annotated[
        int | None,
        typer.Option(
            "--max-fallback",
            metavar="N",
            help="With --from: an error if more than N features fall back (vLLM: videos the decode pool refuses).",
        ),
    ] = None,
    min_prefix_hit: Annotated[
        str | None,
        typer.Option(
            "--min-prefix-hit", metavar="PCT", help="With --from: an error if the prefix cache serves under PCT%."
        ),
    ] = None,
) -> None:
    """Check an SGLang or vLLM launch command and its environment before launch; --exec then runs it.

    With --from, the launch is also replayed over that traffic as 'mmpool tune' scores today's launch, and
    held to --max-fallback and --min-prefix-hit."""
    from mmpool_cli.engines.sglang.resolution import Assumptions
    from mmpool_cli.engines.vllm.args import launch_words
    from mmpool_cli.usecases.check import check as run_check

    with reported():
        bounds = traffic_bounds(traffic, max_fallback, min_prefix_hit)
        if record is not None and not exec_:
            raise MmpoolError("--record records the launch that --exec runs: add --exec")
        if exec_ and exit_zero:
            given = spelled(ctx, "exit_zero", "--exit-zero", "MMPOOL_EXIT_ZERO")
            fix = "drop --exit-zero" if given == "--exit-zero" else "unset MMPOOL_EXIT_ZERO for this call"
            raise MmpoolError(
                f"--exec runs the launch only when the check passes, and {given} passes every check; {fix}"
            )
        if exec_ and (env or env_file or no_process_env):
            raise MmpoolError(
                "--exec runs the launch with mmpool's own environment, so --env, --env-file and "
                "--no-process-env would check a different one: export the variables instead"
            )
        environ, env_findings = environment(no_process_env, env_file, env)
        vllm = VllmCheckOptions(vllm_version, gpu_name, host_memory, shm_size, model, image or [], video or [])
        report = None
        if launch_words(command) is not None:
            sglang_given = [
                flag
                for flag, value in (
                    ("--sglang-version", sglang_version),
                    ("--hf-model-type", hf_model_type),
                    ("--sm90", sm90),
                    ("--feature-size", feature_size),
                    ("--context-size", context_size),
                )
                if value is not None and value != []
            ]
            if sglang_given:
                raise MmpoolError(f"this is a vLLM launch: {sglang_given[0]} is SGLang's; see --help for vLLM's")
            known = None if gpu_memory is None else _gpu_memory(gpu_memory)
            gpu = None if gpu_memory is None and gpu_name is None else vllm.gpu(known)
            assume = vllm.assumptions(environ, gpu)
            report = run_check(
                command,
                environ,
                assume,
                env_file_findings=env_findings,
                strict=strict,
                sglang_version=assume.version,
                sglang_version_chosen=assume.version_chosen,
                engine_name="vllm",
            )
            if traffic and bounds is not None:
                report = hold_vllm_to_traffic(report, command, environ, assume, traffic, bounds)
        elif _names_vllm(command):
            from mmpool_cli.engines.vllm.engine import LAUNCHERS

            shown = " ".join(command[:3])[:80]
            raise MmpoolError(f"{shown!r} is not a vLLM server launch: mmpool check accepts {LAUNCHERS}")
        elif vllm.given():
            raise MmpoolError(f"{vllm.given()[0]} applies to vLLM launches ('vllm serve …'), not to SGLang's")
    if report is not None:
        _finish(report, output, quiet, command, exec_, exit_zero, verbose, record)
    with reported():
        _sglang_launch(command)
        version, chosen = sglang_release(sglang_version, environ)
        assume = Assumptions(
            hf_model_type=hf_model_type,
            sm90=sm90,
            gpu_memory=None if gpu_memory is None else _gpu_memory(gpu_memory),
            feature_sizes=tuple(size_arg("--feature-size", s) for s in feature_size or ()),
            context_bytes=None if context_size is None else context_arg(context_size),
            vmm_granularity=granularity_arg(vmm_granularity),
            probe_pidfd=probe_pidfd,
            sglang_version=version,
            sglang_version_chosen=chosen,
        )
        report = run_check(
            command,
            environ,
            assume,
            env_file_findings=env_findings,
            strict=strict,
            sglang_version=version,
            sglang_version_chosen=chosen,
        )
        if traffic and bounds is not None:
            report = hold_to_traffic(report, command, environ, assume, traffic, bounds)
    _finish(report, output, quiet, command, exec_, exit_zero, verbose, record)


def _finish(
    report: Report,
    output: ReportFormat,
    quiet: bool,
    command: list[str],
    exec_: bool,
    exit_zero: bool,
    verbose: bool,
    record: str | None = None,
) -> None:
    # With --exec the server owns stdout: the report goes to stderr.
    emit(render("report", output.value, report, launch=command, quiet=quiet, verbose=verbose), err=exec_)
    if not report.ok:
        raise typer.Exit(EXIT_OK if exit_zero else EXIT_FINDINGS)
    if exec_:
        from mmpool_cli.cli.launch import exec_command

        if record is None:
            exec_command(command)
        from mmpool_cli.cli.record import launched, prepared

        launched(prepared(record, command, "1GiB", None))
    raise typer.Exit(EXIT_OK)


def _sglang_launch(command: list[str]) -> None:
    """Refuse a command that launches neither engine, naming both engines' launch forms."""
    from mmpool_cli.engines.sglang.launch import LAUNCHERS, split_launcher
    from mmpool_cli.engines.vllm.engine import LAUNCHERS as VLLM_LAUNCHERS

    try:
        split_launcher(command)
    except MmpoolError:
        if not command:
            raise
        shown = " ".join(command[:3])[:80]
        raise MmpoolError(
            f"{shown!r} is neither an SGLang nor a vLLM launch: mmpool check accepts {LAUNCHERS} (SGLang), "
            f"or {VLLM_LAUNCHERS} (vLLM)"
        ) from None


def _names_vllm(command: list[str]) -> bool:
    """Whether ``command`` runs vLLM some other way than its server (``vllm chat``, another module)."""
    program = os.path.basename(command[0]) if command else ""
    return program == "vllm" or any(word.startswith("vllm.") for word in command[1:3])


def _gpu_memory(text: str) -> int:
    nbytes = size_arg("--gpu-memory", text)
    problem = gpu_memory_problem(nbytes)
    if problem:
        raise MmpoolError(f"--gpu-memory: {problem}")
    return nbytes
