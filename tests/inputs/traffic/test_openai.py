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
        "response": {
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}
        },
    }
    request, t = parse(json.dumps(line).encode(), 1)
    assert t == 3 * 10**9 and request.prompt is not None
    assert request.prompt.messages is not None and request.prompt.messages[0].parts == ("Hi",)
    assert (request.prompt.prompt_tokens, request.prompt.output_tokens, request.prompt.cached_tokens) == (9, 2, 4)
    bare, _ = parse(json.dumps(line["body"]).encode(), 2)
    assert bare.prompt is not None and bare.prompt.cached_tokens is None


# the common body's shape read in one pass, and its timestamp and JSON without the general machinery: each
# fast path gives what the general one gives, and leaves everything else to it


def _odd_messages() -> list:
    """Bodies' messages in the common shape and mutated out of it at every place, seeded."""
    import random

    rng = random.Random(7)
    values = [None, 1, 1.5, True, "x", "", [], [1], {}, {"url": 1}, {"k": "v"}]
    url = "data:image/png;base64,AAAA"

    def common() -> list:
        return [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "What is this?"},
                    {"type": "video_url", "video_url": {"url": "v.mp4", "fps": 2, "max_frames": None, "detail": 1}},
                    {"type": "audio_url", "audio_url": {"url": "a.wav"}},
                ],
            },
            {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": []},
        ]

    def places(node: object, path: tuple = ()) -> list:
        found = [path]
        if isinstance(node, dict):
            for k, v in node.items():
                found += places(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                found += places(v, (*path, i))
        return found

    shapes = [common(), [], [{"role": "user", "content": None}], [{"role": "user"}], [{"content": "x"}]]
    shapes += [[{"role": "user", "content": [{"type": t, t: {"url": url}}]}] for t in ("image", "video", "input_audio")]
    shapes += [[{"role": "user", "content": [{"type": "image_url", "image_url": url}]}]]  # a bare-string url
    for spec in ({"max_dynamic_patch": 4}, {"detail": "low"}, {"fps": None}, {"max_image_tokens": 0, "fps": 1}):
        shapes += [[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url, **spec}}]}]]
    shapes += [[{"role": "user", "content": [{"type": [1], "text": "x"}]}]]  # a type JSON cannot hash
    for _ in range(600):
        messages = common()
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(places(messages)[1:])
            parent = messages
            for step in path[:-1]:
                parent = parent[step]
            if rng.random() < 0.2 and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = rng.choice(values)
        shapes.append(messages)
    return shapes


def _general(messages: list) -> object:
    from mmpool_cli.inputs.traffic.openai import LineError, _items
    from mmpool_cli.inputs.traffic.prompts import messages_of

    try:
        items = _items(messages)
    except LineError as e:
        return str(e)
    return items, messages_of(messages), [list(i.fields) for i in items]


def test_the_one_pass_over_common_messages_reads_what_the_general_reading_does() -> None:
    from mmpool_cli.inputs.traffic.openai import _walk

    fast = 0
    for messages in _odd_messages():
        walked = _walk(json.loads(json.dumps(messages)))
        if walked is not None:
            fast += 1
            assert (*walked, [list(i.fields) for i in walked[0]]) == _general(messages), messages
            assert {type(m) for m in walked[1]} <= {type(m) for m in _general(messages)[1] or ()}
    assert fast >= 20  # the common shape, and mutations that keep it, went the fast way


def test_a_body_reads_the_same_whatever_way_its_messages_went() -> None:
    from mmpool_cli.inputs.traffic.openai import LineError, parse

    for n, messages in enumerate(_odd_messages()):
        expected = _general(messages)
        try:
            request, _ = parse(json.dumps({"messages": messages}).encode(), n)
        except LineError as e:
            assert str(e) == expected
            continue
        assert request.prompt is not None and not isinstance(expected, str)
        assert (request.items, request.prompt.messages, [list(i.fields) for i in request.items]) == expected


def test_a_part_whose_type_is_not_a_string_is_skipped_not_a_crash() -> None:
    from mmpool_cli.inputs.traffic.openai import parse

    line = {"messages": [{"role": "user", "content": [{"type": [1], "text": "x"}, {"type": {}, "image_url": "y"}]}]}
    request, _ = parse(json.dumps(line).encode(), 1)
    assert request.items == [] and request.prompt is not None and request.prompt.messages is None


def test_lines_decode_as_json_loads_decodes_them() -> None:
    from mmpool_cli.inputs.traffic.openai import _json

    lines = [b"{}", b"{", b"{} ", b'{"a": 1}\t', b"{} x", b"{}{}", b'{"a": NaN, "b": 1e999}', b'{"\xff": 1}']
    lines += [b'{"a": "\\ud800"}', b"{\x00}", '{"a": 1}'.encode("utf-16-le"), b"\xef\xbb\xbf{}", b" {}", b"[1]"]
    lines += [b'{"a": [1, {"b": "\xc3\xa9"}]}', b'{"a": 1,}', b'{"a" 1}', b"{\n}", b'{"a": 01}']
    for raw in lines:
        try:
            expected: object = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            expected = (type(e), str(e))
        try:
            got: object = _json(raw)
        except (ValueError, UnicodeDecodeError) as e:
            got = (type(e), str(e))
        assert repr(got) == repr(expected), raw


def _timestamp_by_decimal(value: object) -> object:
    """What a numeric timestamp read as before its integer path: through Decimal, in full."""
    from decimal import Decimal

    from mmpool_cli.inputs.traffic.openai import MAX_EPOCH_SECONDS, LineError

    seconds = Decimal(str(value))
    if not seconds.is_finite() or seconds < 0:
        return LineError(f"timestamp {value!r} is not a time")
    if seconds > MAX_EPOCH_SECONDS:
        return LineError(f"timestamp {str(value)[:40]} is after the year 5000: epoch milliseconds? give seconds")
    return int(seconds * 10**9)


def test_numeric_timestamps_give_the_nanoseconds_decimal_gives() -> None:
    import math
    import random
    import struct

    from mmpool_cli.inputs.traffic.openai import LineError, _timestamp

    rng = random.Random(11)
    edge = [0.0, -0.0, 1e-4, 9.99e-5, 5e-324, 1e-9, 1.5e-9, 0.1, 0.3, 1e11, math.nextafter(1e11, 0), 1e16, 1e300]
    edge += [math.inf, -math.inf, math.nan, -1.0, -1e-300, 1780100000.05, 1780100000.1, 1700000000.999999999]
    values: list[object] = [*edge, 0, 1, 10**11, 10**11 + 1, -1, 10**30, 1780100000]
    values += [rng.uniform(0, 1e11) for _ in range(3000)] + [rng.uniform(0, 10) for _ in range(1000)]
    values += [round(rng.uniform(1.7e9, 1.8e9), rng.randint(0, 9)) for _ in range(3000)]
    values += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(63)))[0] for _ in range(3000)]
    values += [rng.randint(0, 2 * 10**11) for _ in range(500)]
    for value in values:
        expected = _timestamp_by_decimal(value)
        try:
            got: object = _timestamp(value)
        except LineError as e:
            got = e
        if isinstance(expected, LineError):
            assert isinstance(got, LineError) and str(got) == str(expected), value
        else:
            assert got == expected and type(got) is int, value
