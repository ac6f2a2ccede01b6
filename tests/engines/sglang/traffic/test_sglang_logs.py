"""SGLang 0.5.23 server logs, written by the wheel's own RequestLogger, to leases.

The logs in ``data/sglang-0.5.23`` were written by ``scripts/sglang_request_logs.py``, which runs
SGLang's ``RequestLogger`` and ``GenerateReqInput.normalize_batch_and_arguments`` unmodified and
records, in ``expected.json``, each image's size as the wheel's ``load_image`` decodes it on a
CUDA server. This test needs neither SGLang nor a network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mmpool_cli.engines.sglang.traffic.convert import Options, convert
from mmpool_cli.inputs.traffic.model import TrafficError
from mmpool_cli.workload.families import family

DATA = Path(__file__).parent / "data" / "sglang-0.5.23"
EXPECTED = json.loads((DATA / "expected.json").read_text())["requests"]
VARIANTS = ["server-text-level2.log", "server-text-level3.log", "server-json-level2.log", "server-json-level3.log"]
MS = 1_000_000


def _convert(name: str | list[str], model: str = "qwen2.5-vl", **kw):
    fam = family(model)
    names = [name] if isinstance(name, str) else name
    return convert(Options(fam, dict(fam.settings), kw.pop("source", "auto"), [str(DATA / n) for n in names], **kw))


@pytest.fixture(scope="module")
def processors():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return {
        "qwen2.5-vl": Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12_845_056),
        "qwen3-vl": Qwen2VLImageProcessorPil(patch_size=16, min_pixels=65_536, max_pixels=16_777_216),
    }


@pytest.mark.parametrize(
    ("log", "model"), [(v, "qwen2.5-vl") for v in VARIANTS] + [("server-json-level2.log", "qwen3-vl")]
)
def test_every_item_has_sglangs_decoded_size_and_the_processors_bytes(log: str, model: str, processors) -> None:
    processor = processors[model]
    conv = _convert(log, model=model)
    got: dict[str, list[tuple[str, int]]] = {}
    for lease in conv.leases:
        rid, index = lease.id.rsplit("/", 1)
        got.setdefault(rid, []).append((lease.item, lease.nbytes))
        assert int(index) == len(got[rid]) - 1
    pooled = {rid: e for rid, e in EXPECTED.items() if e["items"] and "error" not in e["items"][0] and not e["warmup"]}
    assert set(got) == set(pooled)
    for rid, e in pooled.items():
        labels = [f"image {i['width']}x{i['height']}" for i in e["items"]]
        assert [label for label, _ in got[rid]] == labels, rid
        for item, (_, nbytes) in zip(e["items"], got[rid], strict=True):
            pixels = np.zeros((item["height"], item["width"], 3), dtype=np.uint8)
            assert processor(images=[pixels], return_tensors="np")["pixel_values"].nbytes == nbytes
    s = conv.summary
    assert s.warmup == 1  # SGLang's start-up request comes first and is not traffic
    assert s.failing == 1  # the raw base64 JPEG ('/9j/'), which SGLang opens as a path
    assert any(f.code == "traffic-request-fails" and "raw-b64-jpeg" in f.where for f in s.findings)
    decoders = [i["decoder"] for e in pooled.values() for i in e["items"]]
    assert s.decoders == {"nvjpeg": decoders.count("nvjpeg"), "pil": decoders.count("pil")}
    assert s.skipped["requests without images (nothing pooled)"] == 1
    assert s.skipped["unrelated to requests"] == 5
    assert s.ignored_fields["max_dynamic_patch"] == 2  # kept by ImageData, unused by Qwen


def test_the_four_variants_give_the_same_leases_but_for_time_resolution() -> None:
    runs = [_convert(v) for v in VARIANTS]
    ids = [[(le.id, le.nbytes, le.item) for le in r.leases] for r in runs]
    assert ids[0] == ids[1] == ids[2] == ids[3]
    json_times = [le.t_ns for le in runs[2].leases]
    assert json_times == [le.t_ns for le in runs[3].leases]
    assert json_times[:2] == [0, 370 * MS]  # microsecond stamps: 0.37 s apart, as logged
    text_times = [le.t_ns for le in runs[0].leases]
    assert text_times == sorted(text_times) and len(set(text_times)) > 3
    assert any("whole-second" in n for n in runs[0].summary.notes)
    assert not any("whole-second" in n for n in runs[2].summary.notes)


def test_eager_leases_end_one_receipt_delay_after_the_copy() -> None:
    conv = _convert("server-json-level2.log", recv_delay_ns=5 * MS)
    assert all(le.free_ns == le.t_ns + 5 * MS for le in conv.leases)
    assert conv.summary.lifetimes == {"eager: acknowledged on receipt": 7}


def test_deferred_leases_use_the_queue_wait_else_the_finish_else_hold() -> None:
    # Qwen3-VL at TP 1 defers the acknowledgement to the encoder: ReqTimeStats' queue_duration
    conv = _convert("server-json-level3.log", model="qwen3-vl", recv_delay_ns=0)
    first = conv.leases[0]
    assert first.id == "chat-png/0" and first.free_ns - first.t_ns == 12_500_000 + 7 * 1 * MS  # 19.50 ms
    assert conv.summary.lifetimes == {"deferred: ReqTimeStats queue_duration": 7}
    eager = _convert("server-json-level3.log", model="qwen3-vl", tp_size=2)
    assert eager.summary.lifetimes == {"eager: acknowledged on receipt": 7}


def test_deferred_without_time_stats_holds_until_finish(tmp_path: Path) -> None:
    text = (DATA / "server-json-level2.log").read_text()
    log = tmp_path / "no-stats.log"
    log.write_text("".join(line for line in text.splitlines(True) if "ReqTimeStats" not in line))
    fam = family("kimi-k2.5")
    conv = convert(Options(fam, dict(fam.settings), "sglang-log", [str(log)], dp_encoder=True, recv_delay_ns=0))
    assert conv.summary.lifetimes == {"deferred: held until its Finish": 7}
    # chat-png was received at +10.37 s and finished at +20.50 s (the generator's clock)
    assert conv.leases[0].free_ns == 10_130 * MS
    bare = tmp_path / "no-finish.log"
    bare.write_text("".join(line for line in log.read_text().splitlines(True) if "request.finished" not in line))
    with pytest.raises(TrafficError, match="give --hold SECONDS"):
        convert(Options(fam, dict(fam.settings), "sglang-log", [str(bare)], dp_encoder=True))
    held = convert(Options(fam, dict(fam.settings), "sglang-log", [str(bare)], dp_encoder=True, hold_ns=300 * MS))
    assert {le.free_ns - le.t_ns for le in held.leases} == {300 * MS}


@pytest.mark.parametrize("log", ["server-json-level1.log", "server-text-level0.log"])
def test_levels_0_and_1_cannot_be_sized_and_say_which_flag_to_set(log: str) -> None:
    with pytest.raises(TrafficError, match="--log-requests-level 0 or 1.*--log-requests-level 2"):
        _convert(log)


def test_a_log_without_requests_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("[2026-12-03 10:00:00] server_args=ServerArgs(...)\n[2026-12-03 10:00:05 TP0] ready\n")
    with pytest.raises(TrafficError, match="no request with an image"):
        _convert(str(log), source="sglang-log")


def test_a_broken_request_line_is_located(tmp_path: Path) -> None:
    lines = (DATA / "server-text-level3.log").read_text().splitlines(True)
    n = next(i for i, line in enumerate(lines) if "rid='chat-png'" in line and "Receive:" in line)
    lines[n] = lines[n][:400] + "\n"  # cut mid-request
    log = tmp_path / "cut.log"
    log.write_text("".join(lines))
    with pytest.raises(TrafficError, match=rf"cut.log:{n + 1}: error \[traffic-log-line\] a request line mmpool cannot read"):
        _convert(str(log), source="sglang-log")


def test_a_cut_jpeg_with_a_large_exif_block_names_level_3(tmp_path: Path) -> None:
    import base64
    import io

    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010E] = "x" * 3000
    buf = io.BytesIO()
    Image.new("RGB", (64, 48)).save(buf, "JPEG", exif=exif.tobytes())
    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    cut = url[:1024] + "..." + url[-1024:]  # what --log-requests-level 2 json keeps
    event = {
        "timestamp": "2026-12-03T10:00:00.5",
        "event": "request.received",
        "rid": "r1",
        "obj": {"rid": "r1", "image_data": [{"url": cut}]},
    }
    log = tmp_path / "exif.log"
    log.write_text(f"[2026-12-03 10:00:00] {json.dumps(event)}\n")
    with pytest.raises(TrafficError, match=r"exif.log:1 \(request r1, item 0\): .*--log-requests-level 3"):
        _convert(str(log))


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    with pytest.raises(TrafficError, match="not a regular file"):
        _convert(str(fifo))


def test_long_request_ids_are_renamed_with_a_warning(tmp_path: Path) -> None:
    text = (DATA / "server-json-level2.log").read_text().replace('"chat-png"', '"' + "r" * 300 + '"')
    log = tmp_path / "long.log"
    log.write_text(text)
    conv = _convert(str(log))
    assert conv.leases[0].id.startswith("line") and len(conv.leases[0].id) < 20
    assert any(f.code == "traffic-long-id" for f in conv.summary.findings)


def test_time_stats_in_another_file_are_joined(tmp_path: Path) -> None:
    lines = (DATA / "server-json-level2.log").read_text().splitlines(True)
    requests, scheduler = tmp_path / "host_0.log", tmp_path / "server.log"
    requests.write_text("".join(line for line in lines if "ReqTimeStats" not in line))
    scheduler.write_text("".join(line for line in lines if "ReqTimeStats" in line))
    conv = _convert([str(requests), str(scheduler)], model="qwen3-vl")
    assert conv.summary.lifetimes == {"deferred: ReqTimeStats queue_duration": 7}


@pytest.mark.parametrize("model", ["gemma3", "llama4", "kimi-k2.5"])
def test_other_pooled_families_see_the_same_items(model: str) -> None:
    # the items and their decoded sizes do not depend on the family; their bytes do (as plan computes)
    qwen = [(le.id, le.item) for le in _convert("server-text-level3.log").leases]
    other = _convert("server-text-level3.log", model=model)
    assert [(le.id, le.item) for le in other.leases] == qwen
    assert all(le.nbytes > 0 for le in other.leases)


def test_mangled_request_lines_are_findings_never_crashes(tmp_path: Path) -> None:
    import random

    rng = random.Random(3)
    lines = (DATA / "server-text-level2.log").read_text().splitlines(True)
    lines += (DATA / "server-json-level2.log").read_text().splitlines(True)
    requests = [line for line in lines if "Receive: obj=" in line or '"request.received"' in line]
    mangled = []
    for n in range(300):
        line = rng.choice(requests)
        cut = rng.randrange(len(line))
        kind = n % 3
        if kind == 0:
            line = line[:cut] + "\n"
        elif kind == 1:
            line = line[:cut] + rng.choice("'\"[](){},:=\\x") + line[cut:]
        else:
            line = line[:cut] + line[cut + rng.randrange(1, 200) :]
        mangled.append(line if line.endswith("\n") else line + "\n")
    log = tmp_path / "mangled.log"
    log.write_text("".join(mangled))
    # with these 300 lines some are still readable and some are not: the conversion stops, naming
    # each unreadable line at its own line number, and nothing but TrafficError escapes
    with pytest.raises(TrafficError) as stopped:
        _convert(str(log), source="sglang-log")
    assert stopped.value.findings
    for finding in stopped.value.findings:  # FILE:LINE, or FILE:LINE (request R, item I)
        located = re.fullmatch(r"(.*):(\d+)( \(request .*, item \d+\))?", finding.where)
        assert located and located[1] == str(log) and 1 <= int(located[2]) <= len(mangled), finding.where
        assert finding.code.startswith("traffic-")


def test_a_json_request_line_cut_inside_its_object_is_an_error_at_its_line(tmp_path: Path) -> None:
    # A JSON object cut anywhere before its closing brace is not JSON, so each of these lines is a
    # traffic-log-line error located at its own line; the first ten are shown, then a count.
    import random

    rng = random.Random(3)
    lines = (DATA / "server-json-level2.log").read_text().splitlines(True)
    requests = [line for line in lines if '"event": "request.received"' in line]
    cut = []
    for line in requests * 2:
        inside = line.index('"obj": {') + len('"obj": {')
        cut.append(line[: rng.randrange(inside, len(line.rstrip("\n")) - 1)] + "\n")
    log = tmp_path / "cut.log"
    log.write_text("".join(cut))
    with pytest.raises(TrafficError) as stopped:
        _convert(str(log), source="sglang-log")
    where = [(f.code, f.where) for f in stopped.value.findings]
    assert where == [("traffic-log-line", f"{log}:{n}") for n in range(1, len(cut) + 1)]
    message = str(stopped.value).splitlines()
    assert [line.split(": ", 1)[0] for line in message[:10]] == [f"{log}:{n}" for n in range(1, 11)]
    assert message[10] == f"... and {len(cut) - 10} more ({len(cut)} items or lines could not be used)"


def test_a_json_log_gives_each_request_its_prompt_and_the_servers_cached_tokens(tmp_path: Path) -> None:
    # the templated text of a Receive (whole at level 3) and the Finish's meta_info, as RequestLogger writes them
    png = (DATA / "images").glob("*.png").__next__()
    import base64

    url = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    text = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>\n<|im_start|>assistant\n"
    lines = []
    for n, rid in enumerate(("a", "b")):
        obj = {"rid": rid, "text": text, "image_data": [{"url": url}]}
        received = {"timestamp": f"2026-11-30T00:00:0{n}.000000", "event": "request.received", "rid": rid, "obj": obj}
        meta = {"id": rid, "prompt_tokens": 40, "completion_tokens": 3, "cached_tokens": 39 * n}
        finished = {
            "timestamp": f"2026-11-30T00:00:0{n}.500000",
            "event": "request.finished",
            "rid": rid,
            "obj": {"rid": rid},
            "out": {"text": "ok", "meta_info": meta},
        }
        lines += [f"[2026-11-30 00:00:0{n}] {json.dumps(received)}", f"[2026-11-30 00:00:0{n}] {json.dumps(finished)}"]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    fam = family("qwen2.5-vl")
    conv = convert(Options(fam, dict(fam.settings), "sglang-log", [str(log)]))
    assert list(conv.prompts) == ["a", "b"]
    first, second = conv.prompts["a"], conv.prompts["b"]
    assert first.prompt is not None and second.prompt is not None
    assert (first.prompt.text, first.prompt.prompt_tokens, first.prompt.output_tokens) == (text, 40, 3)
    assert (first.prompt.cached_tokens, second.prompt.cached_tokens) == (0, 39)
    assert (first.arrive_ns, first.finish_ns, second.arrive_ns, second.finish_ns) == (0, 500 * MS, 1000 * MS, 1500 * MS)
    # a text level 2 cut in its middle is no prompt
    cut = "x" * 1024 + "..." + "y" * 1024
    log.write_text(log.read_text().replace(json.dumps(text)[1:-1], cut))
    conv = convert(Options(fam, dict(fam.settings), "sglang-log", [str(log)]))
    assert all(t.prompt is None for t in conv.prompts.values())
