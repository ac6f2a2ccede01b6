"""Write examples/traffic/chats.jsonl: OpenAI chat bodies of three interleaved multi-turn chats.

Every chat starts with the same system prompt; each turn re-sends the chat so far (its earlier
images and the assistant's answers, as chat clients send it); turns of several images; images that
come back within a chat and in other chats. The images are solid-colour PNGs of the sizes documents
and photos have, small on disk. For ``mmpool cache``: the radix cache serves a chat's earlier turns,
the embedding cache sees the rest (docs/caches.md). Deterministic: the same file on every run.

Usage::

    python scripts/make_chats_example.py
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

OUT = Path(__file__).resolve().parent.parent / "examples" / "traffic" / "chats.jsonl"
START = 1_780_000_000  # epoch seconds of the first request
SYSTEM = "You are a careful assistant for a logistics company. Answer briefly and cite what you see."
IMAGES = {
    "chart": ((200, 30, 30), (896, 672)),
    "invoice": ((30, 120, 200), (672, 896)),
    "street": ((40, 160, 60), (1120, 630)),
    "logo": ((250, 200, 0), (448, 448)),
}


def png(color: tuple[int, int, int], size: tuple[int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def main() -> None:
    urls = {name: png(color, size) for name, (color, size) in IMAGES.items()}

    def user(text: str, *images: str) -> dict[str, Any]:
        parts = [{"type": "image_url", "image_url": {"url": urls[i]}} for i in images]
        return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}

    def assistant(text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    chats = {
        "a": [
            user("What does this chart show?", "chart"),
            assistant("Weekly parcel volume, rising from 12k to 19k."),
            user("Compare it with this invoice: do the totals agree?", "invoice"),
            assistant("Yes: the invoice bills 19,040 parcels."),
            user("Which week was the peak?"),
        ],
        "b": [
            user("Read the company name on this logo.", "logo"),
            assistant("Northwind Freight."),
            user("Is the same logo on this street photo?", "street"),
            assistant("Yes, on the truck at the left."),
            user("How many trucks are there?"),
        ],
        "c": [
            user("Summarise this invoice.", "invoice"),
            assistant("Freight for 19,040 parcels, due in 30 days."),
            user("And this chart?", "chart"),
        ],
    }
    order = [("a", 1), ("b", 1), ("c", 1), ("a", 3), ("b", 3), ("c", 3), ("a", 5), ("b", 5)]
    lines = []
    for n, (chat, turns) in enumerate(order):
        messages = [{"role": "system", "content": SYSTEM}, *chats[chat][:turns]]
        body = {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "messages": messages, "max_tokens": 64}
        lines.append(json.dumps({"timestamp": START + 7 * n, "body": body}, separators=(",", ":")))
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
