"""An item's content key: the same bytes give the same key however a request carried them."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from mmpool_cli.inputs.traffic.content_key import content_key
from mmpool_cli.inputs.traffic.refs import IMAGE_EXTENSIONS


def test_same_bytes_same_key(tmp_path: Path) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    encoded = base64.b64encode(data).decode()
    path = tmp_path / "a.png"
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()[:32]
    assert content_key("data:image/png;base64," + encoded) == want
    assert content_key(encoded) == want
    assert content_key(str(path), extensions=IMAGE_EXTENSIONS) == want
    assert content_key(f"file://{path}") == want
    assert content_key(str(path), any_file=True) == want  # a video path: any regular file
    assert content_key(base64.b64encode(data + b"x").decode()) != want


def test_urls_cut_strings_and_missing_files() -> None:
    key = content_key("https://example.com/a.jpg")
    assert key is not None and key.startswith("url:") and len(key) == 36
    assert content_key("https://example.com/a.jpg") == key != content_key("https://example.com/b.jpg")
    assert content_key("data:image/png;base64,AAAA", tail="BBBB") is None  # the log kept only its ends
    assert content_key("/no/such/file.png", extensions=IMAGE_EXTENSIONS) is None
