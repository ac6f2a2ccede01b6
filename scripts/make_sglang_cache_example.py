"""Write examples/traffic/chats.jsonl: OpenAI chat bodies with repeated images, for ``mmpool cache``.

Small multi-turn chats as a gateway logs them: each turn adds an image and the next request carries
the conversation so far, earlier images included, as chat clients send it; a few one-off questions
about an image seen before, and one request that holds the same image twice (SGLang looks it up
again where its first lookup missed). The images are tiny real PNGs (grey, one pixel marking each
apart: each has its own bytes), made here by the same writer as ``make_vllm_cache_example.py``.
Deterministic: the same file on every run.

Usage::

    python scripts/make_sglang_cache_example.py
"""

from __future__ import annotations

import base64
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_vllm_cache_example import png  # noqa: E402 - the one PNG writer of the examples

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "traffic" / "chats.jsonl"
SIZES = [(448, 336), (640, 480), (336, 448), (512, 512), (560, 420)]
START = 1_780_100_000  # epoch seconds of the first request
MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"


def _image(url: str) -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": url}}


def main() -> int:
    rng = random.Random(23)
    images = [
        "data:image/png;base64," + base64.b64encode(png(w, h, 104_729 * (n + 1))).decode()
        for n, (w, h) in enumerate(SIZES[n % len(SIZES)] for n in range(14))
    ]
    chats: list[list[dict[str, object]]] = [[] for _ in range(4)]
    fresh = iter(range(len(images)))
    lines, t = [], START
    for turn in range(16):
        t += rng.randint(1, 5)
        if turn % 5 == 4:  # a one-off question about an image seen before
            content: list[dict[str, object]] = [_image(images[rng.randrange(4)]), {"type": "text", "text": "And this?"}]
            body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
        elif turn == 7:  # one request that holds one image twice
            same = images[next(fresh)]
            content = [_image(same), _image(same), {"type": "text", "text": "Are these the same?"}]
            body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
        else:
            chat = chats[turn % len(chats)]
            question = {"type": "text", "text": f"What is in picture {len(chat) // 2 + 1}?"}
            content = [_image(images[next(fresh)]), question]
            chat.append({"role": "user", "content": content})
            body = {"model": MODEL, "messages": list(chat)}
            chat.append({"role": "assistant", "content": "A grey picture."})
        lines.append(json.dumps({"timestamp": t, "body": body}, separators=(",", ":")))
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size:,} B, {len(lines)} requests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
