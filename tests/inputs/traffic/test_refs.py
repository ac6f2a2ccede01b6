"""Image references as SGLang's load_image reads them, and which decoder (and orientation) applies."""

from __future__ import annotations

import base64
import io
from pathlib import Path

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
