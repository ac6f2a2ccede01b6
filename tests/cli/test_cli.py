"""`mmpool plan` through typer's runner and through `main()`: exit codes, formats, no tracebacks."""

from __future__ import annotations

import json

import pytest

from mmpool_cli.cli import main


def test_plan_defaults_exit_0(run_line) -> None:
    result = run_line(["mmpool", "plan"])
    assert result.exit_code == 0, result.output
    assert "OK" in result.stdout
    assert "export SGLANG_MM_FEATURE_CACHE_MB=1024" in result.stdout
    assert "SGLang's default" in result.stdout


def test_plan_json_payload(run_line) -> None:
    result = run_line(
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
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["status"] == "ok"
    assert data["budget_bytes"] == 1_073_741_824
    assert data["sglang_mm_feature_cache_mb"] == 1024
    assert data["per_worker_bytes"] == 268_435_456
    assert data["header_bytes"] == 147_456
    assert data["usable_bytes_per_worker"] == 268_288_000
    assert data["features"] == [
        {
            "bytes": 6_291_456,
            "slice_bytes": 6_291_456,
            "fit_per_worker": 42,
            "fit_per_node": 168,
            "limited_by": "bytes",
            "item": None,
        }
    ]
    assert {f["severity"] for f in data["findings"]} <= {"error", "warning", "info"}
    assert result.stderr == ""


def test_plan_error_exit_1_json_still_parses(run_line) -> None:
    result = run_line(["mmpool", "plan", "--size", "1MiB", "--workers", "8", "--tp", "8", "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "fail"
    assert data["usable_bytes_per_worker"] is None
    assert data["settings"] is None
    assert [f["code"] for f in data["findings"] if f["severity"] == "error"] == ["pool-too-small"]


def test_plan_floor_to_zero_exit_1(run_line) -> None:
    result = run_line(["mmpool", "plan", "--size", "1000KiB"])
    assert result.exit_code == 1
    assert "budget-floors-to-zero" in result.stdout


@pytest.mark.parametrize("size", ["1 gorilla", "1GB!!", "1,5GB", "0.5B", "-1GB", "inf", "nan", "1Gbit", "١", "", "1G"])
def test_bad_size_is_a_usage_error_exit_2(run_line, size: str) -> None:
    result = run_line(["mmpool", "plan", "--size", size])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("mmpool: error: --size: invalid size")
    assert result.stderr.count("\n") == 1


def test_bad_flag_is_a_usage_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # what a user sees (through main, as the console script runs it): one line naming the flag,
    # the value and the choices, and where the help is; nothing on stdout
    assert main(["plan", "--transport", "nvlink"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "mmpool: error: Invalid value for '--transport' / '--mm-feature-transport': 'nvlink' is not one of "
        "'cuda_ipc', 'cuda_vmm'. (see 'mmpool plan --help')\n"
    )


def test_bad_feature_size_names_the_flag(run_line) -> None:
    result = run_line(["mmpool", "plan", "--feature-size", "6 megs"])
    assert result.exit_code == 2
    assert "--feature-size" in result.stderr


def test_env_budget_is_read_like_sglang(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_MM_FEATURE_CACHE_MB", "2048")
    data = json.loads(run_line(["mmpool", "plan", "--format", "json"]).stdout)
    assert data["budget_source"] == "env"
    assert data["sglang_mm_feature_cache_mb"] == 2048


def test_invalid_env_budget_fails_loud(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_MM_FEATURE_CACHE_MB", "1GB")
    result = run_line(["mmpool", "plan", "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["sglang_mm_feature_cache_mb"] == 1024
    assert data["findings"][0]["code"] == "env-budget-invalid"


def test_expandable_segments_from_env(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    data = json.loads(run_line(["mmpool", "plan", "--format", "json"]).stdout)
    assert data["hbm"]["allocator"] == "caching-expandable"


def test_vmm_plan(run_line) -> None:
    result = run_line(["mmpool", "plan", "--transport", "cuda_vmm", "--workers", "3", "--tp", "8", "--format", "json"])
    data = json.loads(result.stdout)
    assert data["allocation_bytes_per_worker"] == 356_515_840
    assert data["vmm_granularity_bytes"] == 2 * 2**20


def test_version(run_line) -> None:
    result = run_line(["mmpool", "--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("mmpool ")


def test_main_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--workers", "many"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmpool: error: ")
    assert err.count("\n") == 1


def test_main_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plna"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_main_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--format", "json"]) == 0
    assert main(["plan", "--size", "1KiB", "--format", "json"]) == 1
    assert main(["plan", "--size", "1 KiBB"]) == 2
    capsys.readouterr()


def test_main_hides_internal_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import mmpool_cli.cli.plan as cli

    def boom(request):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cli, "make_plan", boom)
    assert main(["plan"]) == 70
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: kaboom" in err
    assert "Traceback" not in err
    monkeypatch.setenv("MMPOOL_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["plan"])


def test_a_ctrl_c_wrapped_by_python_is_still_a_silent_130(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # a KeyboardInterrupt raised inside class creation reaches main() as a RuntimeError
    from mmpool_cli import cli

    def wrapped(**_kw: object) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from e

    monkeypatch.setattr(cli, "app", wrapped)
    assert cli.main(["plan"]) == 130
    assert capsys.readouterr().err == ""
