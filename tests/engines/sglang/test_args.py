"""SGLang 0.5.23's argv and --config rules: prefixes, last-wins, type errors, the config merge."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.args import BY_NAME, POOL_FLAGS, cli_tokens, read, resolve_option
from mmpool_cli.engines.sglang.config_merge import merge_config
from mmpool_cli.engines.sglang.flags import table


def codes(argv: list[str]) -> list[str]:
    return [f.code for f in read(cli_tokens(argv)).findings if f.severity.value != "info"]


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["--tp-size", "8"], "tp_size", 8),
        (["--tp", "8"], "tp_size", 8),
        (["--tp=8"], "tp_size", 8),
        (["--tensor-parallel-size", " 8 "], "tp_size", 8),
        (["--tp-size", "2", "--tp-size", "4"], "tp_size", 4),
        (["--mm-feature-transport=cuda_vmm"], "mm_feature_transport", "cuda_vmm"),
        (["--enable-dp-attention"], "enable_dp_attention", True),
        (["--base-gpu-id", "-1"], "base_gpu_id", -1),
        (["--chat-template", "x", "--nnodes", "2"], "nnodes", 2),
        (["--tokenizer-worker-num", "٣"], "tokenizer_worker_num", 3),
    ],
)
def test_values_read_like_argparse(argv: list[str], dest: str, value: object) -> None:
    reading = read(cli_tokens(argv))
    assert reading.get(dest) == value
    assert codes(argv) == []


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--tp-size", "x"], "flag-bad-value"),
        (["--tp-size"], "flag-bad-value"),
        (["--tp-size", "--nnodes", "2"], "flag-bad-value"),
        (["--mm-feature-transport", "nvlink"], "flag-bad-value"),
        (["--encoder-only=yes"], "flag-bad-value"),
        (["--keep-mm-feature-on-device"], "flag-not-in-release"),
        (["--tokenizer-workers", "4"], "unrecognized-argument"),
        (["--t", "4"], "ambiguous-option"),
        (["--config=x.yaml"], "config-not-merged"),
        (["--conf", "x.yaml"], "config-not-merged"),
        (["--tp-size", "1", "2"], "unrecognized-argument"),
    ],
)
def test_errors_like_argparse(argv: list[str], code: str) -> None:
    assert codes(argv) == [code]


def test_abbreviation_is_an_info() -> None:
    reading = read(cli_tokens(["--tp", "8"]))
    assert [(f.severity.value, f.code, f.location) for f in reading.findings] == [
        ("info", "abbreviated-option", "argv[0]")
    ]


def test_resolve_option_matches_python_argparse() -> None:
    """The prefix rule agrees with the real argparse over the same option names."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    for name in sorted(table().options - {"--help", "-h"}):
        parser.add_argument(name, dest=name, nargs="?")
    for text in ["--tp", "--tp-size=4", "--mm-f", "--nn", "--base-gpu", "--attn-dp", "--dp"]:
        option = resolve_option(text)[0]
        try:
            ns = parser.parse_args([text] if "=" in text else [text, "1"])
        except (argparse.ArgumentError, SystemExit):
            assert option is None
        else:
            assert option is not None
            assert vars(ns)[option] is not None


def test_pool_flags_exist_in_sglang() -> None:
    for flag in POOL_FLAGS:
        for name in flag.names:
            assert any(name in table(v).options for v in versions.known()), name
            assert BY_NAME[name] is flag
    assert "--keep-mm-feature-on-device" not in table().options
    assert table().config_unsupported["enable_dp_attention"] == "DeprecatedStoreTrueAction"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_config_merge_command_line_wins(tmp_path: Path) -> None:
    cfg = write(tmp_path, "c.yaml", "tp-size: 8\nnnodes: 1\nencoder-only: true\n")
    launch = merge_config(cli_tokens(["--tp-size", "4", "--config", cfg]))
    reading = read(launch.tokens)
    assert reading.get("tp_size") == 4
    assert reading.get("nnodes") == 1
    assert reading.settings["nnodes"].origin == f"{cfg}:2:9"
    assert reading.get("encoder_only") is True


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--config", "a.yaml", "--config", "b.yaml"], "config-multiple"),
        (["--config"], "config-missing-path"),
        (["--config", "c.json"], "config-not-yaml"),
        (["--config", "missing.yaml"], "file-missing"),
    ],
)
def test_config_merge_errors(argv: list[str], code: str) -> None:
    assert [f.code for f in merge_config(cli_tokens(argv)).findings] == [code]
