"""`trace` and `simulate --from` on images the server refuses, and on paths that are not files: bounded, located."""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def _bodies(tmp_path: Path, *urls: str) -> str:
    path = tmp_path / "bodies.jsonl"
    lines = [
        json.dumps(
            {
                "timestamp": i,
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}}]}],
            }
        )
        for i, u in enumerate(urls)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _png(size: tuple[int, int] = (640, 480)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size).save(buf, "PNG")
    return buf.getvalue()


def _png_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _mmpool(*args: str) -> subprocess.CompletedProcess[str]:
    # a separate process with a time limit: a FIFO that blocked would fail the test, not hang it
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_a_fifo_or_device_named_as_an_image_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    log = _bodies(tmp_path, _png_url(_png()), f"file://{fifo}", "file:///dev/zero", str(tmp_path))
    for command in (["trace"], ["simulate", "--size", "1GB", "--from"]):
        result = _mmpool(*command[:1], "--model", "qwen2.5-vl", *command[1:], log)
        assert result.returncode == 2, result.stderr
        assert f"{log}:2 (request line2, item 0): error [file-not-regular] {fifo}: this is a FIFO (named pipe), not a regular file" in (
            result.stderr
        )
        assert f"{log}:3 (request line3, item 0): error [file-not-regular] /dev/zero: this is a character device" in result.stderr
        assert result.stdout == ""


def test_an_image_over_pillows_limit_fails_its_request_and_is_reported(tmp_path: Path) -> None:
    huge = bytearray(_png((4, 4)))
    huge[16:24] = struct.pack(">II", 100_000, 100_000)
    huge[29:33] = struct.pack(">I", zlib.crc32(bytes(huge[12:29])))
    log = _bodies(tmp_path, _png_url(_png()), _png_url(bytes(huge)))
    out = tmp_path / "trace.jsonl"
    result = _mmpool("trace", "--model", "qwen2.5-vl", log, "-o", str(out), "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stderr)  # the summary goes to stderr, the trace to -o
    assert summary["requests_engine_would_fail"] == 1
    found = [f for f in summary["findings"] if f["code"] == "traffic-image-too-large"]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["where"] == f"{log}:2 (request line2, item 0)"
    allocs = [json.loads(line) for line in out.read_text().splitlines() if '"alloc"' in line]
    assert [a["bytes"] for a in allocs] == [7_357_056]  # the 640x480 image only: no 308 MB tensor
