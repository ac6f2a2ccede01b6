"""``mmpool tune --engine vllm``: every row equals ``mmpool cache --engine vllm`` (and, for the decode pool,
``mmpool plan --engine vllm --video``) run at that row's settings, over random traffic and launches."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import random
import struct
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.cli.vllm_options import VideoBackend, VllmOptions
from mmpool_cli.engines.vllm import tune as vt
from mmpool_cli.engines.vllm.plan import make_plan
from mmpool_cli.engines.vllm.prefix import PrefixFlags
from mmpool_cli.errors import MmpoolError
from mmpool_cli.tune.front import dominates, key
from mmpool_cli.usecases import tune_vllm
from mmpool_cli.usecases.cache_vllm import vllm_caches
from mmpool_cli.workload.hf import resolve

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "qwen2.5-vl-7b"  # Qwen2.5-VL-7B's shape: 28 layers, 4 KV heads
EXAMPLE = ROOT / "examples" / "traffic" / "vllm-chats.jsonl"
CLIP = ROOT / "examples" / "traffic" / "clip.mp4"
VIDEO_OFF = '{"video": 0}'
SIZES = [(1280, 720), (1920, 1080), (1024, 768), (800, 600), (640, 480), (448, 448), (2048, 1536)]


def _png(width: int, height: int, mark: int) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = bytearray(b"".join(b"\x00" + bytes(width) for _ in range(height)))
    raw[1 + mark % width] = 1 + mark % 255  # a pixel of its own: every image its own bytes
    body = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw))
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + body + chunk(b"IEND", b"")).decode()


def _traffic(rng: random.Random, path: Path, videos: list[str] = ()) -> str:  # type: ignore[assignment]
    """Multi-turn chats resending their images, popular images in one-off requests, a video now and then."""
    images = [_png(*rng.choice(SIZES), n) for n in range(rng.randint(12, 30))]
    chats: list[list[dict[str, Any]]] = [[] for _ in range(rng.randint(1, 4))]
    lines = []
    for turn in range(rng.randint(16, 40)):
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": rng.choice(images)}} for _ in range(rng.randint(1, 3))
        ]
        if videos and rng.random() < 0.3:
            parts.append({"type": "video_url", "video_url": {"url": rng.choice(videos)}})
        parts.append({"type": "text", "text": f"turn {turn}: what changed?" * rng.randint(1, 6)})
        if rng.random() < 0.3:
            lines.append(json.dumps({"messages": [{"role": "user", "content": parts}]}))
            continue
        chat = rng.choice(chats)
        chat.append({"role": "user", "content": parts})
        lines.append(json.dumps({"messages": chat}))
        chat.append({"role": "assistant", "content": "It moved." * rng.randint(1, 4)})
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(MODEL)


def _launch(rng: random.Random) -> dict[str, Any]:
    return {
        "limit_mm_per_prompt": rng.choice([VIDEO_OFF, VIDEO_OFF, VIDEO_OFF, None]),
        "max_num_batched_tokens": rng.choice([None, "2048", "8192", "20000"]),
        "api_server_count": rng.choice([None, "2"]),
    }


def _run_cache(files: list[str], model_dir: str, launch: dict[str, Any], flags: PrefixFlags, settings, window):
    """``mmpool cache --engine vllm`` at the launch with a row's settings (its copy-paste lines) applied."""
    launch, flags = dict(launch), dataclasses.replace(flags)
    words = iter(" ".join(settings).split())
    for flag in words:
        value = next(words)
        if flag == "--num-gpu-blocks-override":
            flags = dataclasses.replace(flags, num_blocks=int(value))
        elif flag == "--block-size":
            flags = dataclasses.replace(flags, block_size=int(value))
        else:
            launch[flag[2:].replace("-", "_")] = value
    request = VllmOptions(**launch).request(os.environ, resolve(model_dir), ())
    return vllm_caches(files, request, window=window, flags=flags), request


def _check_rows(report, files, model_dir, launch, flags, window, scorer) -> None:
    """Each row of ``report`` against ``mmpool cache --engine vllm`` at the row's settings; the recommendation."""
    assert report.rows and sum(r.recommended for r in report.rows) == 1
    block = flags.block_size
    for row in report.rows:
        got, at = _run_cache(files, model_dir, launch, flags, row.settings, window)
        processor, encoder, prefix = got["caches"]
        m, f = row.measures, row.figures
        # the KV blocks and the prefix cache they hold
        assert prefix["size_blocks"] == (row.values["kv"] if flags.enabled else 0)
        assert m.prompt_tokens == prefix["lookups"] == f["prefix_lookup_tokens"]
        assert m.prefix_served_tokens == prefix["hits"] == f["prefix_served_tokens"]
        assert m.kv_tokens == (row.values["kv"] - 1) * block
        assert row.bytes["kv"] == row.values["kv"] * scorer.block_bytes
        # the encoder cache behind it, at the budget the row's --max-num-batched-tokens gives
        assert encoder["size_tokens"] == row.values["encoder"]
        assert encoder["size_bytes"] == row.bytes["encoder"]
        assert encoder["served_by_prefix"] == f["items_served_by_prefix"]
        assert encoder["lookups"] == f["encoder_lookups"]
        assert encoder["hits"] == f["encoder_hits"] and encoder["work_saved"] == f["encoder_saved_tokens"]
        assert m.encoder_tokens == encoder["encoder_tokens"] == f["encoder_lookup_tokens"] - encoder["work_saved"]
        assert len(encoder["waited_requests"]) == f["encoder_waited"]
        assert len(encoder["refused_requests"]) == f["encoder_refused"]
        assert encoder["recomputed_tokens"] == f["encoder_recomputed_tokens"]
        # the decode pool (no video here: off in every candidate) and the whole within the budget
        assert (at.ipc_gb.bytes if at.ipc_gb else 0) == row.values["decode_pool"] == row.bytes["decode_pool"]
        assert m.fallback_items == m.fallback_bytes == 0
        if not row.today:
            assert sum(row.bytes.values()) <= report.budget_bytes
        assert m.requests == got["traffic"]["requests_with_images"]
    on = [r for r in report.rows if r.on_front]
    best = report.recommended
    assert best.on_front and not any(dominates(r.measures, best.measures) for r in report.rows if not r.today)
    assert all(key(best.measures, report.objective) <= key(r.measures, report.objective) for r in on)


@pytest.mark.parametrize("seed", range(8))
def test_every_row_equals_cache_at_its_settings_and_the_recommended_row_is_on_the_front(tmp_path, model_dir, seed):
    rng = random.Random(seed)
    files = [_traffic(rng, tmp_path / "bodies.jsonl")]
    launch = _launch(rng)
    window = rng.randint(1, 3)
    block = rng.choice([16, 16, 32])
    flags = PrefixFlags(
        enabled=rng.random() < 0.85,
        num_blocks=rng.randint(40, 1200) // (block // 16),
        block_size=block,
        model_dir=model_dir,
    )
    request = VllmOptions(**launch).request(os.environ, resolve(model_dir), ())
    req = tune_vllm.tune_request(files, request, flags, window=window, points=rng.randint(2, 8))
    scorer = vt.Scorer(req.pools)
    if rng.random() < 0.4:  # --budget: the encoder's floor and up to 1.5 GiB beside it
        req = dataclasses.replace(req, budget_bytes=scorer.floor * scorer.per_token + (rng.randint(2, 1500) << 20))
    _check_rows(tune_vllm.tune(req), files, model_dir, launch, flags, window, scorer)


@pytest.mark.parametrize("blocks", [120, 400, 3000])
def test_on_the_shipped_example_every_row_equals_cache_at_its_settings(model_dir, blocks):
    launch = {"limit_mm_per_prompt": '{"video": 0}'}
    request = VllmOptions(**launch).request(os.environ, resolve(model_dir), ())
    flags = PrefixFlags(num_blocks=blocks, model_dir=model_dir)
    req = tune_vllm.tune_request([str(EXAMPLE)], request, flags)
    report = tune_vllm.tune(req)
    assert len(report.rows) > 1
    _check_rows(report, [str(EXAMPLE)], model_dir, launch, flags, 1, vt.Scorer(req.pools))


def test_today_is_a_row_and_tune_at_scores_it_as_tune_does(model_dir):
    request = VllmOptions(limit_mm_per_prompt='{"video": 0}').request(os.environ, resolve(model_dir), ())
    flags = PrefixFlags(num_blocks=300, model_dir=model_dir)
    req = tune_vllm.tune_request([str(EXAMPLE)], request, flags)
    report = tune_vllm.tune(req)
    today = report.today
    assert today is not None and today.values == {"kv": 300, "encoder": 16384, "decode_pool": 0}
    assert tune_vllm.tune_at(req) == dataclasses.replace(today, on_front=False, recommended=False)
    # the budget is today's KV blocks and encoder cache: every candidate divides those bytes
    assert report.budget_bytes == sum(today.bytes.values())
    other = next(r for r in report.rows if not r.today)
    assert tune_vllm.tune_at(req, other.values).measures == other.measures


def test_the_shipped_example_with_videos_allowed_has_nothing_to_split(model_dir):
    # the launch allows videos: the encoder's floor (a 114,688-token video) holds every image the example has
    request = VllmOptions().request(os.environ, resolve(model_dir), ())
    req = tune_vllm.tune_request([str(EXAMPLE)], request, PrefixFlags(num_blocks=3000, model_dir=model_dir))
    report = tune_vllm.tune(req)
    assert len(report.rows) == 1 and report.rows[0].today and report.rows[0].recommended
    fixed = [n.message for n in report.notes if n.code == "vllm-tune-fixed"]
    assert any("encoder cache has nothing to decide" in m for m in fixed)
    assert any("decode pool has nothing to decide" in m for m in fixed)


def test_no_budget_without_the_launchs_blocks_is_one_line(model_dir):
    request = VllmOptions().request(os.environ, resolve(model_dir), ())
    req = tune_vllm.tune_request([str(EXAMPLE)], request, PrefixFlags(model_dir=model_dir))
    with pytest.raises(MmpoolError, match="--num-gpu-blocks-override N .* or --budget SIZE"):
        tune_vllm.tune(req)
    got = tune_vllm.tune(dataclasses.replace(req, budget_bytes=3 << 30, budget_text="3GiB"))
    assert got.today is None and any(n.code == "vllm-tune-no-today" for n in got.notes)


def test_a_family_name_has_no_kv_shape(model_dir):
    request = VllmOptions().request(os.environ, resolve("qwen2.5-vl"), ())
    req = tune_vllm.tune_request([str(EXAMPLE)], request, PrefixFlags(num_blocks=100))
    with pytest.raises(MmpoolError, match="--model DIR"):
        tune_vllm.tune(req)


def test_a_split_vllm_refuses_is_one_line(model_dir):
    request = VllmOptions().request(os.environ, resolve(model_dir), ())
    req = tune_vllm.tune_request([str(EXAMPLE)], request, PrefixFlags(num_blocks=100, model_dir=model_dir))
    for values, match in (
        ({"kv": 1}, "from 2"),
        ({"encoder": 100}, "at least the largest item"),
        ({"decode_pool": -1}, "0 \\(off\\)"),
        ({"pool": 3}, "not pool"),
    ):
        with pytest.raises(MmpoolError, match=match):
            tune_vllm.tune_at(req, values)


def _video_file(tmp: Path, name: str, width: int, height: int, frames: int) -> str:
    av = pytest.importorskip("av")
    path = tmp / name
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=Fraction(25))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame(width, height, "yuv420p")
            for plane in frame.planes:
                plane.update(bytes([i % 256]) * plane.buffer_size)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return "file://" + str(path)


@pytest.mark.parametrize("seed", range(3))
def test_the_decode_pools_refusals_equal_plans_at_each_rows_setting(tmp_path, model_dir, seed):
    rng = random.Random(100 + seed)
    videos = [
        _video_file(tmp_path, f"v{n}.mp4", *rng.choice([(320, 240), (640, 360), (176, 144)]), rng.randint(10, 60))
        for n in range(rng.randint(2, 4))
    ]
    files = [_traffic(rng, tmp_path / "bodies.jsonl", videos)]
    launch = {"video_backend": VideoBackend.pynvvideocodec, "api_server_count": rng.choice([None, "2", "3"])}
    request = VllmOptions(**launch).request(os.environ, resolve(model_dir), ())
    flags = PrefixFlags(num_blocks=rng.randint(200, 2000), model_dir=model_dir)
    req = tune_vllm.tune_request(files, request, flags, budget_bytes=rng.randint(2, 6) << 30, points=3)
    report = tune_vllm.tune(req)
    measured = req.pools.videos
    assert measured and not any("pool has nothing to decide" in n.message for n in report.notes)
    for row in report.rows:
        gb = next((s.split()[1] for s in row.settings if s.startswith("--mm-ipc-gpu-memory-gb")), None)
        at = VllmOptions(**launch, mm_ipc_gpu_memory_gb=gb).request(os.environ, resolve(model_dir), measured)
        pool = make_plan(at).gpu_decode_pool  # None: off (today's launch), no pool gates the decodes
        assert (0 if pool is None else pool["total_bytes"]) == row.values["decode_pool"]
        refused = [i for i in (pool or {"items": []})["items"] if not i["fits"]]
        assert row.measures.fallback_items == len(refused) == row.figures["decode_refused"]
        assert row.measures.fallback_bytes == sum(i["bytes"] for i in refused)
    # the largest decode fits the recommended pool (the default objective: nothing refused first)
    assert report.recommended.measures.fallback_items == 0


def test_videos_decoded_on_the_host_leave_the_pool_nothing_to_decide(tmp_path, model_dir):
    rng = random.Random(7)
    files = [_traffic(rng, tmp_path / "bodies.jsonl", ["file://" + str(CLIP)])]
    request = VllmOptions(mm_ipc_gpu_memory_gb="0.5").request(os.environ, resolve(model_dir), ())
    req = tune_vllm.tune_request(files, request, PrefixFlags(num_blocks=500, model_dir=model_dir))
    report = tune_vllm.tune(req)
    assert any("host" in n.message for n in report.notes if n.code == "vllm-tune-fixed")
    assert {r.values["decode_pool"] for r in report.rows if not r.today} == {0}
    assert report.today is not None and report.today.values["decode_pool"] == 1 << 29


def test_the_best_split_differs_from_each_caches_own_recommendation(model_dir):
    # the shipped example, videos off, 400 KV blocks: cache alone keeps the encoder at its floor (no request
    # waits there) and asks for the KV blocks that serve 99 % of the prefix hits; tune gives blocks to the
    # encoder cache, whose hits behind the smaller prefix cache save more than the prefix hits lost
    launch = {"limit_mm_per_prompt": VIDEO_OFF}
    request = VllmOptions(**launch).request(os.environ, resolve(model_dir), ())
    flags = PrefixFlags(num_blocks=400, model_dir=model_dir)
    alone = vllm_caches([str(EXAMPLE)], request, flags=flags)
    _, encoder, prefix = alone["caches"]
    assert encoder["recommended_setting"].startswith("none") and encoder["size_tokens"] == 16384
    assert prefix["recommended_setting"] == "--num-gpu-blocks-override 2315"
    best = tune_vllm.tune(tune_vllm.tune_request([str(EXAMPLE)], request, flags)).recommended
    assert best.values["encoder"] > 16384 and best.values["kv"] < 400
    today = tune_vllm.tune_at(tune_vllm.tune_request([str(EXAMPLE)], request, flags))
    assert best.measures.work < today.measures.work
    assert best.measures.prefix_served_tokens < today.measures.prefix_served_tokens


@pytest.mark.parametrize("shift", [0, 16])
def test_the_servers_cached_tokens_are_held_to_todays_replay_as_cache_holds_them(model_dir, shift):
    pytest.importorskip("transformers")
    from mmpool_cli.engines.vllm import cache_traffic
    from mmpool_cli.engines.vllm import prefix as vllm_prefix
    from mmpool_cli.inputs.traffic.prompts import Prompt

    request = VllmOptions(limit_mm_per_prompt=VIDEO_OFF).request(os.environ, resolve(model_dir), ())
    flags = PrefixFlags(num_blocks=300, model_dir=model_dir, tokenizer=str(ROOT / "tests" / "data" / "byte-tokenizer"))
    traffic = cache_traffic.read([str(EXAMPLE)])
    scorer = vt.Scorer(vt.VllmTuneInput(request, traffic, flags))
    served = scorer.behind(300).served
    told = list(traffic.prompts)
    for n, got in zip(scorer.built.placed, served, strict=True):
        p = told[n]
        if p is not None and n % 3 == 0:
            told[n] = Prompt(p.messages, cached_tokens=got + (shift if n == 3 else 0))
    traffic = dataclasses.replace(traffic, prompts=told)
    report = vt.tune(vt.VllmTuneInput(request, traffic, flags))
    said = [(n.code, n.message) for n in report.notes if n.code.startswith("prefix-replay")]
    entry = vllm_prefix.replay(traffic.requests, told, scorer.tokens, "qwen2.5-vl", flags, Fraction(99)).entry
    assert said == [(f["code"], f["message"]) for f in entry["findings"] if f["code"].startswith("prefix-replay")]
    assert said[0][0] == ("prefix-replay-differs" if shift else "prefix-replay-matches")


def test_videos_it_cannot_size_are_said_and_decide_nothing(tmp_path, model_dir):
    refs = [("https://example.com/v.mp4", None, "a:1"), ("clip.mp4", None, "a:2"), ("file://" + str(CLIP), None, "a:3")]
    videos, unsized = vt.measure_videos(refs)
    assert len(videos) == 1 and videos[0].count and videos[0].width > 0
    assert unsized == (
        "a:1: an http(s) video cannot be measured offline (mmpool never fetches one)",
        "a:2: vLLM refuses the video: 'The URL must be either a HTTP, data or file URL.'",
    )


def test_a_budget_leaving_some_splits_no_blocks_scores_the_others(model_dir):
    # the largest encoder budgets take the whole budget: those splits have no KV block and are no rows
    request = VllmOptions(limit_mm_per_prompt=VIDEO_OFF).request(os.environ, resolve(model_dir), ())
    req = tune_vllm.tune_request([str(EXAMPLE)], request, PrefixFlags(model_dir=model_dir))
    scorer = vt.Scorer(req.pools)
    top = vt.encoder_choices(scorer, 8)[0][-2]  # a budget it fills but for a few bytes: no block left
    budget = top * scorer.per_token + 100
    report = tune_vllm.tune(dataclasses.replace(req, budget_bytes=budget, budget_text="b"))
    assert report.rows and all(r.values["kv"] >= 2 and sum(r.bytes.values()) <= budget for r in report.rows)
    assert max(r.values["encoder"] for r in report.rows) < top
