"""Image headers against Pillow: every format, EXIF orientations, every prefix, broken files."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from mmpool_cli.inputs.traffic.images import (
    ImageError,
    NeedMore,
    base64_ends_jpeg,
    base64_size,
    probe,
    probe_base64,
    riff_truncation,
    truncation,
)


def _exif(orientation: int, padding: int = 0) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    if padding:
        exif[0x010E] = "x" * padding  # ImageDescription: a large EXIF block
    return exif.tobytes()


def _save(image: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **kw)
    return buf.getvalue()


def _image(width: int, height: int, mode: str = "RGB") -> Image.Image:
    return Image.new(mode, (width, height), 128 if mode in ("L", "P") else (10, 200, 30))


CASES = {
    "png": lambda: _save(_image(641, 333), "PNG"),
    "png-rgba": lambda: _save(_image(17, 9, "RGBA"), "PNG"),
    "png-exif6": lambda: _save(_image(300, 500), "PNG", exif=_exif(6)),
    "png-exif3": lambda: _save(_image(30, 50), "PNG", exif=_exif(3)),
    "jpeg": lambda: _save(_image(1920, 1080), "JPEG", quality=85),
    "jpeg-progressive": lambda: _save(_image(801, 599), "JPEG", progressive=True),
    "jpeg-gray": lambda: _save(_image(123, 45, "L"), "JPEG"),
    **{f"jpeg-exif{o}": (lambda o=o: _save(_image(480, 640), "JPEG", exif=_exif(o))) for o in range(1, 9)},
    "jpeg-large-exif": lambda: _save(_image(64, 32), "JPEG", exif=_exif(8, padding=20_000)),
    "gif": lambda: _save(_image(320, 240, "P"), "GIF"),
    "webp-lossy": lambda: _save(_image(500, 301), "WEBP", quality=80),
    "webp-lossless": lambda: _save(_image(203, 101), "WEBP", lossless=True),
    "webp-alpha": lambda: _save(_image(77, 55, "RGBA"), "WEBP", quality=80),
    "webp-exif6": lambda: _save(_image(333, 222), "WEBP", exif=_exif(6)),
}


def _pillow(data: bytes) -> tuple[str, int, int, int]:
    with Image.open(io.BytesIO(data)) as im:
        return im.format.lower(), im.width, im.height, im.getexif().get(0x0112, 1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_header_equals_pillow(name: str) -> None:
    data = CASES[name]()
    header = probe(data, complete=True)
    assert (header.format, header.width, header.height, header.orientation) == _pillow(data)
    assert header.swaps == (5 <= header.orientation <= 8)


@pytest.mark.parametrize("name", ["png", "jpeg-exif6", "gif", "webp-lossy", "webp-lossless", "webp-exif6"])
def test_every_prefix_asks_for_more_or_reads_the_header(name: str) -> None:
    data = CASES[name]()
    full = probe(data, complete=True)
    for n in range(len(data) + 1):
        try:
            got = probe(data[:n], complete=False)
        except NeedMore:
            continue
        assert got == full, n


def test_base64_decodes_only_a_prefix() -> None:
    png = base64.b64encode(CASES["png"]()).decode()
    # a PNG's header is in its first 64 characters: the rest may be anything
    assert probe_base64(png[:64] + "!" * 1000).width == 641
    jpeg = base64.b64encode(CASES["jpeg-large-exif"]()).decode()
    assert probe_base64(jpeg).orientation == 8
    with pytest.raises(ImageError, match="runs past the 1024 characters"):
        probe_base64(jpeg[:1024], whole=False)


def test_a_cut_data_url_prefix_need_not_be_a_multiple_of_four() -> None:
    text = base64.b64encode(CASES["jpeg"]()).decode()[:1001]
    assert probe_base64(text, whole=False).width == 1920


def test_jpeg_end_marker_from_the_tail() -> None:
    text = base64.b64encode(CASES["jpeg"]()).decode()
    assert base64_ends_jpeg(text)
    assert base64_ends_jpeg(text[-1024:])
    cut = base64.b64encode(CASES["jpeg"]()[:-2]).decode()
    assert not base64_ends_jpeg(cut)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"hello world, not an image", "not a PNG, JPEG, GIF or WebP"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 4, "truncated"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDX" + b"\x00" * 17, "first chunk is not IHDR"),
        (b"\xff\xd8\xff\xda\x00\x08", "before any frame header"),
        (b"\xff\xd8\x00\x00\x00\x00", "no marker"),
        (b"GIF89a\x00\x00\x10\x00", "side of 0 pixels"),
        (b"RIFF\x00\x00\x00\x00WEBPXXXX" + b"\x00" * 20, "unknown first chunk"),
    ],
)
def test_malformed_or_truncated_images_are_errors(data: bytes, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        probe(data, complete=True)


def test_truncated_headers_are_errors_not_crashes() -> None:
    for name in ("png-exif6", "jpeg-large-exif", "webp-exif6"):
        data = CASES[name]()
        for n in (0, 1, 7, 20, 33):
            with pytest.raises(ImageError):
                probe(data[:n], complete=True)


@pytest.mark.parametrize("name", ["png", "gif", "webp-lossy", "webp-exif6"])
def test_truncated_image_data_is_found_from_the_ends(name: str) -> None:
    data = CASES[name]()
    assert truncation(probe(data, True).format, data[-16:], len(data)) is None
    cut = data[: len(data) - 5]
    problem = truncation(probe(data, True).format, cut[-16:], len(cut))
    if name.startswith("webp"):
        problem = riff_truncation(cut, len(cut))
    assert problem is not None and "truncated" in problem
    assert base64_size(base64.b64encode(cut).decode()) == len(cut)


def test_not_base64() -> None:
    with pytest.raises(ImageError, match="not valid base64"):
        probe_base64("iVBO%%%%" * 20)


def test_non_ascii_in_base64_is_an_error() -> None:
    with pytest.raises(ImageError, match="not valid base64"):
        probe_base64("iVBORw0KGgo€" * 10)
    assert not base64_ends_jpeg("/9j/" + "é" * 20)
