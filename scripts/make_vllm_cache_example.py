"""Write examples/traffic/vllm-chats.jsonl: OpenAI chat bodies, as a gateway logs them, for ``mmpool cache``.

Multi-turn chats: each turn adds an image and the next request carries the conversation so far,
history images included, as chat clients send it; a few one-off requests in between. The images
are real PNGs (grey, one pixel marking each apart, so each has its own bytes), small on disk and
of the sizes phone and screenshot traffic has. Deterministic: the same file on every run.

Usage::

    python scripts/make_vllm_cache_example.py
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "traffic" / "vllm-chats.jsonl"
SIZES = [(1280, 720), (1920, 1080), (1024, 768), (800, 600), (640, 480), (1080, 1920), (2048, 1536), (512, 512)]
START = 1_780_000_000  # epoch seconds of the first request


def png(width: int, height: int, mark: int) -> bytes:
    """A greyscale PNG of ``width`` x ``height``, all grey but one pixel set from ``mark``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = bytearray()
    for y in range(height):
        row = bytearray([128] * width)
        if y == mark % height:
            row[mark % width] = mark % 256
        rows += b"\x00" + row
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + chunk(b"IEND", b"")
    )


def main() -> int:
    rng = random.Random(34)
    images = []
    for n in range(24):
        w, h = SIZES[n % len(SIZES)]
        images.append("data:image/png;base64," + base64.b64encode(png(w, h, 7919 * (n + 1))).decode())
    lines = []
    chats: list[list[dict]] = [[] for _ in range(6)]
    t = START
    pick = iter(range(len(images)))
    for turn in range(36):
        t += rng.randint(1, 9)
        if turn % 6 == 5:  # a one-off question about an image seen before
            body = {
                "model": "Qwen/Qwen2.5-VL-7B-Instruct",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": images[rng.randrange(6)]}},
                            {"type": "text", "text": "What is in this picture?"},
                        ],
                    }
                ],
            }
        else:
            chat = chats[rng.randrange(len(chats))]
            content = [{"type": "text", "text": f"And this one ({len(chat) + 1})?"}]
            index = next(pick, None)
            if index is not None:
                content.insert(0, {"type": "image_url", "image_url": {"url": images[index]}})
            chat.append({"role": "user", "content": content})
            body = {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "messages": list(chat)}
            chat.append({"role": "assistant", "content": "A grey picture."})
        lines.append(json.dumps({"timestamp": t, "body": body}, separators=(",", ":")))
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size:,} B)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
