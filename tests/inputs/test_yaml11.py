"""YAML 1.1's surprises (octal ``010``, base-60 ``1:30``, ``yes``/``no``/``on``/``off``) are located findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmpool_cli.engines.sglang.env_vars import read_launch_env
from mmpool_cli.engines.sglang.files import validate_file
from mmpool_cli.inputs.yamlsrc import parse_text

NO_ENV = read_launch_env({})


@pytest.mark.parametrize(
    ("value", "read_as", "fix"),
    [
        ("010", "the octal number 8", "write 8 for that number, 10 for the decimal one"),
        ("-010", "the octal number -8", "write -8 for that number, -10 for the decimal one"),
        ("1:30", "the base-60 number 90", "write 90"),
        ("1:30.5", "the base-60 number 90.5", "write 90.5"),
        ("yes", "true", "write true"),
        ("Off", "false", "write false"),
        ("on", "true", "write true"),
    ],
)
def test_a_yaml_11_reading_is_a_located_warning_with_its_fix(value: str, read_as: str, fix: str) -> None:
    src = parse_text("c.yaml", f"first: 1\nkey:   {value}\n")
    [finding] = src.findings
    assert (finding.severity.value, finding.code, finding.location) == ("warning", "yaml-1.1-value", "c.yaml:2:8")
    assert finding.message.startswith(f"YAML 1.1 reads {value} as {read_as}")
    assert fix in finding.message and f"'{value}'" in finding.message  # quoted: the text as written


@pytest.mark.parametrize(
    "value", ["'010'", '"1:30"', "10", "0", "0x10", "true", "false", "1_000", "08", "12:75", "07", "00", "0o17"]
)
def test_values_yaml_reads_as_written_are_left_alone(value: str) -> None:
    assert parse_text("c.yaml", f"key: {value}\n").findings == []


def test_an_mmpool_config_refuses_a_yaml_11_number(tmp_path: Path) -> None:
    path = tmp_path / "mmpool.yaml"
    path.write_text("pool:\n  size: 1GiB\n  tokenizer_workers: 010\n")
    result = validate_file(str(path), NO_ENV)
    [finding] = [f for f in result.findings if f.code == "yaml-1.1-value"]
    assert (finding.severity.value, finding.location) == ("error", f"{path}:3:22")
    assert "octal number 8" in finding.message
    assert result.fails(strict=False)


def test_an_sglang_config_warns_of_what_sglang_reads(tmp_path: Path) -> None:
    path = tmp_path / "sglang.yaml"
    path.write_text("tokenizer-worker-num: 010\nbase-gpu-id: 1:30\n")
    result = validate_file(str(path), NO_ENV)
    found = [
        (f.severity.value, f.location, f.message.split(";")[0]) for f in result.findings if f.code == "yaml-1.1-value"
    ]
    assert found == [
        (
            "warning",
            f"{path}:1:23",
            "YAML 1.1 reads 010 as the octal number 8 (PyYAML's safe_load, the engines' loader, does too)",
        ),
        (
            "warning",
            f"{path}:2:14",
            "YAML 1.1 reads 1:30 as the base-60 number 90 (PyYAML's safe_load, the engines' loader, does too)",
        ),
    ]
    assert not result.fails(strict=False) and result.fails(strict=True)


def test_a_key_yaml_11_reads_as_a_boolean_is_named_as_one() -> None:
    [finding] = parse_text("ci.yml", "name: ci\non: [push]\n").findings
    assert finding.location == "ci.yml:2:1"
    assert finding.message.endswith("this key is the boolean true; quote it ('on') to keep the word")
