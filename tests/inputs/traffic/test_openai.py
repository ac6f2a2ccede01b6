"""OpenAI chat-completions bodies as gateways log them, to requests and leases."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from mmpool_cli.engines.sglang.traffic.convert import Options, convert
from mmpool_cli.inputs.traffic.model import TrafficError
from mmpool_cli.workload.families import family

MS = 1_000_000


def _png(size=(640, 480)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _body(*urls, **top) -> dict:
    content = [{"type": "image_url", "image_url": u if isinstance(u, dict) else {"url": u}} for u in urls]
    return {"model": "m", "messages": [{"role": "user", "content": [*content, {"type": "text", "text": "hi"}]}], **top}


def _run(tmp_path: Path, bodies: list, model: str = "qwen2.5-vl", **kw):
    log = tmp_path / "bodies.jsonl"
    log.write_text("".join((b if isinstance(b, str) else json.dumps(b)) + "\n" for b in bodies))
    fam = family(model)
    return convert(Options(fam, dict(fam.settings), kw.pop("source", "openai"), [str(log)], **kw))


def test_ids_times_and_items(tmp_path: Path) -> None:
    conv = _run(
        tmp_path,
        [
            _body(_png(), _png((300, 200)), id="chatcmpl-1", timestamp=1700000000.25),
            _body(_png(), user="alice", timestamp="2023-11-14T22:13:20.5Z"),
            _body(_png((64, 64)), timestamp=1700000001),
        ],
        recv_delay_ns=0,
    )
    assert [(le.id, le.t_ns, le.item) for le in conv.leases] == [
        ("chatcmpl-1/0", 0, "image 640x480"),
        ("chatcmpl-1/1", 0, "image 300x200"),
        ("alice/0", 250 * MS, "image 640x480"),
        ("line3/0", 750 * MS, "image 64x64"),
    ]
    assert conv.summary.requests == 3 and conv.summary.items == 4


def test_per_item_fields_are_reported_as_ignored_where_the_family_has_no_use(tmp_path: Path) -> None:
    conv = _run(
        tmp_path, [_body({"url": _png(), "max_dynamic_patch": 4, "max_long_side_pixel": 1000, "detail": "low"})]
    )
    assert conv.summary.ignored_fields == {"max_dynamic_patch": 1, "max_long_side_pixel": 1}


def test_http_urls_are_errors_counted_unless_assumed(tmp_path: Path) -> None:
    bodies = [_body("https://x.example/a.jpg"), _body("http://x.example/b.png", _png())]
    with pytest.raises(TrafficError, match=r"bodies.jsonl:1 .*never fetches.*\n.*bodies.jsonl:2 .*\(2 items"):
        _run(tmp_path, bodies)
    conv = _run(tmp_path, bodies, assume_image=(1280, 720))
    assert [le.item for le in conv.leases] == ["image 1280x720", "image 1280x720", "image 640x480"]
    assert conv.summary.decoders == {"assumed": 2, "pil": 1}


def test_bad_lines_are_located(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match=r"bodies.jsonl:2: error \[traffic-body-line\] not a JSON object"):
        _run(tmp_path, [_body(_png()), "{not json"])
    with pytest.raises(TrafficError, match=r"bodies.jsonl:1: error \[traffic-body-line\] no \"messages\" list"):
        _run(tmp_path, [{"prompt": "x"}])
    with pytest.raises(TrafficError, match=r"bodies.jsonl:1: error \[traffic-body-line\] timestamp 'yesterday'"):
        _run(tmp_path, [_body(_png(), timestamp="yesterday")])


def test_requests_without_images_and_a_log_of_none(tmp_path: Path) -> None:
    conv = _run(tmp_path, [_body(), _body(_png())])
    assert conv.summary.skipped["requests without images (nothing pooled)"] == 1
    assert "lines skipped: 1 request without images (nothing pooled)" in conv.summary.text().splitlines()[1]
    two = _run(tmp_path, [_body(), _body(), _body(_png())]).summary.text()
    assert "lines skipped: 2 requests without images (nothing pooled)" in two
    with pytest.raises(TrafficError, match="no request with an image"):
        _run(tmp_path, [_body(), _body()])


def test_a_video_path_missing_here_is_an_error_that_says_where_paths_are_read(tmp_path: Path) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "v.mp4", "fps": 2}}]}]}
    with pytest.raises(TrafficError, match="v.mp4: neither a file here nor base64; paths are read relative to the "):
        _run(tmp_path, [body])


def test_untimed_bodies_arrive_together_and_the_summary_says_so(tmp_path: Path) -> None:
    conv = _run(tmp_path, [_body(_png()), _body(_png())])
    assert {le.t_ns for le in conv.leases} == {0}
    assert any("without a timestamp" in n for n in conv.summary.notes)


def test_auto_detects_bodies_and_refuses_what_it_cannot_tell(tmp_path: Path) -> None:
    conv = _run(tmp_path, [_body(_png(), timestamp=5)], source="auto")
    assert conv.summary.notes[0].endswith("read as openai")
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    fam = family("qwen2.5-vl")
    with pytest.raises(TrafficError, match="give --from-format sglang-log or --from-format openai"):
        convert(Options(fam, dict(fam.settings), "auto", [str(other)]))


def test_millisecond_timestamps_and_spans_beyond_a_trace(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match="epoch milliseconds"):
        _run(tmp_path, [_body(_png(), timestamp=1700000000123)])
    with pytest.raises(TrafficError, match="span .* more than a trace holds"):
        _run(tmp_path, [_body(_png(), timestamp=0), _body(_png(), timestamp=2 * 10**9)])


def test_a_body_keeps_its_messages_and_the_answers_usage_beside_it() -> None:
    from mmpool_cli.inputs.traffic.openai import parse

    line = {
        "timestamp": 3,
        "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
        "response": {"usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}},
    }
    request, t = parse(json.dumps(line).encode(), 1)
    assert t == 3 * 10**9 and request.prompt is not None
    assert request.prompt.messages is not None and request.prompt.messages[0].parts == ("Hi",)
    assert (request.prompt.prompt_tokens, request.prompt.output_tokens, request.prompt.cached_tokens) == (9, 2, 4)
    bare, _ = parse(json.dumps(line["body"]).encode(), 2)
    assert bare.prompt is not None and bare.prompt.cached_tokens is None
