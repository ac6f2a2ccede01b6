"""`mmpool check --from FILE -- vllm serve ...`: a vLLM launch held to its traffic, by tune --engine vllm's own
scoring of today's launch (and so equal to `mmpool cache --engine vllm` at the launch's flags)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = "examples/qwen2.5-vl-7b"
CHATS = "examples/traffic/vllm-chats.jsonl"
CLIP = ROOT / "examples" / "traffic" / "clip.mp4"
NO_VIDEO = ["--limit-mm-per-prompt", '{"video": 0}']
HOST = ["--host-memory", "64GiB", "--shm-size", "1GiB"]  # this machine's RAM is not what these tests are about
GPU_DECODE = ["--media-io-kwargs", '{"video": {"video_backend": "pynvvideocodec"}}']


def _check(run_line, opts: list[str], launch: list[str]):
    return run_line(["mmpool", "check", *HOST, *opts, "--", "vllm", "serve", MODEL, *launch])


def _findings(result) -> dict[str, dict]:
    return {f["code"]: f for f in json.loads(result.stdout)["files"][-1]["findings"]}


def _pct(part: int, whole: int) -> str:
    hundredths = 10000 * part // whole
    return f"{hundredths // 100}.{hundredths % 100:02d}%"


@pytest.mark.parametrize(
    "flags",
    [
        ["--num-gpu-blocks-override", "400", *NO_VIDEO],
        ["--num-gpu-blocks-override", "150", "--max-num-batched-tokens", "20000", *NO_VIDEO],
        ["--num-gpu-blocks-override", "900", "--block-size", "32", "--api-server-count", "2"],
    ],
)
def test_the_launchs_figures_are_tunes_today_row_and_caches_at_its_flags(run_line, flags: list[str]) -> None:
    checked = _check(run_line, ["-v", "--format", "json", "--from", CHATS], flags)
    assert checked.exit_code == 0, checked.output
    said = _findings(checked)["tune-measures"]
    assert (said["severity"], said["location"]) == ("info", "traffic")
    tuned = run_line(
        ["mmpool", "tune", "--engine", "vllm", "--model", MODEL, "--from", CHATS, *flags]
        + ["--format", "json", "--exit-zero"]
    )
    assert tuned.exit_code == 0, tuned.output
    data = json.loads(tuned.stdout)
    today = data["rows"][data["today"]]
    m, v = today["measures"], today["values"]
    assert v["kv"] == int(flags[1])
    served = f"{m['prefix_served_tokens']:,} of {m['prompt_tokens']:,} prompt tokens"
    assert said["message"] == (
        f"over {CHATS} ({m['requests']:,} requests) at the launch's settings (kv {v['kv']:,}, encoder "
        f"{v['encoder']:,}, decode_pool {v['decode_pool']:,}): {m['fallback_items']:,} videos refused by the GPU "
        f"decode pool (each fails its request); the prefix cache serves {served} "
        f"({_pct(m['prefix_served_tokens'], m['prompt_tokens'])}); {m['encoder_tokens']:,} encoder tokens computed; "
        f"{m['kv_tokens']:,} KV tokens"
    )
    # and what `mmpool cache --engine vllm` prints at the same flags
    cached = run_line(
        ["mmpool", "cache", "--engine", "vllm", "--model", MODEL, "--from", CHATS, *flags, "--format", "json"]
    )
    assert cached.exit_code in (0, 1), cached.output
    caches = {c["name"]: c for c in json.loads(cached.stdout)["caches"]}
    assert caches["prefix"]["size_blocks"] == v["kv"]
    assert (caches["prefix"]["hits"], caches["prefix"]["lookups"]) == (m["prefix_served_tokens"], m["prompt_tokens"])
    assert caches["encoder"]["encoder_tokens"] == m["encoder_tokens"] > 0
    assert caches["encoder"]["size_tokens"] == v["encoder"]


def test_the_prefix_bound_is_met_at_the_launchs_share_and_missed_just_above(run_line) -> None:
    launch = ["--num-gpu-blocks-override", "400", *NO_VIDEO]
    said = _findings(_check(run_line, ["-v", "--format", "json", "--from", CHATS], launch))["tune-measures"]["message"]
    share = said.split(" prompt tokens (")[1].split("%")[0]  # 23.86: floored, so the launch meets it
    met = _check(run_line, ["--from", CHATS, "--min-prefix-hit", share], launch)
    assert met.exit_code == 0, met.output
    assert "tune-prefix-hit-under" not in met.stdout
    above = f"{float(share) + 0.01:.2f}"
    missed = _check(run_line, ["--format", "json", "--from", CHATS, "--min-prefix-hit", above], launch)
    assert missed.exit_code == 1, missed.output
    error = _findings(missed)["tune-prefix-hit-under"]
    assert error["severity"] == "error" and f"below --min-prefix-hit {above}%" in error["message"]
    assert f"'mmpool tune --engine vllm --from {CHATS}' shows what more KV buys" in error["message"]
    off = _check(run_line, ["--from", CHATS, "--min-prefix-hit", "1"], [*launch, "--no-enable-prefix-caching"])
    assert off.exit_code == 1 and "error [tune-prefix-hit-under]" in off.stdout  # no prefix cache: serves 0 %


@pytest.fixture
def videos(tmp_path) -> str:
    """The chats' first turn and one clip, decoded on the GPU by the launches below."""
    first = Path(ROOT / CHATS).read_text().splitlines()[0]
    clip = {"type": "video_url", "video_url": {"url": "file://" + str(CLIP)}}
    body = {"messages": [{"role": "user", "content": [clip, {"type": "text", "text": "What happens?"}]}]}
    path = tmp_path / "bodies.jsonl"
    path.write_text(first + "\n" + json.dumps(body) + "\n")
    return str(path)


@pytest.mark.parametrize(("gb", "refused"), [("0.001", 1), ("0.5", 0)])
def test_the_fallback_bound_counts_the_videos_the_decode_pool_refuses(run_line, videos, gb: str, refused: int) -> None:
    launch = ["--num-gpu-blocks-override", "400", "--mm-ipc-gpu-memory-gb", gb, *GPU_DECODE]
    tuned = run_line(
        ["mmpool", "tune", "--engine", "vllm", "--model", MODEL, "--from", videos, *launch[:4]]
        + ["--video-backend", "pynvvideocodec", "--format", "json", "--exit-zero"]
    )
    data = json.loads(tuned.stdout)
    assert data["rows"][data["today"]]["measures"]["fallback_items"] == refused
    held = _check(run_line, ["--format", "json", "--from", videos, "--max-fallback", str(refused)], launch)
    assert held.exit_code == 0, held.output
    videos_said = "1 video" if refused == 1 else f"{refused:,} videos"
    assert f"{videos_said} refused by the GPU decode pool" in _findings(held)["tune-measures"]["message"]
    if refused:
        over = _check(run_line, ["--from", videos, "--max-fallback", "0"], launch)
        assert over.exit_code == 1, over.output
        assert (
            f"error [tune-fallback-over] 1 video of {videos} is refused by the GPU decode pool (it fails its "
            "request) at the launch's settings, more than --max-fallback 0" in over.stdout
        )
        ran = _check(run_line, ["--from", videos, "--max-fallback", "0", "--exec"], launch)
        assert ran.exit_code == 1 and "error [tune-fallback-over]" in ran.stderr  # never launched


def test_a_video_the_pool_cannot_size_is_warned_of_never_counted_as_fitting(run_line, tmp_path) -> None:
    body = {
        "messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "file:///no/such.mp4"}}]}]
    }
    path = tmp_path / "bodies.jsonl"
    path.write_text(Path(ROOT / CHATS).read_text().splitlines()[0] + "\n" + json.dumps(body) + "\n")
    launch = ["--num-gpu-blocks-override", "400", "--mm-ipc-gpu-memory-gb", "0.001", *GPU_DECODE]
    result = _check(run_line, ["--strict", "--from", str(path), "--max-fallback", "0"], launch)
    assert result.exit_code == 1, result.output  # a warning under --strict
    assert f"warning [vllm-tune-video-unsized] {path}:2: " in result.stdout


def test_a_launch_that_fails_its_check_is_not_replayed(run_line) -> None:
    result = run_line(
        ["mmpool", "check", "-v", "--host-memory", "8GiB", "--from", CHATS, "--min-prefix-hit", "99"]
        + ["--", "vllm", "serve", MODEL, "--num-gpu-blocks-override", "400", "--mm-processor-cache-gb", "100"]
    )
    assert result.exit_code == 1
    assert "error [vllm-host-memory-exceeded]" in result.stdout and "tune-" not in result.stdout


@pytest.mark.parametrize(
    ("opts", "launch", "said"),
    [
        (
            ["--from", CHATS],
            [],
            "--from: the launch gives no --num-gpu-blocks-override, so its KV blocks are unknown offline; add the "
            "num_gpu_blocks vLLM reports once started (its vllm:cache_config_info metric) to the launch",
        ),
        (
            ["--max-fallback", "0"],
            ["--num-gpu-blocks-override", "400"],
            "--max-fallback holds the launch to its traffic",
        ),
        (["--from", CHATS, "--min-prefix-hit", "x"], ["--num-gpu-blocks-override", "400"], "--min-prefix-hit x: a "),
        (["--from", CHATS], ["--num-gpu-blocks-override", "1"], "--num-gpu-blocks-override 1: from 2 (one is the null"),
        (["--from", CHATS], ["--num-gpu-blocks-override", "400", "--block-size", "0"], "--block-size 0: from 1 to"),
        (["--from", "no/such.jsonl"], ["--num-gpu-blocks-override", "400"], "no/such.jsonl: cannot open the log"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(run_line, opts: list[str], launch: list[str], said: str) -> None:
    result = _check(run_line, opts, launch)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mmpool: error: {said}"), result.stderr


@pytest.mark.parametrize("model", [[], ["--model", "qwen2.5-vl"]])
def test_a_model_that_is_no_local_folder_is_a_usage_error(run_line, model: list[str]) -> None:
    result = run_line(
        ["mmpool", "check", *HOST, *model, "--from", CHATS, "--"]
        + ["vllm", "serve", "Qwen/Qwen2.5-VL-7B-Instruct", "--num-gpu-blocks-override", "400"]
    )
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.startswith("mmpool: error: --from: the launch's model is not a local directory")
    assert result.stderr.count("\n") == 1
