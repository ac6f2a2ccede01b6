"""One honest output per format: commands never wrap, JSON for every exit status, no stray escapes or bytes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data" / "configs"
ESCAPE = "\x1b["


def test_copy_paste_lines_never_wrap_and_no_line_ends_in_spaces(run_line) -> None:
    flags = ["--transport", "cuda_vmm", "--workers", "4", "--tp", "8", "--feature-size", "50633856"]
    result = run_line(["mmpool", "plan", *flags], env={"COLUMNS": "40"})
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "export SGLANG_MM_FEATURE_CACHE_MB=1024" in lines
    command = "sglang serve --model-path MODEL --tokenizer-worker-num 4 --mm-feature-transport cuda_vmm --tp-size 8"
    assert command in lines  # whole, on one line, at 40 columns
    assert [line for line in lines if line != line.rstrip()] == []


def test_probe_input_findings_keep_one_line_each(run_line) -> None:
    path = str(DATA / "invalid" / "mmpool-typos.yaml")
    result = run_line(["mmpool", "probe", "--config", path], env={"COLUMNS": "40"})
    assert result.exit_code == 1
    assert any(line.startswith(f"  {path}:3:3: error [config-unknown-key]") for line in result.stdout.splitlines())


@pytest.mark.parametrize("argv", [["plan"], ["validate", str(DATA / "invalid" / "mmpool-typos.yaml")]])
def test_no_color_removes_every_style_escape(run_line, argv: list[str]) -> None:
    styled = run_line(["mmpool", *argv], env={"FORCE_COLOR": "1", "NO_COLOR": None})
    assert ESCAPE in styled.stdout  # the check below can see escapes
    plain = run_line(["mmpool", *argv], env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert ESCAPE not in plain.stdout  # bold and dim too
    assert plain.stdout.replace(" ", "") == re.sub(r"\x1b\[[0-9;]*m", "", styled.stdout).replace(" ", "")


def test_github_output_is_annotations_only(run_line) -> None:
    files = [str(DATA / "invalid" / "mmpool-typos.yaml"), str(DATA / "invalid" / "duplicate-key.yaml")]
    for argv in (["validate", *files], ["check", "--", "sglang", "serve", "m", "--tp", "x"]):
        result = run_line(
            ["mmpool", *argv, "--format", "github"]
            if argv[0] == "validate"
            else ["mmpool", "check", "--format", "github", *argv[1:]]
        )
        assert result.exit_code == 1
        assert all(line.startswith("::") for line in result.stdout.splitlines()), result.stdout


def _summary_numbers(text: str) -> dict[str, int]:
    m = re.search(r"(\d+) inputs?: (\d+) valid, (\d+) invalid(?: \(([^)]*)\))?", text)
    assert m, text
    numbers = {"inputs": int(m[1]), "valid": int(m[2]), "invalid": int(m[3]), "errors": 0, "warnings": 0, "infos": 0}
    for part in (m[4] or "").split(", "):
        if part:
            n, noun = part.split(" ")
            numbers[noun if noun.endswith("s") else noun + "s"] = int(n)
    return numbers


def test_summary_counts_agree_between_human_and_json(run_line) -> None:
    argv = [
        "mmpool",
        "validate",
        "--env",
        "SGLANG_MM_FEATURE_CACHE_MB=0",
        str(DATA / "invalid" / "mmpool-typos.yaml"),
        str(DATA / "valid" / "example-mmpool.yaml"),
    ]
    human = run_line(argv)
    data = json.loads(run_line([*argv, "--format", "json"]).stdout)
    assert _summary_numbers(human.stdout.splitlines()[-1]) == data["summary"]


def _line_col(location: str) -> tuple[int, int]:
    _, line, col = location.rsplit(":", 2)
    return int(line), int(col)


def test_findings_are_sorted_by_file_and_line(run_line) -> None:
    path = DATA / "invalid" / "example-invalid-sglang-config.yaml"
    data = json.loads(run_line(["mmpool", "validate", "--format", "json", str(path)]).stdout)
    located = [_line_col(f["location"]) for f in data["files"][1]["findings"] if f["location"].count(":") == 2]
    assert len(located) > 1
    assert located == sorted(located)
    launch = ["sglang", "serve", "m", "--tp", "x", "--base-gpu-id", "-1", "--tokenizer-worker-num", "0"]
    result = json.loads(run_line(["mmpool", "check", "--format", "json", "--", *launch]).stdout)
    words = [
        int(f["location"][5:-1]) for f in result["files"][0]["findings"] if (f["location"] or "").startswith("argv[")
    ]
    assert len(words) > 1
    assert words == sorted(words)


def test_a_file_name_that_is_not_utf8_is_escaped_never_raw(tmp_path: Path) -> None:
    name = os.fsencode(tmp_path) + b"/bad\xff.yaml"
    with open(name, "wb") as f:
        f.write(b"pool: {size: 1GiB}\n")
    for fmt in ("json", "human", "github"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mmpool_cli",
                "validate",
                "--no-process-env",
                "--format",
                fmt,
                name,
                b"gone\xfe.yaml",
            ],
            capture_output=True,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        assert b"\xff" not in done.stdout and b"\xfe" not in done.stdout
        text = done.stdout.decode("utf-8")
        if fmt == "json":
            paths = [f["path"] for f in json.loads(text)["files"]]
            assert paths[1].endswith("bad\\xff.yaml")
            assert paths[2] == "gone\\xfe.yaml"
        else:
            assert "bad\\xff.yaml" in text


def test_a_bad_value_from_an_env_file_is_located_at_its_line(run_line, tmp_path: Path) -> None:
    env_file = tmp_path / "pool.env"
    env_file.write_text(
        "# pools\nSGLANG_MM_FEATURE_CACHE_MB=0\n  export SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=abc\n"
    )
    common = ["--no-process-env", "--env-file", str(env_file), "--format", "json"]
    validate = json.loads(run_line(["mmpool", "validate", *common]).stdout)
    check = json.loads(
        run_line(
            ["mmpool", "check", *common, "--", "sglang", "serve", "m", "--mm-feature-transport", "cuda_ipc"]
        ).stdout
    )
    for data in (validate, check):
        where = {f["code"]: f["location"] for f in data["files"][0]["findings"]}
        assert where["budget-not-positive"] == f"{env_file}:2:1"
        assert where["env-recycle-invalid"] == f"{env_file}:3:3"
    # --env wins over the file, and is no file's line
    override = ["--env", "SGLANG_MM_FEATURE_CACHE_MB=-1"]
    data = json.loads(run_line(["mmpool", "validate", *common, *override]).stdout)
    assert {f["code"]: f["location"] for f in data["files"][0]["findings"]}["budget-not-positive"] == "environment"


# --- a number is never cut or split, at any width -----------------------------------------------

# A number as mmpool prints it, with its unit and its binary reading: the pieces a line may not break.
NUMBER = re.compile(r"≈?[0-9][0-9,]*(?:\.[0-9]+)?(?: (?:B|KiB|MiB|GiB|TiB|s|%)\b| / [0-9]+)?")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QWEN_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
}
WIDTH_COMMANDS = {
    "plan-vmm": [
        "plan",
        "--size",
        "1GiB",
        "--workers",
        "4",
        "--tp",
        "8",
        "--feature-size",
        "50633856",
        "--transport",
        "cuda_vmm",
    ],
    "plan-odd": ["plan", "--size", "1000MB", "--workers", "3", "--feature-size", "7", "--feature-size", "300MiB"],
    "plan-model": ["plan", "--model", "{model}", "--image", "1920x1080", "--video", "1280x720:10:30"],
    "simulate": [
        "simulate",
        "--trace",
        str(EXAMPLES / "trace.jsonl"),
        "--workers",
        "2",
        "--tp",
        "2",
        "--smallest-budget",
    ],
    "simulate-miss": ["simulate", "--trace", str(EXAMPLES / "trace.jsonl"), "--size", "128MiB", "--workers", "2"],
}


@pytest.fixture
def model_dir(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(QWEN_7B))
    return str(tmp_path)


def _numbers(text: str) -> set[str]:
    return {m.group(0) for m in NUMBER.finditer(text)}


@pytest.mark.parametrize("name", WIDTH_COMMANDS)
@pytest.mark.parametrize("columns", ["20", "40", "80"])
def test_no_number_is_cut_or_split_at_any_width(run_line, model_dir: str, name: str, columns: str) -> None:
    argv = ["mmpool", *(model_dir if a == "{model}" else a for a in WIDTH_COMMANDS[name])]
    wide = run_line(argv, env={"COLUMNS": "400"})
    narrow = run_line(argv, env={"COLUMNS": columns})
    assert narrow.exit_code == wide.exit_code
    assert "…" not in narrow.stdout
    lines = narrow.stdout.splitlines()
    for number in _numbers(wide.stdout):
        assert any(number in line for line in lines), (number, columns)

    # nothing dropped: the same words (a stacked table repeats its headers per row)
    def words(text: str) -> set[str]:
        return {w for w in text.split() if w.strip("─")}

    assert words(narrow.stdout) == words(wide.stdout)


def test_a_pipe_gets_whole_numbers_too() -> None:
    # a pipe or CI log: no terminal, no COLUMNS, rich's 80 columns
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"NO_COLOR": "1"}
    argv = [sys.executable, "-m", "mmpool_cli", *WIDTH_COMMANDS["plan-vmm"]]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "50,633,856 B (≈48.29 MiB)" in done.stdout  # the capacity row, whole on one line
    assert "…" not in done.stdout


@pytest.mark.parametrize("columns", [20, 40, 80])
def test_probe_output_keeps_numbers_whole(columns: int) -> None:
    import io

    from rich.console import Console

    from mmpool_cli.core.findings import Severity
    from mmpool_cli.engines.sglang.models import Budget, PlanRequest
    from mmpool_cli.engines.sglang.plan import make_plan
    from mmpool_cli.probe.probe_report import GpuInfo, ProbeReport, Stage
    from mmpool_cli.render.human import probe_human

    plan = make_plan(PlanRequest(budget=Budget(bytes=2**30, source="flag"), workers=4, tp_size=8))
    gpu = GpuInfo(0, 0, "NVIDIA H200", "GPU-1", 150_754_820_096, 150_109_880_320, 0)
    stage = Stage("gpu", "Read the GPUs through NVML", status="pass", seconds=0.02)
    stage.figures.update(free_bytes=150_109_880_320, predicted_bytes=3_283_353_600)
    stage.add(Severity.info, "fits", "3,283,353,600 B (≈3.06 GiB) predicted of 150,109,880,320 B (≈139.8 GiB) free")
    report = ProbeReport(plan=plan, gpus=[gpu], base_gpu=gpu, stages=[stage], seconds=3.2, inputs=[])

    def text(width: int) -> str:
        console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
        console.print(probe_human(report))
        return console.file.getvalue()

    narrow, wide = text(columns), text(400)
    assert "…" not in narrow
    for number in _numbers(wide):
        assert any(number in line for line in narrow.splitlines()), (number, columns)


def test_check_shows_info_findings_only_with_verbose_as_validate_does(run_line) -> None:
    launch = ["--", "sglang", "serve", "m", "--tp", "8", "--mm-feature-transport", "cuda_ipc"]
    quiet = run_line(["mmpool", "check", *launch])
    verbose = run_line(["mmpool", "check", "-v", *launch])
    assert quiet.exit_code == verbose.exit_code == 0
    assert "info [" not in quiet.stdout
    assert "info [abbreviated-option]" in verbose.stdout
    # the summary counts the infos either way
    assert quiet.stdout.splitlines()[-1] == verbose.stdout.splitlines()[-1]
