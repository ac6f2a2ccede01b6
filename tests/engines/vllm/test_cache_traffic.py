"""OpenAI bodies -> the image requests vLLM's caches see: keys, sizes and the inputs refused in one line."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import pytest

from mmpool_cli.engines.vllm import cache_traffic

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "traffic" / "vllm-chats.jsonl"


def _png(width: int, height: int) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(width) for _ in range(height))
    body = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw))
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + body + chunk(b"IEND", b"")).decode()


def _log(tmp_path: Path, *bodies: list[str]) -> str:
    lines = []
    for urls in bodies:
        content = [{"type": "image_url", "image_url": {"url": u}} for u in urls] + [{"type": "text", "text": "hi"}]
        lines.append(json.dumps({"messages": [{"role": "user", "content": content}]}))
    path = tmp_path / "bodies.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_the_same_bytes_are_one_key_and_sizes_come_from_the_header(tmp_path):
    a, b = _png(640, 480), _png(300, 200)
    got = cache_traffic.read([_log(tmp_path, [a], [b, a], [a, a])])
    assert len(got.requests) == 3 and got.images == 5
    ka, kb = got.requests[1][1], got.requests[1][0]
    assert got.requests == [[ka], [kb, ka], [ka, ka]]
    assert got.dims == {ka: (640, 480), kb: (300, 200)}


def test_the_shipped_example_repeats_its_chats_history():
    got = cache_traffic.read([str(EXAMPLE)])
    assert (len(got.requests), got.images, len(got.dims)) == (36, 103, 24)
    assert not got.not_replayed


def test_http_urls_take_the_assumed_size(tmp_path):
    url = "https://example.com/cat.jpg"
    with pytest.raises(cache_traffic.CacheTrafficError, match="--assume-image"):
        cache_traffic.read([_log(tmp_path, [url])])
    got = cache_traffic.read([_log(tmp_path, [url], [url])], assume=(1024, 768))
    assert got.requests == [["url:" + url], ["url:" + url]] and got.dims["url:" + url] == (1024, 768)


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        ([], "no request carries image data"),
        (["/9j/4AAQSkZJRg"], "The URL must be either a HTTP, data or file URL"),
        (["data:image/png;base64,aGVsbG8="], "not an image vLLM can decode"),
    ],
)
def test_bad_input_is_one_line(tmp_path, urls, message):
    with pytest.raises(cache_traffic.CacheTrafficError, match=message) as e:
        cache_traffic.read([_log(tmp_path, urls)])
    assert "\n" not in str(e.value)
