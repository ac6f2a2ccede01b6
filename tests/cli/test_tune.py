"""``mmpool tune``: every row equals ``mmpool cache`` and ``mmpool simulate`` run at its settings, over random
traffic and launches; the recommended row is on the front; bad input in one line."""

from __future__ import annotations

import base64
import io
import json
import os
import random
from fractions import Fraction
from pathlib import Path

import pytest
from PIL import Image

MODEL = "examples/qwen2.5-vl-7b"  # a model directory: the KV bytes a token, the embedding's width
TOKENIZER = str(Path(__file__).parents[1] / "data" / "byte-tokenizer")  # a real tokenizer: no estimate
CELL = 57_344  # its KV bytes a token on one rank (28 layers, 4 KV heads of 128 + 128, bfloat16)
MiB = 1 << 20
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "red",
    "blue",
    "picture",
    "what",
    "is",
    "in",
    "this",
    "and",
    "how",
    "many",
    "are",
    "there",
    "show",
    "me",
]


def _png_url(size: tuple[int, int], mark: int) -> str:
    img = Image.new("RGB", size, (128, 128, 128))
    img.putpixel((mark % size[0], mark // size[0] % size[1]), (mark % 251, 7, 9))  # its own bytes
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _traffic(rng: random.Random, path: Path) -> str:
    """Multi-turn chats re-sending their images, one-off questions about images seen before, a request holding
    one image twice; some lines carry the server's completion_tokens."""
    sizes = [(56, 56), (112, 84), (224, 168), (168, 224), (280, 224), (448, 336)]
    images = [_png_url(rng.choice(sizes), n) for n in range(rng.randint(6, 14))]
    chats: list[list[dict]] = [[] for _ in range(rng.randint(1, 4))]
    lines, t = [], 1_780_000_000
    wide = rng.random() < 0.5  # a request of more than 32 distinct images: its embedding cache replayed at each size
    for n in range(rng.randint(8, 24)):
        t += rng.randint(0, 4)
        roll = rng.random()
        text = {"type": "text", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))}
        if wide and n % 5 == 2:
            many = [_png_url((56, 56), 1000 + 40 * (n % 2) + k) for k in range(34)]
            messages = [{"role": "user", "content": [*(_image(u) for u in many), text]}]
        elif roll < 0.15:
            url = rng.choice(images)
            messages = [{"role": "user", "content": [_image(url), _image(url), text]}]
        elif roll < 0.35:
            messages = [{"role": "user", "content": [_image(rng.choice(images)), text]}]
        else:
            chat = rng.choice(chats)
            chat.append({"role": "user", "content": [_image(rng.choice(images)), text]})
            messages = list(chat)
            chat.append({"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))})
        line: dict = {"timestamp": t, "body": {"model": "m", "messages": messages}}
        if rng.random() < 0.5:
            line["usage"] = {"completion_tokens": rng.randint(1, 40)}
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _sglang_log(rng: random.Random, bodies: str, path: Path) -> str:
    """The same requests as SGLang's JSON request log writes them (level 3: every input whole): each chat rendered
    in ChatML, its images in ``image_data``, received and finished at times that overlap (the lifetimes the pool
    and the radix cache replay come from the log)."""
    events = []
    for n, line in enumerate(Path(bodies).read_text().splitlines()):
        obj = json.loads(line)
        text, urls = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n", []
        for m in obj["body"]["messages"]:
            parts = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            text += f"<|im_start|>{m['role']}\n"
            for part in parts:
                if part["type"] == "image_url":
                    text += "<|vision_start|><|image_pad|><|vision_end|>"
                    urls.append({"url": part["image_url"]["url"]})
                else:
                    text += part["text"]
            text += "<|im_end|>\n"
        text += "<|im_start|>assistant\n"
        rid = f"r{n}"
        start = 10_000 * n + rng.randint(0, 9_000)  # ms: some requests overlap the next
        meta = {"id": rid, "completion_tokens": rng.randint(1, 40)}
        received = {"event": "request.received", "rid": rid, "obj": {"rid": rid, "text": text, "image_data": urls}}
        finished = {
            "event": "request.finished",
            "rid": rid,
            "obj": {"rid": rid},
            "out": {"text": "ok", "meta_info": meta},
        }
        events += [(start, received), (start + rng.randint(1, 25_000), finished)]
    lines = []
    for ms, event in sorted(events, key=lambda e: e[0]):
        stamp = f"2026-11-30T00:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}000"
        lines.append(
            f"[2026-11-30 00:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}] "
            + json.dumps({"timestamp": stamp, **event})
        )
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def _dominates(a: dict, b: dict) -> bool:
    x = (a["fallback_items"], a["fallback_bytes"], a["work_tokens"], -a["kv_tokens"])
    y = (b["fallback_items"], b["fallback_bytes"], b["work_tokens"], -b["kv_tokens"])
    return x != y and all(p <= q for p, q in zip(x, y, strict=True))


@pytest.mark.parametrize("seed", range(8))
def test_every_row_equals_cache_and_simulate_at_its_settings(run_line, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = _traffic(rng, tmp_path / "traffic.jsonl")
    if seed % 2:  # the same requests as SGLang logs them, with their lifetimes
        log = _sglang_log(rng, log, tmp_path / "server.log")
    page = rng.choice([1, 1, 4, 16])
    workers = rng.choice([1, 2])
    tp = rng.choice([1, 1, 2])
    cell = CELL // tp  # its 4 KV heads split over the ranks
    today = {
        "kv": rng.randint(1, 150) * 16,
        "pool": rng.choice([12, 20, 48, 100, 1024]),
        "embedding": rng.choice([0, 2, 10, 100]),
    }
    launch = ["--model", MODEL, "--from", log, "--workers", str(workers), "--tp", str(tp), "--page-size", str(page)]
    env = {"SGLANG_MM_FEATURE_CACHE_MB": str(today["pool"]), "SGLANG_VLM_CACHE_SIZE_MB": str(today["embedding"])}
    budget = [] if seed % 3 else ["--budget", f"{rng.randint(40, 160)}MiB"]
    argv = ["mmpool", "tune", *launch, "--max-total-tokens", str(today["kv"]), *budget, "--format", "json"]
    result = run_line(argv, env=env)
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    assert (data["schema_version"], data["status"]) == (1, "ok" if result.exit_code == 0 else "fail")
    rows = data["rows"]
    total = data["budget_bytes"]
    if not budget:  # today's launch is the budget
        assert total == today["kv"] * cell + (today["pool"] + today["embedding"]) * MiB
    rec = rows[data["recommended"]]
    assert rec["recommended"] and rec["on_front"]
    assert data["settings"] == rec["settings"]
    over = any(f["code"] == "tune-today-over-budget" for f in data["findings"])
    fits = [r for r in rows if not (over and r["today"])]  # a launch over the budget is shown, never chosen
    for i, row in enumerate(rows):  # the front: no row better on every measure
        beaten = any(_dominates(o["measures"], row["measures"]) for o in fits if o is not row)
        assert row["on_front"] == (row in fits and not beaten), i
        if not row["today"]:  # the KV cache takes what the pool and the embedding cache leave, as SGLang counts it
            left = total - (row["values"]["pool"] + row["values"]["embedding"]) * MiB
            assert row["values"]["kv"] == left // cell // page * page, i
    mine = rows[data["today"]]
    assert mine["today"] and mine["values"] == today
    picked = {data["recommended"], data["today"], *rng.sample(range(len(rows)), min(3, len(rows)))}
    for i in sorted(picked):
        _same_as_the_commands(run_line, launch, rows[i])


def _same_as_the_commands(run_line, launch: list[str], row: dict) -> None:
    v, m, f = row["values"], row["measures"], row["figures"]
    env = {"SGLANG_VLM_CACHE_SIZE_MB": str(v["embedding"]), "SGLANG_MM_FEATURE_CACHE_MB": str(v["pool"])}
    got = run_line(["mmpool", "cache", *launch, "--max-total-tokens", str(v["kv"]), "--format", "json"], env=env)
    assert got.exit_code in (0, 1), got.output
    caches = json.loads(got.stdout)["caches"]
    emb = caches[0]
    if "--trace" in launch:  # no prompts: no radix cache replayed, every item looked up
        assert len(caches) == 2
        assert (m["prefix_served_tokens"], m["prompt_tokens"], m["batch"]) == (0, 0, 0)
    else:
        radix = caches[2]
        assert (radix["size_tokens"], radix["hits"], radix["lookups"]) == (
            v["kv"],
            m["prefix_served_tokens"],
            m["prompt_tokens"],
        )
    assert emb["size_bytes"] == v["embedding"] * MiB
    assert (emb["hits"], emb["lookups"], emb["work_saved"], emb["encoder_tokens"], emb.get("served_by_prefix", 0)) == (
        f["embedding_hits"],
        f["embedding_lookups"],
        f["embedding_work_saved"],
        m["encoder_tokens"],
        f["served_by_prefix"],
    )
    workers, tp = launch[launch.index("--workers") + 1], launch[launch.index("--tp") + 1]
    given = "--trace" if "--trace" in launch else "--from"
    traffic = [given, launch[launch.index(given) + 1]]
    model = [] if given == "--trace" else ["--model", MODEL]  # a trace carries its own sizes
    sim = ["mmpool", "simulate", *model, *traffic, "--workers", workers, "--tp", tp]
    sim += ["--format", "json"]
    got = run_line(sim, env=env)
    assert got.exit_code in (0, 1), got.output
    pool = json.loads(got.stdout)
    assert pool["sglang_mm_feature_cache_mb"] == v["pool"]
    assert (pool["items"]["fallback"], pool["bytes"]["fallback"]) == (m["fallback_items"], m["fallback_bytes"])
    assert (pool["items"]["total"], pool["bytes"]["total"]) == (f["pool_items"], f["pool_bytes"])
    prefill = m["prompt_tokens"] - m["prefix_served_tokens"]
    assert m["work_tokens"] == prefill + m["encoder_tokens"]
    assert Fraction(m["work_per_request"]) == Fraction(m["work_tokens"], m["requests"])


def test_a_family_name_has_no_kv_bytes_a_token(run_line) -> None:
    argv = [
        "mmpool",
        "tune",
        "--model",
        "qwen2.5-vl",
        "--hidden-size",
        "3584",
        "--from",
        "examples/traffic/chats.jsonl",
    ]
    result = run_line([*argv, "--max-total-tokens", "2048"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "the KV cache's tokens per byte need the model's attention shape; give --model DIR" in result.stderr


def test_no_budget_is_one_line_naming_the_flags(run_line, tmp_path: Path) -> None:
    log = _traffic(random.Random(1), tmp_path / "t.jsonl")
    result = run_line(["mmpool", "tune", "--model", MODEL, "--from", log])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "give --budget SIZE" in result.stderr and "--max-total-tokens N" in result.stderr


def test_no_budget_is_said_before_the_traffic_is_read(run_line, tmp_path: Path) -> None:
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)  # a FIFO is refused as the traffic is read: the budget's refusal comes before any reading
    result = run_line(["mmpool", "tune", "--model", MODEL, "--from", str(fifo)])
    assert result.exit_code == 2 and "the memory to divide is unknown" in result.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--budget", "12 furlongs"], "--budget: "),
        (["--budget", "0"], "--budget 0: a size above 0"),
        (["--points", "1"], "--points 1: from 2 to 32"),
        (["--hidden-size", "0"], "--hidden-size 0: from 1 to 1048576"),  # as cache bounds it
        (["--tp", "0"], "--tp 0: from 1 to"),
        (["--engine", "vllm"], "--max-total-tokens is for --engine sglang: vLLM's KV capacity is --num-gpu-blocks-override"),
        (["--engine", "tgi"], "--engine tgi: choose one of sglang, vllm"),
        (["--encoder-window", "2"], "--encoder-window is a vLLM flag: add --engine vllm"),
        (["--objective", "cheapest"], "'cheapest' is not one of"),
    ],
)
def test_bad_flags_are_usage_errors(run_line, tmp_path: Path, extra: list[str], message: str) -> None:
    log = _traffic(random.Random(2), tmp_path / "t.jsonl")
    result = run_line(["mmpool", "tune", "--model", MODEL, "--from", log, "--max-total-tokens", "2048", *extra])
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr


def test_the_human_report_and_exit_zero(run_line) -> None:
    argv = ["mmpool", "tune", "--model", MODEL, "--from", "examples/traffic/chats.jsonl", "--max-total-tokens", "2048"]
    result = run_line(argv)
    assert result.exit_code == 1, result.output  # the shipped example's launch leaves work a split saves
    out = result.stdout
    assert out.startswith("mmpool tune: BETTER SPLIT  (SGLang 0.5.23, examples/traffic/chats.jsonl)\n")
    assert "export SGLANG_MM_FEATURE_CACHE_MB=20\n" in out and "--max-total-tokens 22235\n" in out
    assert "What the change buys" in out and "Assumptions" in out
    assert run_line([*argv, "--exit-zero"]).exit_code == 0


def test_the_tuned_split_is_not_each_memorys_own_recommendation_added_up(run_line) -> None:
    """The shipped chat traffic in 220 MiB a rank: each command alone recommends a pool of 20 MiB (simulate), an
    embedding cache of 21 MiB and a KV cache of 3,650 tokens (cache, at today's launch); together they do not fit,
    and giving the embedding cache its 21 MiB leaves the KV cache too small for the radix cache to serve the chats'
    earlier turns. Tuned, the radix cache serves every repeated image, so the embedding cache is worth nothing."""
    log = "examples/traffic/chats.jsonl"
    launch = ["--model", MODEL, "--from", log]
    alone = json.loads(run_line(["mmpool", "cache", *launch, "--max-total-tokens", "2048", "--format", "json"]).stdout)
    emb, _pre, radix = alone["caches"]
    assert (emb["recommended_setting"], radix["recommended_setting"]) == (
        "SGLANG_VLM_CACHE_SIZE_MB=21",
        "--max-total-tokens 3650",
    )
    sim = run_line(["mmpool", "simulate", *launch, "--smallest-budget", "--format", "json"])
    pool_mb = json.loads(sim.stdout)["smallest_budget"]["sglang_mm_feature_cache_mb"]
    assert pool_mb == 20
    budget = 220 * MiB
    assert (pool_mb + 21) * MiB + 3650 * CELL > budget  # the three recommendations do not fit together
    got = run_line(["mmpool", "tune", *launch, "--max-total-tokens", "2048", "--budget", "220MiB", "--format", "json"])
    data = json.loads(got.stdout)
    rows = data["rows"]
    tuned = rows[data["recommended"]]
    assert tuned["values"] == {"kv": 3657, "pool": 20, "embedding": 0}
    # the split the separate answers make, the KV cache taking what the pool and the embedding cache leave
    (separate,) = [r for r in rows if r["values"]["pool"] == 20 and r["values"]["embedding"] == 21 and not r["today"]]
    assert separate["values"]["kv"] == (budget - 41 * MiB) // CELL == 3273
    _same_as_the_commands(run_line, [*launch, "--workers", "1", "--tp", "1"], separate)
    a, b = tuned["measures"], separate["measures"]
    assert a["fallback_items"] == b["fallback_items"] == 0
    assert (a["work_tokens"], b["work_tokens"]) == (7862, 8591)  # 729 prompt tokens less computed, on the front
    assert a["prefix_served_tokens"] - b["prefix_served_tokens"] == 8591 - 7862
    assert tuned["on_front"] and not separate["on_front"]


@pytest.mark.parametrize("seed", range(3))
def test_a_trace_equals_cache_and_simulate_over_it(run_line, tmp_path: Path, seed: int) -> None:
    rng = random.Random(100 + seed)
    log = _traffic(rng, tmp_path / "traffic.jsonl")
    workers = rng.choice([1, 2])
    trace = str(tmp_path / "t.jsonl")
    made = run_line(["mmpool", "trace", "--model", MODEL, "--workers", str(workers), log, "-o", trace])
    assert made.exit_code == 0, made.output
    launch = ["--model", MODEL, "--trace", trace, "--workers", str(workers), "--tp", "1"]
    env = {"SGLANG_MM_FEATURE_CACHE_MB": "48", "SGLANG_VLM_CACHE_SIZE_MB": str(rng.choice([0, 4, 100]))}
    result = run_line(
        ["mmpool", "tune", *launch, "--budget", f"{rng.randint(60, 200)}MiB", "--format", "json"], env=env
    )
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    assert "the traffic carries no prompts" in data["assumptions"][1]
    rows = data["rows"]
    for i in sorted({data["recommended"], *rng.sample(range(len(rows)), min(4, len(rows)))}):
        _same_as_the_commands(run_line, launch, rows[i])


def test_a_trace_refuses_the_flags_of_a_log(run_line, tmp_path: Path) -> None:
    argv = ["mmpool", "tune", "--model", MODEL, "--trace", "t.jsonl", "--budget", "1GiB", "--assume-image", "64x64"]
    result = run_line(argv)
    assert result.exit_code == 2 and result.stdout == ""
    assert "a --trace carries its own sizes" in result.stderr
    both = run_line(["mmpool", "tune", "--model", MODEL, "--trace", "t.jsonl", "--from", "x", "--budget", "1GiB"])
    assert both.exit_code == 2 and "--from FILE (a log; repeat) or --trace FILE, one of the two" in both.stderr


def test_requests_whose_prompt_places_no_item_are_said_as_cache_says_them(run_line, tmp_path: Path) -> None:
    rng = random.Random(7)
    log = Path(_sglang_log(rng, _traffic(rng, tmp_path / "t.jsonl"), tmp_path / "server.log"))
    lines = log.read_text().splitlines()
    first = next(n for n, line in enumerate(lines) if "request.received" in line)
    lines[first] = lines[first].replace("<|vision_start|><|image_pad|><|vision_end|>", "", 1)  # one item unplaced
    log.write_text("\n".join(lines) + "\n")
    launch = ["--model", MODEL, "--from", str(log), "--max-total-tokens", "4096", "--format", "json"]
    tuned = json.loads(run_line(["mmpool", "tune", *launch]).stdout)["findings"]
    cached = json.loads(run_line(["mmpool", "cache", *launch]).stdout)["findings"]
    (said,) = [f for f in tuned if f["code"] == "prefix-not-replayed"]
    assert said in cached and said["message"].startswith("1 of ")


@pytest.mark.parametrize("seed", range(2))
def test_the_servers_cached_tokens_are_compared_as_cache_compares_them(run_line, tmp_path: Path, seed: int) -> None:
    """Every request said to be served nothing (a server with its radix cache off, say): tune says where the
    replay at today's KV differs, in cache's words."""
    rng = random.Random(20 + seed)
    log = Path(_sglang_log(rng, _traffic(rng, tmp_path / "t.jsonl"), tmp_path / "server.log"))
    lines = []
    for line in log.read_text().splitlines():
        if "request.finished" in line:
            head, body = line.split("] ", 1)
            obj = json.loads(body)
            obj["out"]["meta_info"]["cached_tokens"] = 0
            line = f"{head}] {json.dumps(obj)}"
        lines.append(line)
    log.write_text("\n".join(lines) + "\n")
    launch = ["--model", MODEL, "--from", str(log), "--max-total-tokens", "4096", "--tokenizer-path", TOKENIZER]
    tuned = json.loads(run_line(["mmpool", "tune", *launch, "--format", "json"]).stdout)["findings"]
    cached = json.loads(run_line(["mmpool", "cache", *launch, "--format", "json"]).stdout)["findings"]
    said = [f for f in tuned if f["code"].startswith("prefix-replay-")]
    assert said and said == [f for f in cached if f["code"].startswith("prefix-replay-")]
