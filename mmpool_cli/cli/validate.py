"""``mmpool validate``: mmpool configs, SGLang ``--config`` files and the environment."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.options import (
    EnvFileOpt,
    EnvOpt,
    ExitZeroOpt,
    IdleTimeoutOpt,
    KindChoice,
    NoProcessEnvOpt,
    QuietOpt,
    ReportFormat,
    ReportFormatOpt,
    SglangVersionOpt,
    StrictOpt,
    VerboseOpt,
    check_idle_timeout,
    environment,
    sglang_release,
)
from mmpool_cli.core.bounds import IDLE_TIMEOUT_S
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK, MmpoolError
from mmpool_cli.inputs.filebytes import read_stdin
from mmpool_cli.render import render


@app.command(
    short_help="Validate config files and the environment.",
    epilog=epilog(
        ["mmpool validate mmpool.yaml sglang-config.yaml", "mmpool validate --format github --strict configs/*.yaml"],
        "0 every input is valid (warnings allowed unless --strict); 1 an error finding (or a warning with "
        "--strict); 2 usage error; 70 internal error.",
    ),
)
def validate(
    files: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[FILE]...",
            help="Files to validate; - reads stdin; a directory: its mmpool*/sglang* .yaml, .yml, .json files. "
            "None: the environment alone.",
        ),
    ] = None,
    kind: Annotated[
        KindChoice, typer.Option("--kind", help="Read every file as this kind (auto: by its top-level keys).")
    ] = KindChoice.auto,
    env: EnvOpt = None,
    env_file: EnvFileOpt = None,
    no_process_env: NoProcessEnvOpt = False,
    output: ReportFormatOpt = ReportFormat.human,
    strict: StrictOpt = False,
    verbose: VerboseOpt = False,
    quiet: QuietOpt = False,
    exit_zero: ExitZeroOpt = False,
    sglang_version: SglangVersionOpt = None,
    idle_timeout: IdleTimeoutOpt = IDLE_TIMEOUT_S,
    vllm_version: Annotated[
        str | None, typer.Option("--vllm-version", metavar="X.Y.Z", help="With --kind vllm: the vLLM release.")
    ] = None,
) -> None:
    """Validate mmpool configs, SGLang and vLLM --config files and the environment; report every finding."""
    from mmpool_cli.usecases.validate import validate as run_validate

    with reported():
        environ, env_findings = environment(no_process_env, env_file, env)
        check_idle_timeout(idle_timeout)
        if kind is KindChoice.vllm:
            if sglang_version:
                raise MmpoolError("--sglang-version does not apply to --kind vllm; give --vllm-version")
            from mmpool_cli.engines import engine

            version, chosen = engine("vllm").choose_release(vllm_version, environ)
        elif vllm_version:
            raise MmpoolError("--vllm-version applies to --kind vllm")
        else:
            version, chosen = sglang_release(sglang_version, environ)
    files = files or []
    stdin = read_stdin(sys.stdin.buffer, idle_timeout) if "-" in files else None
    report = run_validate(
        files,
        environ,
        kind=kind.value,
        stdin=stdin,
        env_file_findings=env_findings,
        strict=strict,
        sglang_version=version,
        sglang_version_chosen=chosen,
        engine_name="vllm" if kind is KindChoice.vllm else "sglang",
    )
    emit(render("report", output.value, report, verbose=verbose, quiet=quiet))
    raise typer.Exit(EXIT_OK if report.ok or exit_zero else EXIT_FINDINGS)
