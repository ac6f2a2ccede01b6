"""Help that reads on an 80-column terminal, with examples and exit codes, and shell completion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = ["plan", "probe", "validate", "check", "schema", "simulate"]


def _mmpool(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COLUMNS": "80", **env}
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], capture_output=True, text=True, env=environ, check=False
    )


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_fits_80_columns_uncut(command: str | None) -> None:
    result = _mmpool(*([command] if command else []), "--help")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout  # nothing cut to fit
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize("command", [*COMMANDS, "cache", "trace"])
def test_help_has_an_example_and_the_exit_codes(command: str) -> None:
    out = _mmpool(command, "--help").stdout
    assert f"$ mmpool {command}" in out
    assert "Exit codes: 0 " in out


def test_long_option_names_are_shown_whole() -> None:
    out = _mmpool("plan", "--help").stdout
    assert "--workers, --tokenizer-worker-num N" in out
    assert "--transport, --mm-feature-transport <cuda_ipc|cuda_vmm>" in out


def test_completion_script_and_answers() -> None:
    script = _mmpool("--show-completion", "bash")
    assert script.returncode == 0
    assert "_mmpool_completion" in script.stdout
    answer = _mmpool(_MMPOOL_COMPLETE="complete_bash", COMP_WORDS="mmpool plan --fo", COMP_CWORD="2")
    assert answer.stdout.split() == ["--format"]


def test_the_validate_page_names_every_option_and_kind_validate_takes() -> None:
    import typer as _typer

    from mmpool_cli.cli import app as _app

    page = (Path(__file__).parents[2] / "docs" / "validate.md").read_text()
    command = _typer.main.get_command(_app).commands["validate"]  # type: ignore[attr-defined]
    missing = []
    for param in command.params:
        longs = [o for o in getattr(param, "opts", []) if o.startswith("--") and o != "--help"]
        missing += [o for o in longs if o not in page]
        # each choice in the flag table's row of the option
        rows = "".join(line for line in page.splitlines() if line.startswith("|") and any(o in line for o in longs))
        for choice in getattr(getattr(param, "type", None), "choices", None) or ():
            if str(getattr(choice, "value", choice)) not in rows:
                missing.append(f"{longs[0]} {getattr(choice, 'value', choice)}")
    assert missing == []


def _sections(out: str) -> dict[str, str]:
    """The help's sections by their heading (a line at column 0 ending in ':')."""
    found: dict[str, list[str]] = {}
    title = ""
    for line in out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            title = line[:-1]
        found.setdefault(title, []).append(line)
    return {k: "\n".join(v) for k, v in found.items()}


def test_cache_help_lists_what_every_engine_takes_first_and_each_engines_own_apart() -> None:
    sections = _sections(_mmpool("cache", "--help").stdout)
    common = sections["Options"]
    for flag in ("--model", "--from FILE", "--trace", "--engine", "--target-hits", "--format", "--exit-zero"):
        assert flag in common, flag
    vllm = sections["vLLM (--engine vllm)"]
    assert "--mm-processor-cache-gb" in vllm and "--encoder-window" in vllm and "--mm-processor" not in common
    sglang = sections["SGLang only (--engine sglang)"]
    for flag in ("--hidden-size", "--mm-preprocess-cache-size-mb", "--workers", "--tp N", "--assume-video"):
        assert flag in sglang and flag not in common, flag
    assert "bench-serving" not in sglang  # --from-format offers only the logs that carry their items' data
    assert "refused with --engine vllm --from/--trace FILE" in " ".join(common.split())


def test_help_offers_no_engine_the_command_refuses() -> None:
    for command in ("simulate", "probe"):
        out = _mmpool(command, "--help").stdout
        assert "--engine sglang" in out and "<sglang|vllm>" not in out, command
        refused = _mmpool(command, "--engine", "vllm")
        assert refused.returncode == 2 and "plan --engine vllm" in refused.stderr, command


def test_record_help_says_it_records_both_engines_caches() -> None:
    out = " ".join(_mmpool("record", "--help").stdout.split())
    assert "each SGLang pool's exact trace" not in out
    assert "SGLang's and vLLM's multimodal caches" in out
