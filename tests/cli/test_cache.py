"""``mmpool cache``: traffic -> both caches' figures; the trace's content keys; bad input in one line."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from mmpool_cli.caches.from_trace import read_items


def _png_url(size: tuple[int, int], colour: int = 0) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, (colour, 0, 0)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _bodies(tmp_path: Path, *requests: list[str]) -> str:
    path = tmp_path / "bodies.jsonl"
    lines = [
        json.dumps(
            {
                "timestamp": i,
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in urls]}
                ],
            }
        )
        for i, urls in enumerate(requests)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_same_image_bytes_hit_and_the_trace_answers_the_same(run_line, tmp_path: Path) -> None:
    a, b = _png_url((56, 56)), _png_url((112, 56), 9)
    log = _bodies(tmp_path, [a], [a, b], [a, b], [b])  # a multi-turn chat re-sending its images
    # without the radix cache every item is looked up (what a trace, which carries no prompts, answers)
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--format", "json"]
    result = run_line([*argv, "--from", log, "--disable-radix-cache"])
    assert result.exit_code == 1, result.output  # the preprocess cache is off, and the traffic would hit
    data = json.loads(result.stdout)
    emb, pre, radix = data["caches"]
    assert (radix["name"], radix["size_tokens"], radix["hits"]) == ("prefix", 0, 0)
    assert (emb["name"], emb["engine"], emb["lookups"], emb["hits"]) == ("embedding", "sglang", 6, 4)
    assert emb["size_bytes"] == 100 << 20
    assert emb["work_saved"] == 4 + 4 + 8 + 8  # encoder tokens: a is 4 (56x56), b 8 (112x56)
    assert emb["curve"][0] == {"size_bytes": 0, "hits": 0, "work_saved": 0}
    assert emb["recommended_bytes"] == 1 << 20 and emb["recommended_setting"] == "SGLANG_VLM_CACHE_SIZE_MB=1"
    assert (pre["name"], pre["size_bytes"], pre["hits"]) == ("preprocess", 0, 0)
    assert pre["recommended_setting"].startswith("--mm-preprocess-cache-size-mb ")
    codes = [(f["code"], f["severity"]) for f in data["findings"]]
    # the radix cache and the preprocess cache are off while the traffic would use them: never silent
    assert codes == [
        ("prefix-cache-off", "info"),
        ("cache-off", "info"),
        ("cache-below-target", "warning"),
        ("cache-below-target", "warning"),
    ]
    out = tmp_path / "t.jsonl"
    assert run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log, "-o", str(out)]).exit_code == 0
    keys = [json.loads(line).get("key") for line in out.read_text().splitlines() if '"alloc"' in line]
    assert keys[0] == keys[1] == keys[3] and keys[2] == keys[4] == keys[5] and keys[0] != keys[2]
    assert [it.key for it in read_items(str(out))] == keys
    again = run_line([*argv, "--trace", str(out)])

    def figures(caches: list[dict]) -> list[dict]:  # what each cache did, without its notes on the radix cache
        return [{k: v for k, v in c.items() if k not in ("notes", "served_by_prefix")} for c in caches]

    assert figures(json.loads(again.stdout)["caches"]) == figures(data["caches"][:2])
    pq = tmp_path / "t.parquet"
    assert run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log, "-o", str(pq)]).exit_code == 0
    assert [it.key for it in read_items(str(pq))] == keys


def test_the_radix_cache_serves_a_chats_earlier_images_which_are_never_looked_up(run_line, tmp_path: Path) -> None:
    a, b = _png_url((56, 56)), _png_url((112, 56), 9)
    log = _bodies(tmp_path, [a], [a, b], [a, b], [b])
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--format", "json", "--from", log]
    data = json.loads(run_line(argv).stdout)
    emb, _, radix = data["caches"]
    # a in turn 2, a and b in turn 3 lie in the prefix turn 1 and 2 left: 3 items served, never looked up;
    # b in turn 4 follows another image's run, so it is looked up, and hits
    assert (emb["lookups"], emb["hits"], emb["served_by_prefix"]) == (3, 1, 3)
    assert radix["name"] == "prefix" and radix["unit"] == "tokens" and radix["tokens_estimated"] is True
    assert radix["hits"] > 0 and radix["curve"][-1]["hits"] == radix["unbounded_hits"]
    codes = [f["code"] for f in data["findings"]]
    assert "prefix-tokens-estimated" in codes and "prefix-capacity-assumed" in codes
    # the curve starts at the least capacity every prompt runs in (the longest prompt, 36 tokens estimated)
    least = radix["curve"][0]["size_tokens"]
    small = json.loads(run_line([*argv, "--max-total-tokens", str(least)]).stdout)
    assert least == 36 and small["caches"][2]["size_tokens"] == least
    assert small["caches"][2]["hits"] == radix["curve"][0]["hits"] <= radix["hits"]
    tiny = json.loads(run_line([*argv, "--max-total-tokens", "16"]).stdout)
    assert "the replay runs it over the capacity" in " ".join(tiny["caches"][2]["notes"])


def test_the_replay_is_checked_against_the_servers_cached_tokens(run_line, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    a = _png_url((56, 56))  # 4 tokens
    first = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": a}}, {"type": "text", "text": "Hi"}]}]
    second = [*first, {"role": "assistant", "content": "A cat."}, {"role": "user", "content": "More"}]
    # with one token per byte: <|im_start|> user\n <|vision_start|> 4 pads <|vision_end|> Hi <|im_end|> \n
    # <|im_start|> assistant\n is 27 tokens, turn 1's whole prompt, which turn 2 starts with
    path = tmp_path / "usage.jsonl"

    def lines(cached: int) -> str:  # each body with the server's answer beside it
        out = []
        for n, (messages, told) in enumerate([(first, 0), (second, cached)]):
            usage = {"prompt_tokens_details": {"cached_tokens": told}}
            out.append(json.dumps({"timestamp": n, "body": {"messages": messages}, "response": {"usage": usage}}))
        return "\n".join(out) + "\n"

    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--format", "json", "--from", str(path)]
    tok = ["--tokenizer-path", str(Path(__file__).parents[1] / "data" / "byte-tokenizer")]
    path.write_text(lines(27))
    data = json.loads(run_line([*argv, *tok]).stdout)
    assert ("prefix-replay-matches", "info") in [(f["code"], f["severity"]) for f in data["findings"]]
    assert data["caches"][2]["tokens_estimated"] is False and data["caches"][2]["hits"] == 27
    path.write_text(lines(20))
    data = json.loads(run_line([*argv, *tok]).stdout)
    differs = [f for f in data["findings"] if f["code"] == "prefix-replay-differs"]
    assert differs and differs[0]["message"].startswith("request line2: the server served 20 cached tokens, the replay 27")
    # estimated tokens are not compared, and the report says so
    data = json.loads(run_line(argv).stdout)
    assert not [f for f in data["findings"] if f["code"].startswith("prefix-replay")]
    assert "not compared" in " ".join(data["caches"][2]["notes"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-total-tokens", "0"], "--max-total-tokens 0: from 1 to"),
        (["--page-size", "0"], "--page-size 0: from 1 to"),
        (["--max-total-tokens", "100", "--page-size", "16"], "give a multiple of it"),
        (["--tokenizer-path", "/nonexistent/tok"], "no tokenizer can be loaded from /nonexistent/tok"),
    ],
)
def test_bad_prefix_flags_are_one_line(run_line, tmp_path: Path, flags: list[str], message: str) -> None:
    log = _bodies(tmp_path, [_png_url((56, 56))])
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--from", log, *flags]
    result = run_line(argv)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_human_table_and_plot(run_line, tmp_path: Path) -> None:
    a = _png_url((56, 56))
    log = _bodies(tmp_path, [a], [a])
    plot = tmp_path / "c.svg"
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--from", log, "--plot", str(plot)]
    result = run_line([*argv, "--mm-preprocess-cache-size-mb", "4"])
    assert result.exit_code == 0, result.output
    assert "Embedding cache (GPU, scheduler)" in result.stdout and "← deployment" in result.stdout
    assert b"mmpool cache" in plot.read_bytes()


def test_bad_input_is_one_line(run_line, tmp_path: Path) -> None:
    log = _bodies(tmp_path, [_png_url((56, 56))])
    cases = [
        (["--model", "qwen2.5-vl", "--from", log], "--hidden-size"),
        (["--model", "qwen3-vl", "--hidden-size", "8", "--from", log], "--gpu-name"),
        (["--model", "qwen2.5-vl", "--hidden-size", "8"], "--from FILE"),
        (["--model", "qwen2.5-vl", "--hidden-size", "8", "--from", log, "--target-hits", "101"], "--target-hits"),
        (
            ["--model", "qwen2.5-vl", "--hidden-size", "8", "--from", log, "--mm-preprocess-cache-size-mb", "-1"],
            "non-negative",
        ),
        (["--model", "qwen2.5-vl", "--hidden-size", "8", "--trace", "-"], "reads its trace twice"),
        (["--model", "qwen2.5-vl", "--hidden-size", "8", "--from", log, "--plot", "x.pdf"], ".svg or .png"),
    ]
    for args, words in cases:
        result = run_line(["mmpool", "cache", *args])
        assert result.exit_code == 2, (args, result.output)
        assert words in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_hidden_size_against_the_model_directory(run_line, tmp_path: Path) -> None:
    # a model directory says its own hidden size: --hidden-size may repeat it, never contradict it
    model = tmp_path / "m"
    model.mkdir()
    config = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 3584}
    (model / "config.json").write_text(json.dumps(config))
    log = _bodies(tmp_path, [_png_url((56, 56))], [_png_url((56, 56))])
    argv = ["mmpool", "cache", "--model", str(model), "--from", log, "--format", "json"]
    same = run_line([*argv, "--hidden-size", "3584"])
    assert same.exit_code in (0, 1), same.stderr
    assert json.loads(same.stdout) == json.loads(run_line(argv).stdout)
    bad = run_line([*argv, "--hidden-size", "4096"])
    assert bad.exit_code == 2
    assert "--hidden-size 4096" in bad.stderr and "3,584" in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_traffic_whose_items_carry_no_data_is_refused_not_answered_with_zero(run_line) -> None:
    # examples/server.log is a level-2 request log: every image's data is cut to its ends
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--from", "examples/server.log"]
    result = run_line(argv)
    assert result.exit_code == 2, result.output
    assert "none of its 10 items carries its data" in result.stderr and "--log-requests-level 3" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.output


def test_some_items_without_data_are_a_warning(run_line, tmp_path: Path) -> None:
    a = _png_url((56, 56))
    log = _bodies(tmp_path, [a], [a], [a])
    trace = tmp_path / "t.jsonl"
    assert run_line(["mmpool", "trace", "--model", "qwen2.5-vl", log, "-o", str(trace)]).exit_code == 0
    lines = trace.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if '"alloc"' in line)
    event = json.loads(lines[last])
    del event["key"]  # an item whose data the input did not hold
    lines[last] = json.dumps(event)
    trace.write_text("\n".join(lines) + "\n")
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--format", "json"]
    result = run_line([*argv, "--trace", str(trace)])
    data = json.loads(result.stdout)
    found = {f["code"]: f["severity"] for f in data["findings"]}
    assert found.get("cache-item-unkeyed") == "warning", result.output
    assert data["caches"][0]["hits"] == 1  # the two keyed lookups of a; the unkeyed one used once


def test_below_target_is_1_and_exit_zero_keeps_the_report(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    # the shipped example: the preprocess cache is off by default and its traffic repeats, so it is below
    # target: exit 1 with the whole report, which a script tells from mmpool's own failures (2, 70)
    argv = ["mmpool", "cache", "--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/chats.jsonl"]
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    below = run_line([*argv, "--format", "json"])
    assert below.exit_code == 1 and json.loads(below.stdout)["status"] == "fail"
    zero = run_line([*argv, "--format", "json", "--exit-zero"])
    assert (zero.exit_code, zero.stdout) == (0, below.stdout)
    monkeypatch.setenv("MMPOOL_EXIT_ZERO", "1")
    assert run_line([*argv, "--format", "json"]).exit_code == 0
    refused = run_line([*argv, "--target-hits", "101", "--exit-zero"])
    assert (refused.exit_code, refused.stdout) == (2, "")


def test_one_of_anything_is_said_in_the_singular(run_line, tmp_path: Path) -> None:
    log = _bodies(tmp_path, [_png_url((56, 56))])
    argv = ["mmpool", "cache", "--model", "qwen2.5-vl", "--hidden-size", "3584", "--from", log]
    out = " ".join(run_line([*argv, "--mm-preprocess-cache-size-mb", "4"]).stdout.split())
    assert "0 of 1 lookup (0.00%)" in out and "1 lookups" not in out
