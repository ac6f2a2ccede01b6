"""The mmpool config: every finding in one run, and a JSON Schema as strict as the validator where it can be."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.sglang.env_vars import read_launch_env
from mmpool_cli.engines.sglang.files import validate_file
from mmpool_cli.engines.sglang.mmpool_config import json_schema

NO_ENV = read_launch_env({})
ROOT = Path(__file__).parents[3]
DATA = ROOT / "tests" / "data" / "configs"


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = validate_file(str(path), NO_ENV, kind="mmpool")
    return sorted(f"{f.code}:{f.location.rsplit(':', 2)[1]}" for f in result.findings if f.severity is Severity.error)


def test_a_bad_size_hides_no_other_finding(tmp_path: Path) -> None:
    text = "pool:\n  size: 1Gx\n  tokenizer_workers: -2\nparallel:\n  tp: 0\n"
    assert _errors(tmp_path, text) == ["config-invalid-value:2", "parallel-not-positive:5", "workers-not-positive:3"]


def test_every_layout_finding_survives_a_bad_value(tmp_path: Path) -> None:
    text = "pool:\n  size: [1]\nparallel:\n  dp: 2\n  attn_dp: 2\n"
    assert _errors(tmp_path, text) == ["config-invalid-value:2", "dp-replicas-with-attention-dp:4"]


def test_a_bad_layout_value_makes_no_guess_about_the_others(tmp_path: Path) -> None:
    # tp is unreadable: whether attn_dp divides it is unknown, so only the bad value is reported
    text = "parallel:\n  tp: eight\n  attn_dp: 3\n"
    assert _errors(tmp_path, text) == ["config-invalid-value:2"]


def test_a_cpu_transport_still_checks_nothing_more(tmp_path: Path) -> None:
    text = "pool:\n  transport: cpu\n  size: 1Gx\n  tokenizer_workers: -2\n"
    assert _errors(tmp_path, text) == ["config-invalid-value:3"]


@pytest.mark.parametrize("name", ["pool.size", "parallel.tp", "pool.tokenizer_workers", "workload.feature_sizes"])
def test_an_integer_beyond_64_bits_is_a_bad_value(tmp_path: Path, name: str) -> None:
    section, key = name.split(".")
    value = f"[{2**63}]" if key == "feature_sizes" else str(2**63)
    errors = _errors(tmp_path, f"{section}:\n  {key}: {value}\n")
    assert errors == ["config-invalid-value:2"]


# --- the JSON Schema --------------------------------------------------------------------------

VALIDATOR = jsonschema.Draft202012Validator(json_schema())


def _schema_ok(data: object) -> bool:
    return not list(VALIDATOR.iter_errors(data))


def test_the_schema_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema())


MMPOOL_FILES = [
    *(p for p in sorted((DATA / "valid").iterdir()) if p.name.startswith(("mmpool", "example-mmpool"))),
    ROOT / "examples" / "mmpool.yaml",
]


@pytest.mark.parametrize("path", MMPOOL_FILES, ids=lambda p: p.name)
def test_valid_examples_pass_the_schema(path: Path) -> None:
    assert _schema_ok(yaml.safe_load(path.read_text()))


# Invalid files whose problems JSON Schema can express (types, keys, size strings, minimums) ...
SCHEMA_FLAGS = ["mmpool-typos.yaml", "mmpool-unknown-section.yaml", "mmpool-typo-hides-nothing.yaml"]
# ... and those whose problems need the plan (capacities, layouts SGLang refuses): no schema can say them.
PLAN_FLAGS = ["mmpool-too-small.yaml", "mmpool-never-fits.yaml", "mmpool-hbm.yaml", "mmpool-vmm-pp.yaml"]


@pytest.mark.parametrize("name", [*SCHEMA_FLAGS, "example-invalid-mmpool.yaml"])
def test_invalid_examples_fail_the_schema(name: str) -> None:
    assert not _schema_ok(yaml.safe_load((DATA / "invalid" / name).read_text()))
    assert not _schema_ok(yaml.safe_load((ROOT / "examples" / "invalid-mmpool.yaml").read_text()))


@pytest.mark.parametrize("name", PLAN_FLAGS)
def test_plan_findings_are_beyond_the_schema(name: str) -> None:
    assert _schema_ok(yaml.safe_load((DATA / "invalid" / name).read_text()))


SNIPPETS = [
    # (section, key, value): the schema and the validator agree on each
    ("pool", "size", "1GiB"),
    ("pool", "size", "1.5 GiB"),
    ("pool", "size", " 1GiB\t"),
    ("pool", "size", "256Mi"),
    ("pool", "size", "1gi"),
    ("workload", "feature_sizes", ["1.0", 1024]),
    ("pool", "size", "100GiB"),  # above 288 GiB, more than any GPU has, the plan says budget-exceeds-gpu
    ("pool", "size", "1Gx"),
    ("pool", "size", "1Gb"),
    ("pool", "size", "1G"),
    ("pool", "size", "-1GiB"),
    ("pool", "size", "\x1c1GiB"),
    ("pool", "size", "1TB\u3000"),
    ("pool", "size", "1,5GB"),
    ("pool", "size", "1e9"),
    ("pool", "size", ""),
    ("pool", "size", "9" * 65),
    ("pool", "size", -1),
    ("pool", "size", 2**63),
    ("pool", "size", True),
    ("pool", "tokenizer_workers", 0),
    ("pool", "tokenizer_workers", -3),
    ("pool", "tokenizer_workers", 2**63),
    ("pool", "transport", "cuda"),
    ("parallel", "tp", 0),
    ("parallel", "dp", -1),
    ("parallel", "attn_dp", 0),
    ("parallel", "pp", 0),
    ("parallel", "nnodes", "1"),
    ("parallel", "base_gpu_id", -1),
    ("parallel", "tp", "8"),
    ("gpu", "total_hbm", "141GB"),
    ("gpu", "total_hbm", "141 gigs"),
    ("workload", "feature_sizes", ["6MiB", 1000]),
    ("workload", "feature_sizes", ["6MB", "6 potatoes"]),
    # the bounds --context-size and --vmm-granularity have (core.bounds), where JSON Schema can say them
    ("gpu", "context_size", 1000),
    ("gpu", "context_size", 2**40),
    ("gpu", "context_size", 552402944),
    ("pool", "vmm_granularity", 3000),
    ("pool", "vmm_granularity", 2**31),
    ("pool", "vmm_granularity", 2**21),
]


@pytest.mark.parametrize(("section", "key", "value"), SNIPPETS, ids=lambda v: repr(v)[:30])
def test_the_schema_flags_exactly_what_mmpool_flags(tmp_path: Path, section: str, key: str, value: object) -> None:
    data = {section: {key: value}}
    if section == "pool" and key != "size":
        data["pool"]["size"] = "1GiB"  # keep the plan's own budget findings out of the comparison
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    result = validate_file(str(path), NO_ENV, kind="mmpool")
    flagged = any(f.severity is Severity.error for f in result.findings)
    assert _schema_ok(data) is not flagged, [f.message for f in result.findings]


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("gpu:\n  context_size: 1KiB\n", "--context-size"),
        ("gpu:\n  context_size: 300GiB\n", "--context-size"),
        ("pool:\n  vmm_granularity: 3KiB\n", "--vmm-granularity"),
        ("pool:\n  vmm_granularity: 2GiB\n", "--vmm-granularity"),
    ],
)
def test_config_keys_have_the_bounds_of_their_flags(run_line, tmp_path: Path, text: str, flag: str) -> None:
    path = tmp_path / "mmpool.yaml"
    path.write_text(text)
    result = validate_file(str(path), NO_ENV, kind="mmpool")
    [error] = [f for f in result.findings if f.severity is Severity.error]
    assert (error.code, error.location) == (
        "config-invalid-value",
        f"{path}:2:17" if "context" in text else f"{path}:2:20",
    )
    # the same words as the flag's usage error
    value = text.split(": ")[1].strip()
    cli = run_line(["mmpool", "plan", flag, value])
    assert cli.exit_code == 2
    assert error.message.split(": ", 1)[1] in cli.stderr


def test_a_deeply_nested_unknown_key_is_one_finding(tmp_path: Path) -> None:
    assert _errors(tmp_path, "tp: " + "[" * 99 + "]" * 99 + "\nparallel:\n  tp: 0\n") == [
        "config-unknown-key:1",
        "parallel-not-positive:3",
    ]


def test_a_bad_list_item_hides_no_layout_finding(tmp_path: Path) -> None:
    text = "workload:\n  feature_sizes: [1MiB, 1 potato]\npool:\n  tokenizer_workers: 0\n  size: 1GiB\n"
    assert _errors(tmp_path, text) == ["config-invalid-value:2", "workers-not-positive:4"]


def test_the_size_keys_are_the_models_size_fields() -> None:
    from mmpool_cli.engines.sglang.config_data import SIZE_KEYS
    from mmpool_cli.engines.sglang.mmpool_config import models

    marker = "bytes: an integer, or a size string"
    sizes = {
        (section, key)
        for section, model in models().model_fields.items()
        for key, field in model.annotation.model_fields.items()
        if marker in repr(field.annotation) + repr(field.metadata)
    }
    assert sizes == set(SIZE_KEYS)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("1073741824.0", True),  # JSON Schema's integer, and --size 1073741824.0: the same bytes
        ("1073741824", True),
        ("1.5", False),  # a fraction of a byte
        ("1073741824.0000000001", False),  # loads as the float 1073741824.0: read as written, refused
    ],
)
def test_a_size_with_a_point_is_read_as_written_as_the_schema_and_the_flag_read_it(
    tmp_path: Path, value: str, ok: bool
) -> None:
    text = f"pool:\n  size: {value}\n  transport: cuda_ipc\nworkload:\n  feature_sizes: [2, {value}]\n"
    assert (_errors(tmp_path, text) == []) is ok
    if value != "1073741824.0000000001":  # a float's JSON loses the digits the schema would judge
        assert _schema_ok(yaml.safe_load(text)) is ok


def test_a_count_with_a_point_is_refused_though_json_schema_counts_it_an_integer(tmp_path: Path) -> None:
    # JSON's data model has no 4.0 apart from 4, so the schema cannot refuse it; mmpool does, as --workers does
    text = "pool:\n  tokenizer_workers: 4.0\n"
    assert _schema_ok(yaml.safe_load(text))
    assert _errors(tmp_path, text) == ["config-invalid-value:2"]
