"""`mmpool validate`: data-driven valid/invalid files, every exit code and format, no traceback for any input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmpool_cli.core import codes
from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import parse_size
from mmpool_cli.engines.sglang.env_vars import read_launch_env
from mmpool_cli.engines.sglang.files import validate_file
from mmpool_cli.usecases.validate import validate

NO_ENV = read_launch_env({})
DATA = Path(__file__).parents[1] / "data" / "configs"
VALID = sorted(p for p in (DATA / "valid").iterdir())
INVALID = yaml.safe_load((DATA / "invalid" / "expected.yaml").read_text())


def _line(location: str | None) -> int:
    parts = (location or "").rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 0


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_files_have_no_errors_or_warnings(path: Path) -> None:
    # launched as mmpool says: the environment carries an mmpool config's pool.size
    size = (yaml.safe_load(path.read_text()).get("pool") or {}).get("size")
    env = {} if size is None else {"SGLANG_MM_FEATURE_CACHE_MB": str(parse_size(str(size)) // 2**20)}
    result = validate_file(str(path), read_launch_env(env))
    assert [f for f in result.findings if f.severity is not Severity.info] == []


@pytest.mark.parametrize(("name", "expected"), sorted(INVALID.items()))
def test_invalid_files_give_exactly_their_findings(name: str, expected: list[str]) -> None:
    result = validate_file(str(DATA / "invalid" / name), NO_ENV)
    found = sorted(f"{f.code}:{_line(f.location)}" for f in result.findings if f.severity is not Severity.info)
    assert found == sorted(expected)
    for f in result.findings:
        assert f.location and f.location.startswith(str(DATA / "invalid" / name))


def test_every_invalid_file_is_listed() -> None:
    files = {p.name for p in (DATA / "invalid").glob("*.yaml")} - {"expected.yaml"}
    assert files == set(INVALID)


def test_mmpool_config_gives_the_same_plan_as_mmpool_plan(run_line, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pool: {size: 1GiB, tokenizer_workers: 4}\nparallel: {tp: 8}\nworkload: {feature_sizes: [6MiB]}\n")
    planned = json.loads(
        run_line(
            [
                "mmpool",
                "plan",
                "--size",
                "1GiB",
                "--workers",
                "4",
                "--tp",
                "8",
                "--feature-size",
                "6MiB",
                "--format",
                "json",
            ]
        ).stdout
    )
    validated = json.loads(run_line(["mmpool", "validate", str(cfg), "--format", "json"]).stdout)
    plan = validated["files"][1]["plan"]
    assert plan.keys() == planned.keys()
    skip = {"budget_source", "findings"}
    assert {k: v for k, v in plan.items() if k not in skip} == {k: v for k, v in planned.items() if k not in skip}
    assert plan["budget_source"] == "config"


def test_a_file_cut_inside_its_comments_says_so(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"# mmpool config for the fleet\n# pool:\n#   si")
    [finding] = validate_file(str(path), NO_ENV).findings
    assert finding.message == (
        "the file holds only comments (3 lines), no configuration: was it cut? "
        "write the configuration as a YAML mapping after them"
    )


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"\x00\x01\x02binary", "file-binary"),
        (b"pool:\n  size: caf\xe9\n", "file-not-utf8"),
        (b"", "file-empty"),
        (b"  \n\n", "file-empty"),
        (b"# mmpool config\n# pool: si", "file-only-comments"),
        (b"just a string\n", "root-not-mapping"),
        (b"a: b: c\n", "yaml-syntax"),
        (b"a: 1\n---\nb: 2\n", "yaml-syntax"),
    ],
)
def test_bad_files_are_findings(tmp_path: Path, content: bytes, code: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(content)
    result = validate_file(str(path), NO_ENV)
    assert [f.code for f in result.findings] == [code]
    assert result.fails()


def test_missing_and_directory(tmp_path: Path) -> None:
    assert validate_file(str(tmp_path / "nope.yaml"), NO_ENV).findings[0].code == "file-missing"
    assert validate_file(str(tmp_path), NO_ENV).findings[0].code == "file-unreadable"


def test_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (5 * 2**20))
    assert validate_file(str(path), NO_ENV).findings[0].code == "file-too-large"


def test_kind_can_be_forced(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("tp-size: 8\n")
    assert validate_file(str(path), NO_ENV).kind == "sglang"
    forced = validate_file(str(path), {}, kind="mmpool")
    assert forced.kind == "mmpool"
    assert [f.code for f in forced.findings] == ["config-unknown-key"]


def test_environment_is_reported_once() -> None:
    report = validate([str(p) for p in VALID], {"SGLANG_MM_FEATURE_CACHE_MB": "1GB"})
    codes = [f.code for r in report.results for f in r.findings]
    assert codes.count("env-budget-invalid") == 1
    assert report.results[0].kind == "environment"
    assert not report.ok


# --- the command: one test per exit code and output format ---------------------------------


def test_exit_0_valid(run_line) -> None:
    result = run_line(["mmpool", "validate", str(DATA / "valid" / "example-mmpool.yaml")])
    assert result.exit_code == 0, result.output
    last = result.stdout.rstrip().splitlines()[-1]
    assert re.search(r"mmpool validate: OK  2 inputs: 2 valid, 0 invalid( \(.*\))?; SGLang 0\.5\.23 \(", last), last


def test_exit_1_errors_human(run_line) -> None:
    result = run_line(["mmpool", "validate", str(DATA / "invalid" / "mmpool-typos.yaml"), str(VALID[0])])
    assert result.exit_code == 1
    assert "mmpool-typos.yaml:3:3: error [config-unknown-key]" in result.stdout
    assert "3 inputs: 2 valid, 1 invalid (3 errors" in result.stdout


def test_exit_2_usage(run_line) -> None:
    result = run_line(["mmpool", "validate", "x.yaml", "--env", "NOEQUALS"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("mmpool: error: --env 'NOEQUALS'")


def test_no_file_checks_the_environment_alone(run_line) -> None:
    result = run_line(["mmpool", "validate", "--no-process-env", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [f["kind"] for f in data["files"]] == ["environment"]
    bad = run_line(["mmpool", "validate", "--no-process-env", "--env", "SGLANG_MM_FEATURE_CACHE_MB=0"])
    assert bad.exit_code == 1
    assert "budget-not-positive" in bad.stdout


def test_strict_makes_warnings_fail(run_line) -> None:
    path = str(DATA / "invalid" / "mmpool-never-fits.yaml")
    assert run_line(["mmpool", "validate", path]).exit_code == 0
    assert run_line(["mmpool", "validate", "--strict", path]).exit_code == 1


def test_json_format(run_line) -> None:
    bad = str(DATA / "invalid" / "sglang-ipc-nnodes.yaml")
    result = run_line(["mmpool", "validate", "--format", "json", str(VALID[0]), bad])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["status"] == "fail"
    assert [f["kind"] for f in data["files"]] == ["environment", "mmpool", "sglang"]
    assert [f["status"] for f in data["files"]] == ["valid", "valid", "invalid"]
    assert data["files"][1]["plan"]["schema_version"] == 1
    assert data["summary"]["invalid"] == 1
    assert data["summary"]["errors"] == 2  # cuda_ipc on 2 nodes, and TP 1 does not split over 2 nodes
    assert result.stderr == ""


def test_github_format(run_line) -> None:
    bad = str(DATA / "invalid" / "duplicate-key.yaml")
    result = run_line(["mmpool", "validate", "--format", "github", bad])
    assert result.exit_code == 1
    line = next(x for x in result.stdout.splitlines() if x.startswith("::error"))
    assert line.startswith(f"::error file={bad},line=3,col=3,title=mmpool yaml-duplicate-key::key 'size' appears")
    last = result.stdout.rstrip().splitlines()[-1]
    assert last.startswith("::notice title=mmpool validate::FAIL: 2 inputs: 1 valid, 1 invalid")


def test_stdin(run_line) -> None:
    result = run_line(["mmpool", "validate", "-", "--format", "json"], input=b"pool:\n  size: 1Gb\n")
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    assert data["files"][1]["findings"][0]["location"] == "-:2:9"


def test_env_and_env_file(run_line, tmp_path: Path) -> None:
    env_file = tmp_path / "pool.env"
    env_file.write_text("# pool\nexport SGLANG_MM_FEATURE_CACHE_MB=2048\nthis is not a line\n")
    result = run_line(
        ["mmpool", "validate", "--no-process-env", "--env-file", str(env_file), "--format", "json", str(VALID[0])]
    )
    env = json.loads(result.stdout)["files"][0]
    assert [(f["code"], f["location"]) for f in env["findings"] if f["severity"] == "error"] == [
        ("env-file-syntax", f"{env_file}:3:1")
    ]
    result = run_line(["mmpool", "validate", "--env", "SGL_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=nan", str(VALID[0])])
    assert result.exit_code == 1
    assert "env-recycle-nan" in result.stdout


def test_schema_command(run_line) -> None:
    result = run_line(["mmpool", "schema"])
    schema = json.loads(result.stdout)
    assert schema["title"] == "mmpool config"
    assert set(schema["properties"]) == {"pool", "parallel", "gpu", "workload"}


# --- no input gives a traceback ----------------------------------------------------------------

yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
keys = st.sampled_from(
    ["pool", "parallel", "gpu", "workload", "size", "tp-size", "tp", "mm-feature-transport", "nnodes", "config"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.dictionaries(keys | st.text(max_size=10), yaml_values, max_size=6),
    kind=st.sampled_from(["auto", "mmpool", "sglang"]),
)
def test_random_yaml_never_raises(tmp_path: Path, data: dict, kind: str) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    result = validate_file(str(path), NO_ENV, kind=kind)  # type: ignore[arg-type]
    assert result.path == str(path)
    assert result.kind in ({"mmpool", "sglang", "unknown"} if kind == "auto" else {kind, "unknown"})
    for f in result.findings:
        # a registered code with a severity it takes, a message, located in this file
        assert f.severity in codes.ALL[f.code].severities, f
        assert f.message, f
        assert f.location is None or f.location.startswith(str(path)), f
    assert result.fails() == any(f.severity is Severity.error for f in result.findings)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_random_bytes_never_raise(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(raw)
    result = validate_file(str(path), NO_ENV)
    # whatever the bytes, a result that is not a mapping says why, located in the file
    assert result.kind in ("mmpool", "sglang", "unknown")
    if result.kind == "unknown":
        assert result.findings and all(f.location and f.location.startswith(str(path)) for f in result.findings)


def test_auto_reads_a_vllm_config_by_its_name_or_its_keys(tmp_path) -> None:
    from mmpool_cli.usecases.validate import is_vllm_config, validate

    by_keys = tmp_path / "serve.yaml"
    by_keys.write_text("model: m\nmm-processor-cache-gb: 1\n")
    by_name = tmp_path / "vllm-prod.yaml"
    by_name.write_text("port: 8000\n")
    sglang = tmp_path / "sglang.yaml"
    sglang.write_text("mm-processor-cache-gb: 1\n")
    assert is_vllm_config(str(by_keys)) and is_vllm_config(str(by_name)) and not is_vllm_config(str(sglang))
    assert not is_vllm_config(str(tmp_path / "other.yaml"))  # unreadable: left to the engine's finding
    report = validate([str(by_keys), str(by_name)], {})
    assert [r.kind for r in report.results] == ["environment", "vllm", "vllm"]
