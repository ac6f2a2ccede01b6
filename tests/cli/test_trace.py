"""`mmpool trace` and `mmpool simulate --from` end to end: the trace written, exit codes, errors."""

from __future__ import annotations

import base64
import io
import json
import os
import stat
from pathlib import Path

import pytest
from PIL import Image

from mmpool_cli.traces.reader import read_trace

LOGS = Path(__file__).parent.parent / "engines" / "sglang" / "traffic" / "data" / "sglang-0.5.23"
LOG = str(LOGS / "server-json-level2.log")


def _png_url(size=(640, 480)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _bodies(tmp_path: Path, *urls: str) -> str:
    path = tmp_path / "bodies.jsonl"
    lines = [
        json.dumps(
            {
                "timestamp": i,
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}}]}],
            }
        )
        for i, u in enumerate(urls)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_from_names_the_files_as_simulate_and_cache_read_them(run_line, tmp_path: Path) -> None:
    """``--from FILE`` (repeatable) is a file in every command; the positional FILEs are read after them."""
    both = [run_line(["mmpool", "trace", "--model", "qwen2.5-vl", *args]) for args in (["--from", LOG], [LOG])]
    assert [r.exit_code for r in both] == [0, 0], both[0].output
    assert both[0].stdout == both[1].stdout and both[0].stderr == both[1].stderr
    bodies = _bodies(tmp_path, _png_url())
    mixed = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", "--from", bodies, "--from-format", "openai"])
    assert mixed.exit_code == 0 and "from " + bodies + " (openai)" in mixed.stderr


def test_the_old_spelling_of_the_format_still_reads_and_says_so(run_line, tmp_path: Path) -> None:
    bodies = _bodies(tmp_path, _png_url())
    old = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", "--from", "openai", bodies])
    new = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", "--from-format", "openai", bodies])
    assert (old.exit_code, old.stdout) == (new.exit_code, new.stdout) == (0, new.stdout)
    warning, rest = old.stderr.split("\n", 1)
    assert warning == (
        "mmpool: warning: --from openai is the old spelling of --from-format openai (--from names the files to "
        "read, as in simulate and cache; --from ./openai reads a file of that name)"
    )
    assert rest == new.stderr


def test_trace_writes_simulates_format_with_items(run_line, tmp_path: Path) -> None:
    out = tmp_path / "prod.jsonl"
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG, "-o", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "mmpool trace: 7 requests, 12 items" in result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    allocs = [x for x in lines if x["op"] == "alloc"]
    assert allocs[0] == {
        "t": 0,
        "op": "alloc",
        "id": "chat-png/0",
        "bytes": 7357056,
        "worker": 0,
        "item": "image 640x480",
    }
    assert {x["worker"] for x in allocs} == {0, 1}
    events = read_trace(str(out), workers=2)  # simulate --trace reads it, item key and all
    assert len(events) == 24


def test_trace_never_overwrites(run_line, tmp_path: Path) -> None:
    out = tmp_path / "prod.jsonl"
    out.write_text("mine\n")
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG, "-o", str(out)])
    assert result.exit_code == 2
    assert "never overwrites" in result.stderr
    assert out.read_text() == "mine\n"


def test_trace_dash_is_stdout(run_line, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG, "-o", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout == run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG]).stdout
    assert '"op": "alloc"' in result.stdout
    assert list(tmp_path.iterdir()) == []  # no file named '-'


@pytest.mark.parametrize(("name", "umask"), [("t.jsonl", 0o022), ("t.jsonl", 0o027), ("t.parquet", 0o022)])
def test_trace_file_mode_is_every_outputs(run_line, tmp_path: Path, name: str, umask: int) -> None:
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    out = tmp_path / name
    old = os.umask(umask)
    try:
        result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG, "-o", str(out)])
        assert os.umask(umask) == umask  # the umask is left as it was
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_trace_json_summary(run_line) -> None:
    result = run_line(["mmpool", "trace", "--model", "qwen3-vl", LOG, "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stderr)
    assert summary["requests"] == 7 and summary["warmup_requests_skipped"] == 1
    assert summary["lifetimes"] == {"deferred: ReqTimeStats queue_duration": 7}
    assert summary["requests_engine_would_fail"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "qwen9-vl", LOG], "--model 'qwen9-vl': not a known model family"),
        (["--model", "internvl", LOG], "does not pool this family's features"),
        (["--model", "qwen2.5-vl", str(LOGS / "server-json-level1.log")], "--log-requests-level 2"),
        (["--model", "qwen2.5-vl", "/nonexistent.log"], "/nonexistent.log: cannot open the log"),
        (["--model", "qwen2.5-vl"], "no input: give a log FILE"),
        (["--model", "qwen2.5-vl", "-"], "not stdin"),
        ([LOG], "--model NAME|PATH is needed"),
        (["--model", "qwen2.5-vl", "--from-format", "bench-serving", "--", "--image-resolution", "8k"], "choose 4k"),
        (["--model", "qwen2.5-vl", "--assume-video", "1280x720", LOG], "--assume-video '1280x720': expected WIDTH"),
        (["--model", "qwen2.5-vl", "--from-format", "bench-serving", "--", "--dataset-name", "video"], "no video dataset"),
        (["--model", "qwen2.5-vl", "--from", "garbage.bin"], "garbage.bin: cannot open the log"),
        (
            ["--model", "qwen2.5-vl", "--from", "openai", "--from-format", "openai", LOG],
            "--from openai: --from names the files to read; give their format once, with --from-format",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(run_line, args: list[str], message: str) -> None:
    result = run_line(["mmpool", "trace", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_items_are_located_exit_2(run_line, tmp_path: Path) -> None:
    url = _png_url()
    truncated = url[: len(url) // 2 // 4 * 4]
    log = _bodies(tmp_path, "https://example.com/a.png", url, "https://example.com/b.png")
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"{log}:1 (request line1, item 0): error [traffic-image-unsized] an http(s) URL cannot be measured offline" in result.stderr
    assert "(2 items or lines could not be used)" in result.stderr
    ok = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log, "--assume-image", "800x600"])
    assert ok.exit_code == 0, ok.output
    cut = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", _bodies(tmp_path, url, truncated)])
    assert cut.exit_code == 2
    assert f"{tmp_path / 'bodies.jsonl'}:2 (request line2, item 0): error [traffic-image-unsized] truncated PNG" in cut.stderr
    empty = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", _bodies(tmp_path)])
    assert empty.exit_code == 2 and "the file is empty" in empty.stderr
    no_images = tmp_path / "text.jsonl"
    no_images.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", str(no_images)])
    assert result.exit_code == 2 and "no request with an image" in result.stderr


def test_bench_serving(run_line) -> None:
    result = run_line(
        [
            "mmpool",
            "trace",
            "--model",
            "qwen2.5-vl",
            "--from",
            "bench-serving",
            "--",
            "--num-prompts",
            "4",
            "--image-count",
            "2",
            "--image-resolution",
            "720p",
            "--request-rate",
            "inf",
        ]
    )
    assert result.exit_code == 0, result.output
    allocs = [json.loads(x) for x in result.stdout.splitlines() if '"alloc"' in x]
    assert [a["id"] for a in allocs][:3] == ["req1/0", "req1/1", "req2/0"]
    assert {a["item"] for a in allocs} == {"image 1280x720"}


def test_simulate_from_a_server_log(run_line) -> None:
    result = run_line(
        ["mmpool", "simulate", "--model", "qwen2.5-vl", "--from", LOG, "--smallest-budget", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["items"]["total"] == 12
    assert data["source"]["traffic"]["requests"] == 7
    assert "arrivals as logged" in data["source"]["assumptions"]
    assert data["smallest_budget"]["sglang_mm_feature_cache_mb"] >= 22  # the 1280x720 JPEG's 21.5 MiB
    human = run_line(["mmpool", "simulate", "--model", "qwen2.5-vl", "--from", LOG, "--recv-delay", "0.1"])
    assert human.exit_code == 0, human.output
    assert "assumptions: arrivals as logged" in human.stdout
    assert "receipt 0.1 s after arrival" in human.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", LOG, "--trace", LOG], "give one of --trace and --from"),
        (["--from", LOG, "--image", "100x100"], "describes a synthetic workload"),
        (["--from", LOG, "--rate", "3"], "describes a synthetic workload"),
        (["--image", "100x100", "--rate", "3", "--assume-image", "10x10"], "use it with --from FILE"),
        (["--image", "100x100", "--rate", "3", "--assume-video", "10x10:1:30"], "--assume-video describes traffic"),
    ],
)
def test_simulate_from_conflicts(run_line, args: list[str], message: str) -> None:
    result = run_line(["mmpool", "simulate", "--model", "qwen2.5-vl", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_synthetic_report_states_its_assumptions(run_line) -> None:
    result = run_line(
        [
            "mmpool",
            "simulate",
            "--model",
            "qwen2.5-vl",
            "--image",
            "1920x1080",
            "--concurrency",
            "32",
            "--workers",
            "4",
            "--format",
            "json",
        ]
    )
    data = json.loads(result.stdout)
    assert data["occupancy"]["mean_bytes"] > 0  # no lockstep: the mean is what is really leased
    assert "first requests spread" in data["source"]["assumptions"]
    burst = run_line(
        [
            "mmpool",
            "simulate",
            "--model",
            "qwen2.5-vl",
            "--image",
            "1920x1080",
            "--concurrency",
            "32",
            "--workers",
            "4",
            "--burst",
        ]
    )
    assert "assumptions: 32 clients, every first request at t = 0 (--burst)" in burst.stdout


def test_trace_of_the_shipped_video_bodies(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("av", reason="PyAV (pip install '.[video]') reads the containers")
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the bodies name the clip relative to the root
    args = ["--from-format", "openai", "examples/traffic/videos.jsonl", "--assume-video", "1280x720:60:30"]
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stderr)
    assert (summary["requests"], summary["bytes"], summary["ignored_fields"]) == (2, 823_689_216, {"fps": 1})


def test_nothing_to_size_names_each_reason(run_line, tmp_path: Path) -> None:
    # SGLang opens both as file paths and fails the request: each line's reason is the answer
    log = _bodies(tmp_path, "/dev/zero", "/9j/4AAQSkZJRgABAQ")
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == f"mmpool: error: {log}: no request with an image or a video the pool would take; nothing to size"
    assert lines[1].startswith(f"  {log}:1 (request line1, item 0): ")
    assert "a string starting with '/': the server opens it as a file path" in lines[1]
    assert lines[2].startswith(f"  {log}:2 (request line2, item 0): ")
    assert "a raw base64 JPEG ('/9j/...')" in lines[2]
    assert lines[3] == "see 'mmpool trace --help'"


def test_json_errors_carry_finding_codes(run_line, tmp_path: Path) -> None:
    log = _bodies(tmp_path, "https://example.com/a.png", "/dev/zero")
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log, "--format", "json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    data = json.loads(result.stderr)
    assert data["status"] == "error"
    assert data["error"].startswith(f"{log}:1 (request line1, item 0): error [traffic-image-unsized] an http(s) URL cannot be measured")
    assert [(f["where"], f["severity"], f["code"]) for f in data["findings"]] == [
        (f"{log}:1 (request line1, item 0)", "error", "traffic-image-unsized"),
        (f"{log}:2 (request line2, item 0)", "warning", "traffic-request-fails"),
    ]
    nothing = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", _bodies(tmp_path, "/dev/zero"), "--format", "json"])
    data = json.loads(nothing.stderr)
    assert nothing.exit_code == 2 and "nothing to size" in data["error"]
    assert [f["code"] for f in data["findings"]] == ["traffic-request-fails"]
    usage = run_line(["mmpool", "trace", "--model", "qwen9-vl", log, "--format", "json"])
    data = json.loads(usage.stderr)
    assert usage.exit_code == 2 and data["findings"] == [] and "not a known model family" in data["error"]


EXAMPLE_LOG = Path(__file__).resolve().parent.parent.parent / "examples" / "server.log"


def test_the_shipped_example_log_replays_with_smallest_budget(run_line) -> None:
    # the documentation's example: a real SGLang 0.5.23 request log (scripts/sglang_request_logs.py --example)
    lines = [json.loads(line.split("] ", 1)[1]) for line in EXAMPLE_LOG.read_text().splitlines() if "] {" in line]
    received = [x for x in lines if x.get("event") == "request.received" and x["rid"] != "warmup0"]
    images = sum(len(x["obj"]["image_data"]) for x in received)
    assert (len(received), images) == (8, 10)
    argv = ["mmpool", "simulate", "--model", "qwen2.5-vl", "--from", str(EXAMPLE_LOG), "--smallest-budget"]
    result = run_line(argv)
    assert result.exit_code == 0, result.output
    assert "Smallest safe budget" in result.stdout
    assert "mmpool trace: 8 requests, 10 items, 10 allocs" in result.stderr
    data = json.loads(run_line([*argv, "--format", "json"]).stdout)
    assert data["smallest_budget"]["method"] == "safe"
