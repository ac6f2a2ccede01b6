"""``mmpool cache --engine vllm``'s command-line half (cli/cache_vllm.py), under a command shaped as the shared
``cache`` command will call it: the report in both formats and bad input as one line with exit 2."""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from mmpool_cli.cli import cache_vllm
from mmpool_cli.cli.options import FormatOpt, OutputFormat
from mmpool_cli.cli.traffic_options import AssumeImageOpt
from mmpool_cli.cli.vllm_options import VllmOptions, with_vllm_options

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "traffic" / "vllm-chats.jsonl")
app = typer.Typer()


@app.command()
@with_vllm_options
def cache(
    vllm: VllmOptions,
    model: str | None = typer.Option(None, "--model"),
    files: list[str] = typer.Option([], "--from"),  # noqa: B008 - typer's way
    output: FormatOpt = OutputFormat.human,
    assume_image: AssumeImageOpt = None,
    window: cache_vllm.EncoderWindowOpt = 1,
    target: str = typer.Option("99", "--target-hits"),
) -> None:
    cache_vllm.run(
        model, files, vllm, output, assume_image=assume_image, window=window, target=Fraction(Decimal(target))
    )


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_example_log_in_json_and_for_a_terminal():
    result = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json", "--api-server-count", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    processor, encoder = data["caches"]
    assert processor["layout"] == "processor_only" and processor["api_processes"] == 2
    assert encoder["name"] == "encoder" and encoder["recommended_tokens"] > 0
    human = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-type", "shm")
    assert human.exit_code == 0 and "layout         shm" in human.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", EXAMPLE], "--model NAME|PATH is needed"),
        (["--model", "kimi-vl", "--from", EXAMPLE], "knows the processed items of"),
        (["--model", "qwen2.5-vl", "--from", EXAMPLE, "--host-memory", "1GiB"], "vllm-host-memory-exceeded"),
        (["--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "4GB"], "--mm-processor-cache-gb"),
        (["--model", "qwen2.5-vl", "--from", EXAMPLE, "--assume-image", "0x0"], "--assume-image"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = _run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.count("\n") == 1


def test_a_cache_type_no_release_has_is_refused():
    result = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-type", "fifo")
    assert result.exit_code == 2 and "fifo" in result.output


def test_an_unknown_model_and_a_cache_turned_off():
    result = _run("--model", "no-such-model", "--from", EXAMPLE)
    assert result.exit_code == 2 and "no-such-model" in result.output and result.output.count("\n") == 1
    off = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0", "--format", "json")
    assert off.exit_code == 1, off.output  # an off cache whose traffic would hit misses its target
    processor = json.loads(off.stdout)["caches"][0]
    assert (processor["layout"], processor["size_bytes"], processor["hits"]) == ("disabled", 0, 0)
    assert processor["recommended_setting"].startswith("--mm-processor-cache-gb ")


def test_each_release_is_replayed_by_its_own_rules():
    for version in ("0.30.0", "0.33.0"):
        ok = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--vllm-version", version, "--format", "json")
        assert ok.exit_code == 0 and json.loads(ok.stdout)["vllm_version"] == version


def test_exit_1_where_a_cache_misses_its_target_at_the_deployments_size():
    small = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0.01", "--format", "json")
    assert small.exit_code == 1, small.output
    processor, encoder = json.loads(small.stdout)["caches"]
    assert not processor["meets_target"] and encoder["meets_target"]
    loose = _run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0.01", "--target-hits", "0")
    assert loose.exit_code == 0, loose.output
