"""The shipped example of SGLang's caches is what its script makes: remade, it is the same file byte for byte."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import make_sglang_cache_example  # noqa: E402


def test_the_example_is_remade_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = make_sglang_cache_example.OUT
    out = tmp_path / "examples" / "traffic" / "chats.jsonl"
    out.parent.mkdir(parents=True)
    monkeypatch.setattr(make_sglang_cache_example, "OUT", out)
    monkeypatch.setattr(make_sglang_cache_example, "ROOT", tmp_path)
    assert make_sglang_cache_example.main() == 0
    assert out.read_bytes() == shipped.read_bytes()


def test_the_example_repeats_images_across_and_within_requests() -> None:
    bodies = [json.loads(line)["body"] for line in make_sglang_cache_example.OUT.read_text().splitlines()]
    urls = [
        [part["image_url"]["url"] for m in b["messages"] if isinstance(m["content"], list) for part in m["content"] if part["type"] == "image_url"]
        for b in bodies
    ]
    assert len(bodies) == 16 and make_sglang_cache_example.OUT.stat().st_size < 64 * 1024  # small to ship
    assert any(len(u) != len(set(u)) for u in urls)  # a request holding one image twice
    assert len({x for u in urls for x in u}) < sum(len(u) for u in urls)  # images sent again
