"""Each traffic file read alone (``files.read_part``) and merged in the files' order: the conversion of
reading them one after another, whatever order the parts are made in and whichever process makes them."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.engines.sglang.traffic.convert import Options, convert
from mmpool_cli.engines.sglang.traffic.files import FilePart, read_part
from mmpool_cli.inputs.traffic.model import Conversion, TrafficError
from mmpool_cli.workload.families import family

DATA = Path(__file__).parent / "data" / "sglang-0.5.23"
FLEET = ["server-json-level2.log", "server-text-level3.log", "server-json-level3.log", "server-text-level2.log"]


def options(names: list[str], **kw: Any) -> Options:
    fam = family("qwen2.5-vl")
    return Options(fam, dict(fam.settings), "auto", [str(DATA / n) for n in names], workers=3, **kw)


def backwards(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """The last file read first, each part through pickle (as it travels to and from another process)."""
    made = [pickle.loads(pickle.dumps(fn(item))) for item in reversed(items)]
    return made[::-1]


def as_data(c: Conversion) -> tuple[Any, ...]:
    return [lease.__dict__ if hasattr(lease, "__dict__") else lease for lease in c.leases], c.items, c.summary.to_data()


def test_parts_made_in_any_order_merge_into_the_conversion_read_one_by_one() -> None:
    alone = convert(options(FLEET))
    merged = convert(options(FLEET), backwards)
    assert as_data(merged) == as_data(alone)
    assert merged.summary.text() == alone.summary.text()
    assert alone.summary.requests == 4 * 7  # seven sized requests in each log (as one alone gives)
    ids = [lease.id for lease in alone.leases]
    assert "chat-png#4/0" in ids and "chat-png#5/0" not in ids  # one request in four servers' logs
    assert {lease.worker for lease in alone.leases} == {0, 1, 2}


def test_the_first_file_in_order_that_cannot_be_read_is_the_error(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")
    o = options(FLEET[:1])
    o = Options(o.family, o.settings, "auto", [o.inputs[0], str(tmp_path / "empty.log"), str(tmp_path / "no.log")])
    with pytest.raises(TrafficError) as alone:
        convert(o)
    with pytest.raises(TrafficError) as merged:
        convert(o, backwards)
    assert str(merged.value) == str(alone.value) == f"{tmp_path / 'empty.log'}: the file is empty: no requests to size"
    assert merged.value.exit_code == alone.value.exit_code == 2


def test_a_part_keeps_what_stopped_its_reading_instead_of_raising(tmp_path: Path) -> None:
    part = read_part(str(tmp_path / "no.log"), options([]))
    assert isinstance(part, FilePart) and part.reqs == [] and part.error is not None
    with pytest.raises(TrafficError, match="no.log"):
        part.raise_error()


def test_an_image_a_chat_sends_again_is_sized_as_it_was_the_first_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import io
    import json

    from PIL import Image

    from mmpool_cli.engines.sglang.traffic import files

    def png(size: tuple[int, int]) -> str:
        buf = io.BytesIO()
        Image.new("RGB", size).save(buf, "PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    big, thin = png((640, 480)), png((1, 300))  # the thin one the family refuses, each time

    def part(kind: str, spec: object) -> dict[str, object]:
        return {"type": kind, kind: spec}

    turns = [
        [part("image_url", {"url": big})],
        [
            part("image_url", {"url": big}),
            part("image_url", {"url": big, "max_dynamic_patch": 4}),
            part("image_url", big),
        ],
        [part("image_url", {"url": thin}), part("video_url", {"url": big}), part("audio_url", {"url": big})],
        [
            part("image_url", {"url": thin}),
            part("image_url", {"url": big, "detail": "low"}),
            part("image_url", {"url": big}),
        ],
    ]
    log = tmp_path / "chat.jsonl"
    log.write_text("".join(json.dumps({"id": "c", "messages": [{"role": "user", "content": t}]}) + "\n" for t in turns))
    fam = family("qwen2.5-vl")
    o = Options(fam, dict(fam.settings), "openai", [str(log)])

    again = read_part(str(log), o)
    size_request = files._size_request
    monkeypatch.setattr(
        files,
        "_size_request",
        lambda rec, o, decode, sizer, summary, seen: size_request(rec, o, decode, sizer, summary),
    )
    each = read_part(str(log), o)

    def seen(p: FilePart) -> tuple[object, ...]:
        assert p.summary is not None
        s = p.summary
        counts = [list(c.items()) for c in (s.skipped, s.decoders, s.ignored_fields)]
        return p.reqs, p.sized, s.findings, s.notes, s.failing, counts

    assert seen(again) == seen(each)
    assert [len(r.tensors) for r in again.reqs] == [1, 3, 0, 2]
    assert again.summary is not None and again.summary.decoders == {"pil": 8}
    assert [f.where for f in again.sized] == [f"{log}:3 (request c, item 0)", f"{log}:4 (request c, item 0)"]
