"""The pre-launch check: a real SGLang launch command, resolved and planned as the chosen release would.

Which launcher it is, its words after the ``--config`` merge, the model SGLang needs, and then
``sglang.resolution`` for the transport and the plan. Pure core: no typer, rich or torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult
from mmpool_cli.engines.sglang import env_vars as envmod
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.args import Reading, Token, cli_tokens, read
from mmpool_cli.engines.sglang.config_merge import merge_config
from mmpool_cli.engines.sglang.flags import table
from mmpool_cli.engines.sglang.models import PlanRequest
from mmpool_cli.engines.sglang.resolution import Assumptions, Resolution, resolve
from mmpool_cli.errors import MmpoolError

LAUNCHERS = "'python -m sglang.launch_server …', 'python3 -m sglang.launch_server …' or 'sglang serve …'"
ENV = envmod.ENV_LOCATION


def split_launcher(argv: list[str]) -> tuple[str, int]:
    """Which SGLang launcher ``argv`` runs and where its server arguments start.

    Raises:
        MmpoolError: not an SGLang launch command (a usage error, exit 2).
    """
    if not argv:
        raise MmpoolError(f"give the launch command after '--', e.g. {LAUNCHERS}")
    program = os.path.basename(argv[0])
    if program.startswith("python"):
        for n in range(1, len(argv) - 1):
            if argv[n] == "-m":
                if argv[n + 1] == "sglang.launch_server":
                    return "launch_server", n + 2
                break
            if not argv[n].startswith("-"):
                break
    if program == "sglang" and len(argv) > 1 and argv[1] == "serve":
        return "serve", 2
    raise MmpoolError(f"{' '.join(argv[:3])!r} is not an SGLang launch: mmpool check accepts {LAUNCHERS}")


def _serve_tokens(tokens: list[Token]) -> tuple[list[Token], bool]:
    """``sglang serve``'s own handling: drop ``--model-type X``, a first positional is the model path."""
    kept: list[Token] = []
    n = 0
    while n < len(tokens):
        tok = tokens[n]
        if tok.text == "--model-type":
            n += 2
            continue
        if not tok.text.startswith("--model-type="):
            kept.append(tok)
        n += 1
    if kept and not kept[0].text.startswith("-"):
        kept = [Token("--model-path", kept[0].origin), *kept]
    has_model = any(
        (t.text in ("--model-path", "--model") and i + 1 < len(kept))
        or t.text.startswith(("--model-path=", "--model="))
        for i, t in enumerate(kept)
    )
    return kept, has_model


def check_launch(
    argv: list[str], environ: Mapping[str, str], assume: Assumptions, cwd: str | None = None
) -> FileResult:
    """Check one launch command against the rules of ``assume.sglang_version`` and plan its pools."""
    return _launch(argv, environ, assume, cwd)[0]


@dataclass(frozen=True)
class TuneLaunch:
    """What ``check --from`` needs of a launch to score it over traffic as ``mmpool tune`` scores today's row:
    the flags ``tune`` takes as its own, read from the launch as SGLang reads them."""

    pools: PlanRequest | None  # the pool's plan request (None: the launch makes no pool)
    model_path: str | None
    workers: int
    tp: int
    max_total_tokens: int | None  # --max-total-tokens (None: not given)
    page_size: int
    disable_radix_cache: bool
    tokenizer_path: str | None


def tune_launch(
    argv: list[str], environ: Mapping[str, str], assume: Assumptions, cwd: str | None = None
) -> TuneLaunch | None:
    """The launch's settings for ``tune``; None where the launch fails its check (an error finding: it would
    not start, so it serves no traffic). A value mmpool does not read as SGLang does raises ``MmpoolError``."""
    result, reading, resolution = _launch(argv, environ, assume, cwd)
    if result.fails() or reading is None or resolution is None:
        return None
    return TuneLaunch(
        pools=resolution.request,
        model_path=reading.get("model_path"),
        workers=reading.get("tokenizer_worker_num"),
        tp=reading.get("tp_size"),
        max_total_tokens=_whole(reading, "--max-total-tokens", None),
        page_size=_whole(reading, "--page-size", 1) or 1,
        disable_radix_cache="--disable-radix-cache" in reading.others,
        tokenizer_path=None if (t := reading.others.get("--tokenizer-path")) is None else t.value,
    )


def _whole(reading: Reading, option: str, default: int | None) -> int | None:
    """A count option of the launch as digits (SGLang's own parser takes it; mmpool reads digits only, and says so
    rather than guess at another spelling)."""
    setting = reading.others.get(option)
    if setting is None:
        return default
    text = str(setting.value or "").strip()
    if not text.isdigit():
        raise MmpoolError(
            f"{setting.origin}: {option} {text[:40]!r}: check --from reads it as a whole number of digits; write it so"
        )
    return int(text)


def _launch(
    argv: list[str], environ: Mapping[str, str], assume: Assumptions, cwd: str | None
) -> tuple[FileResult, Reading | None, Resolution | None]:
    launcher, start = split_launcher(argv)
    tokens = cli_tokens(argv[start:], start)
    findings: list[Finding] = []
    serve_model = True
    if launcher == "serve":
        tokens, serve_model = _serve_tokens(tokens)
    flags = table(versions.release(assume.sglang_version).version)
    launch = merge_config(tokens, cwd, flags)
    findings += launch.findings
    reading = read(launch.tokens, Reading(flags=flags))
    findings += reading.findings
    help_word = _help(launcher, tokens, reading, findings)
    if help_word is not None:
        findings = [f for f in findings if f.severity is not Severity.error]  # SGLang never gets to them
        message = f"SGLang prints its help at {help_word.text!r} and exits 0: nothing is launched and no pool is made"
        findings.append(Finding(Severity.info, "launch-help", message, help_word.origin))
        return FileResult(path="launch command", kind="launch", findings=_dedupe(findings), transport="cpu"), None, None
    if launcher == "serve" and not serve_model:
        findings.append(
            Finding(
                Severity.error,
                "model-path-missing",
                "'sglang serve' needs the model on its command line, even with --config: it fails with "
                "'Error: --model-path is required. Please provide the path to the model.'; add --model-path MODEL",
                "argv[1]",
            )
        )
    elif not reading.given("model_path"):
        findings.append(
            Finding(
                Severity.error,
                "model-path-missing",
                "SGLang fails with 'the following arguments are required: --model-path/--model'; "
                "add --model-path MODEL",
                "argv[0]",
            )
        )
    launch_env = envmod.read_launch_env(environ)
    resolution = resolve(reading, launch_env, assume)
    findings += envmod.env_findings(environ)
    budget_place = envmod.where(environ, launch_env.budget.variable)  # the --env-file line that set it
    findings += [
        replace(f, location=budget_place) if f.location == ENV and f.subject == "env" else f
        for f in resolution.findings
    ]
    result = FileResult(
        path="launch command",
        kind="launch",
        findings=_dedupe(findings),
        plan=resolution.plan,
        transport=resolution.transport,
    )
    return result, reading, resolution


def _help(launcher: str, tokens: list[Token], reading: Reading, before: list[Finding]) -> Token | None:
    """The help word SGLang stops at, or None: it launches (or fails) instead.

    ``sglang serve`` prints its help for an exact ``-h`` or ``--help`` anywhere (cli/serve.py), before
    anything is parsed; ``launch_server``'s argparse does at the first help option it reaches, unless
    the config merge or an option before it failed first (unrecognized words argparse collects, and
    refuses only once it parsed them all).
    """
    if launcher == "serve":
        return next((t for t in tokens if t.text in ("-h", "--help")), None)
    failed = any(f.severity is Severity.error and f.code != "unrecognized-argument" for f in before)
    if reading.help_at is None or failed:
        return None
    return reading.help_at


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, str | None]] = set()
    unique = []
    for f in findings:
        key = (f.code, f.message, f.location)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique
