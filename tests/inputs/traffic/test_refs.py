"""Image references as SGLang's load_image reads them, and which decoder (and orientation) applies."""

from __future__ import annotations

import base64
import io
import os
import signal
import struct
import warnings
import zlib
from pathlib import Path
from urllib.parse import unquote, urlparse

from PIL import Image

from mmpool_cli.inputs.traffic.images import Header
from mmpool_cli.inputs.traffic.refs import Decode, Sized, Unsized, measure

GPU = Decode(gpu_jpeg=True, exif_transpose=False)
CPU = Decode(gpu_jpeg=False, exif_transpose=False)
GLM = Decode(gpu_jpeg=True, exif_transpose=True)  # a processor with smart_rgb_conversion


def _bytes(fmt: str, size=(300, 500), orientation: int | None = None) -> bytes:
    buf = io.BytesIO()
    kw = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kw["exif"] = exif.tobytes()
    Image.new("RGB", size, (1, 2, 3)).save(buf, fmt, **kw)
    return buf.getvalue()


def _url(data: bytes, kind: str) -> str:
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def test_nvjpeg_keeps_the_stored_orientation_pil_applies_exif_only_where_the_processor_does() -> None:
    jpeg = _url(_bytes("JPEG", orientation=6), "jpeg")
    # a 300x500 JPEG stored with EXIF orientation 6 (a quarter turn): nvJPEG decodes the stored
    # pixels, so the processor sees 300x500, and the header says what the file holds
    assert measure(jpeg, GPU) == Sized(300, 500, "nvjpeg", Header("jpeg", 300, 500, orientation=6))
    got = measure(jpeg, CPU)
    assert isinstance(got, Sized) and (got.width, got.height, got.decoder) == (300, 500, "pil")
    png = _url(_bytes("PNG", orientation=6), "png")
    got = measure(png, GLM)
    assert isinstance(got, Sized) and (got.width, got.height, got.decoder) == (500, 300, "pil")
    got = measure(png, GPU)
    assert isinstance(got, Sized) and (got.width, got.height) == (300, 500)


def test_a_jpeg_without_its_end_marker_is_not_nvjpegs() -> None:
    data = _bytes("JPEG", orientation=8)[:-2]
    got = measure(_url(data, "jpeg"), GLM)
    assert isinstance(got, Sized) and got.decoder == "pil" and (got.width, got.height) == (500, 300)


def test_raw_base64_and_the_slash_rule() -> None:
    png = base64.b64encode(_bytes("PNG")).decode()
    got = measure(png, GPU)
    assert isinstance(got, Sized) and (got.width, got.height) == (300, 500)
    jpeg = base64.b64encode(_bytes("JPEG")).decode()
    assert jpeg.startswith("/9j/")
    got = measure(jpeg, GPU)
    assert isinstance(got, Unsized) and got.fails and "opens it as a file path" in got.reason


def test_files_by_path_and_file_url(tmp_path: Path) -> None:
    path = tmp_path / "a photo.webp"
    path.write_bytes(_bytes("WEBP", (123, 45)))
    for ref in (str(path), "file://" + str(path).replace(" ", "%20")):
        got = measure(ref, GPU)
        assert isinstance(got, Sized) and (got.width, got.height) == (123, 45), ref
    missing = measure(str(tmp_path / "gone.png"), GPU)
    assert isinstance(missing, Unsized) and "cannot read the image" in missing.reason


def test_http_urls_are_never_fetched() -> None:
    got = measure("https://example.com/cat.jpg", GPU)
    assert isinstance(got, Unsized) and not got.fails and "--assume-image" in got.reason
    assumed = measure("http://example.com/cat.jpg", GPU, assume=(640, 480))
    assert isinstance(assumed, Sized) and (assumed.width, assumed.height, assumed.decoder) == (640, 480, "assumed")


def test_truncated_base64_is_an_error_not_a_guess() -> None:
    # SGLang would fail such a request, but a log that cut the body looks the same: never guess
    data = base64.b64encode(_bytes("PNG")).decode()
    cut = data[: len(data) // 2 // 4 * 4]
    got = measure(cut, GPU)
    assert isinstance(got, Unsized) and not got.fails and "truncated PNG" in got.reason
    broken = measure("data:image/png;base64,iVBORw0K!!!", GPU)
    assert isinstance(broken, Unsized) and "base64" in broken.reason


def _png_claiming(width: int, height: int) -> bytes:
    """A small real PNG whose IHDR (with its CRC) claims ``width``×``height``: the header is all Pillow opens."""
    data = bytearray(_bytes("PNG", (4, 4)))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A small real baseline JPEG whose SOF0 claims ``width``×``height``, still ending FF D9."""
    data = bytearray(_bytes("JPEG", (16, 16)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def _pillow_refuses(data: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            Image.open(io.BytesIO(data))
    except Image.DecompressionBombError:
        return True
    return False


def test_an_image_over_pillows_limit_is_a_request_sglang_fails() -> None:
    assert Image.MAX_IMAGE_PIXELS * 2 == 178_956_970  # the Pillow SGLang decodes with
    huge = _png_claiming(100_000, 100_000)
    assert _pillow_refuses(huge)
    got = measure(_url(huge, "png"), GPU)
    assert isinstance(got, Unsized) and got.fails and got.code == "traffic-image-too-large"
    assert "10,000,000,000 pixels" in got.reason and "DecompressionBombError" in got.reason
    # one pixel more than the limit is refused, the limit itself is decoded (with Pillow's warning only)
    over, at = _png_claiming(178_956_971, 1), _png_claiming(178_956_970, 1)
    assert _pillow_refuses(over) and not _pillow_refuses(at)
    assert isinstance(measure(_url(over, "png"), CPU), Unsized)
    assert measure(_url(at, "png"), CPU) == Sized(178_956_970, 1, "pil", measure(_url(at, "png"), CPU).header)


def test_a_huge_jpeg_goes_to_nvjpeg_unless_it_lacks_its_end_marker_or_the_processor_decodes_on_the_cpu() -> None:
    # SGLang's is_jpeg_with_cuda (utils/common.py:2070-2083): FF D8 ... FF D9 on a CUDA machine goes to
    # torchvision's decode_jpeg, which allocates the header's size and has no pixel limit
    jpeg = _jpeg_claiming(20_000, 10_000)
    assert _pillow_refuses(jpeg) and jpeg.endswith(b"\xff\xd9")
    got = measure(_url(jpeg, "jpeg"), GPU)
    assert isinstance(got, Sized) and (got.width, got.height, got.decoder) == (20_000, 10_000, "nvjpeg")
    for ref, decode in ((_url(jpeg, "jpeg"), CPU), (_url(jpeg[:-2], "jpeg"), GPU)):
        got = measure(ref, decode)
        assert isinstance(got, Unsized) and got.fails and got.code == "traffic-image-too-large"
        assert "a 20000x10000 JPEG (200,000,000 pixels)" in got.reason


def test_fifos_devices_and_directories_are_refused_at_once_as_validate_refuses_them(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jpg"
    folder.mkdir()
    cases = [
        (str(fifo), "file-not-regular", "this is a FIFO (named pipe), not a regular file"),
        ("file://" + str(fifo), "file-not-regular", "this is a FIFO (named pipe), not a regular file"),
        ("file:///dev/zero", "file-not-regular", "this is a character device, not a regular file"),
        (str(folder), "file-unreadable", "this is a directory, not a file"),
    ]
    for ref, code, reason in cases:
        signal.setitimer(signal.ITIMER_REAL, 5)  # SIGALRM's default action ends a run that hangs
        try:
            got = measure(ref, GPU)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        assert isinstance(got, Unsized) and not got.fails and got.code == code, ref
        assert got.reason.startswith(f"{unquote(urlparse(ref).path)}: {reason}"), got.reason
