"""Processor configs read as transformers 5.19 reads them, and videos sized as SGLang 0.5.23 then sizes them.

``data/qwen-video-processors.json`` holds what SGLang's own ``preprocess_video`` and transformers'
``AutoProcessor`` (loaded as SGLang's ``get_processor`` loads it) made of each case's model
directory (``scripts/record_qwen_video_processors.py``); each directory is rebuilt here and sized
by mmpool. With SGLang's wheel in ``MMPOOL_SGLANG_WHEEL`` (the ``.whl`` the record tests take, or
it unpacked) and a loadable torchvision the record itself is made again and compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.engines import engine
from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.families import family
from mmpool_cli.workload.features import pooled_tensor, video_item_bytes
from mmpool_cli.workload.hf import resolve
from mmpool_cli.workload.items import Image

ROOT = Path(__file__).resolve().parents[2]
RECORD_PATH = Path(__file__).parent / "data" / "qwen-video-processors.json"
RECORD = json.loads(RECORD_PATH.read_text())
SGLANG = engine("sglang").processor_kwargs


def _directory(tmp_path: Path, model_type: str, files: dict[str, Any]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    return tmp_path


def _video(text: str) -> tuple[int, int, int, Fraction]:
    size, seconds, fps = text.split(":")
    width, height = (int(x) for x in size.split("x"))
    return width, height, (Fraction(seconds) * Fraction(fps)).__floor__(), Fraction(float(Fraction(fps)))


@pytest.mark.parametrize("case", RECORD["cases"], ids=[c["name"] for c in RECORD["cases"]])
def test_mmpool_sizes_each_directory_as_sglang_and_transformers_did(tmp_path: Path, case: dict[str, Any]) -> None:
    model = resolve(str(_directory(tmp_path, case["model_type"], case["files"])), processor_kwargs=SGLANG)
    width, height, frames, fps = _video(case["video"])
    got = video_item_bytes(model.family, model.settings, width, height, frames, fps, case["env"])
    assert got == case["video_bytes"]
    image_w, image_h = (int(x) for x in case["image"].split("x"))
    assert pooled_tensor(model.family, model.settings, Image(image_w, image_h)).bytes == case["image_bytes"]


def test_the_issues_three_figures() -> None:
    cases = {c["name"]: c for c in RECORD["cases"]}
    # VIDEO_MAX_PIXELS=9,031,680: SGLang floors each frame at int(100,352 × 1.05) = 105,369 px and keeps
    # 168×588; the checkpoint's min 3,136 keeps it: 384 × 12 × 42 patches of 1,176 floats
    lowered = cases["qwen2.5 official, VIDEO_MAX_PIXELS lowered (issue 24)"]
    assert lowered["sglang_frames"] == [768, 168, 588]
    assert lowered["video_bytes"] == 384 * 12 * 42 * 1176 * 4 == 910_393_344
    # the class minimum 128·28² mmpool used by family name would have enlarged it to 196×616
    fam = family("qwen2.5-vl")
    class_bounds = dict(fam.settings, video_min_pixels=128 * 28 * 28, video_max_pixels=768 * 28 * 28)
    width, height, frames, fps = _video(lowered["video"])
    assert video_item_bytes(fam, class_bounds, width, height, frames, fps, lowered["env"]) == 384 * 14 * 44 * 4704
    assert 384 * 14 * 44 * 4704 == 1_112_702_976
    # by family name, mmpool now gives what the official checkpoint directory gives
    assert video_item_bytes(fam, dict(fam.settings), width, height, frames, fps, lowered["env"]) == 910_393_344
    # a Qwen3-VL video config without "size": the class's 131,072-786,432 px, not the checkpoint's
    no_size, official = cases["qwen3, video config without size"], cases["qwen3 official"]
    assert (no_size["video_bytes"], official["video_bytes"]) == (5_898_240, 298_598_400)


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("qwen2.5 official, defaults", "qwen2.5-vl"),
        ("qwen2 official", "qwen2-vl"),
        ("qwen3 official", "qwen3-vl"),
    ],
)
def test_a_family_name_is_its_official_checkpoint_directory(tmp_path: Path, name: str, settings: str) -> None:
    case = next(c for c in RECORD["cases"] if c["name"] == name)
    model = resolve(str(_directory(tmp_path, case["model_type"], case["files"])), processor_kwargs=SGLANG)
    assert model.settings == dict(family(settings).settings)


def test_what_each_file_gives(tmp_path: Path) -> None:
    pre = {"min_pixels": 3136, "max_pixels": 12_845_056}
    nested = {"video_processor": {"size": {"shortest_edge": 200_704, "longest_edge": 401_408}}}
    model = resolve(
        str(_directory(tmp_path, "qwen2_5_vl", {"preprocessor_config.json": pre, "processor_config.json": nested}))
    )
    s = model.settings
    assert (s["min_pixels"], s["max_pixels"], s["video_min_pixels"], s["video_max_pixels"]) == (
        3136,
        12_845_056,
        200_704,
        401_408,
    )
    # flat keys win over size in the Qwen2-VL classes; a missing size is the class's own
    (tmp_path / "processor_config.json").unlink()
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({"max_pixels": 401_408}))
    s = resolve(str(tmp_path)).settings
    assert (s["video_min_pixels"], s["video_max_pixels"], s["video_volume"]) == (128 * 28 * 28, 401_408, False)


@pytest.mark.parametrize(
    ("model_type", "files", "says"),
    [
        ("qwen2_5_vl", {"preprocessor_config.json": {"size": {"longest_edge": 401_408}}}, "size has no shortest_edge"),
        ("qwen2_5_vl", {"processor_config.json": {"video_processor": []}}, "'video_processor' is not a JSON object"),
        (
            "qwen3_vl",
            {
                "preprocessor_config.json": {},
                "video_preprocessor_config.json": {"video_processor_type": "Qwen9VideoProcessor"},
            },
            "'Qwen9VideoProcessor' is not a video processor",
        ),
        (
            "qwen3_vl",
            {"video_preprocessor_config.json": {"size": {"shortest_edge": 1, "longest_edge": 2}}},
            "cannot build the image processor",
        ),
        ("qwen2_vl", {"preprocessor_config.json": {"patch_size": 0}}, "patch_size: expected a positive integer"),
    ],
)
def test_configs_transformers_cannot_use_are_usage_errors(tmp_path: Path, model_type: str, files, says: str) -> None:
    with pytest.raises(MmpoolError, match=says):
        resolve(str(_directory(tmp_path, model_type, files)))


def test_sglang_passes_qwen2_vl_a_size_that_flat_bounds_override(tmp_path: Path) -> None:
    size_only = {"size": {"shortest_edge": 3136, "longest_edge": 12_845_056}}
    d = _directory(tmp_path, "qwen2_vl", {"preprocessor_config.json": size_only})
    assert resolve(str(d)).settings["max_pixels"] == 12_845_056  # transformers alone
    assert resolve(str(d), processor_kwargs=SGLANG).settings["max_pixels"] == 1_003_520  # as SGLang loads it
    assert engine("sglang").processor_kwargs("qwen2_5_vl") == {}


QWEN_VL = "sglang/srt/multimodal/processors/qwen_vl.py"


def unpacked(given: str | None, into: Path) -> str | None:
    """``MMPOOL_SGLANG_WHEEL`` as the script reads it: an unpacked wheel, or the ``.whl`` the record tests take
    (its one file the script reads, unpacked into ``into``); None when it names neither."""
    if not given:
        return None
    if (Path(given) / QWEN_VL).is_file():
        return given
    if not zipfile.is_zipfile(given):
        return None
    with zipfile.ZipFile(given) as archive:
        if QWEN_VL not in archive.namelist():
            return None
        archive.extract(QWEN_VL, into)
    return str(into)


def test_the_wheel_is_taken_packed_or_unpacked(tmp_path: Path) -> None:
    packed = tmp_path / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(packed, "w") as archive:
        archive.writestr(QWEN_VL, "# qwen_vl\n")
    assert unpacked(str(packed), tmp_path / "src") == str(tmp_path / "src")
    assert (tmp_path / "src" / QWEN_VL).read_text() == "# qwen_vl\n"
    assert unpacked(str(tmp_path / "src"), tmp_path / "again") == str(tmp_path / "src")
    assert unpacked(str(tmp_path / "nothing"), tmp_path / "x") is None and unpacked(None, tmp_path) is None


def test_the_record_is_what_sglang_and_transformers_make_now(tmp_path: Path) -> None:
    wheel = unpacked(os.environ.get("MMPOOL_SGLANG_WHEEL"), tmp_path / "sglang-src")
    if wheel is None:
        pytest.skip("MMPOOL_SGLANG_WHEEL names no sglang 0.5.23 wheel, packed or unpacked (pip download --no-deps)")
    script = ROOT / "scripts" / "record_qwen_video_processors.py"
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True, timeout=120)
    shim = [] if probe.returncode == 0 else ["--cpu-torchvision-shim"]  # a CUDA torchvision beside a CPU torch
    out = tmp_path / "record.json"
    done = subprocess.run(
        [sys.executable, str(script), "--wheel", wheel, "--out", str(out), *shim],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 and "torchvision is not installed" in done.stderr:
        pytest.skip("torchvision is not installed: transformers' video processors need it")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text()) == RECORD


def test_gemma3_without_a_size_takes_the_class_size_and_reads_the_nested_config_first(tmp_path: Path) -> None:
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    np = pytest.importorskip("numpy")
    d = _directory(
        tmp_path,
        "gemma3",
        {
            "preprocessor_config.json": {"size": {"height": 896, "width": 896}},
            "processor_config.json": {"image_processor": {"do_pan_and_scan": False}},
        },
    )
    model = resolve(str(d))
    got = pooled_tensor(model.family, model.settings, Image(1920, 1080)).bytes
    # what transformers builds from the dict it reads first: the nested one, without a size
    hf = Gemma3ImageProcessorPil.from_dict({"do_pan_and_scan": False})
    pixels = hf(images=[np.zeros((1080, 1920, 3), dtype=np.uint8)], return_tensors="np")["pixel_values"]
    assert got == pixels.nbytes == 3 * 224 * 224 * 4


def test_patch_size_overrides_the_video_processors_patch_too() -> None:
    from mmpool_cli.workload.families import with_overrides

    fam = family("qwen2.5-vl")
    s = with_overrides(fam, dict(fam.settings), {"patch_size": 16}, {"patch_size": "--patch-size"})
    assert (s["patch_size"], s["video_patch_size"]) == (16, 16)
    # 60 frames SGLang resizes to 1008×560; factor 32 keeps 1024×576 (within 3,136-12,845,056): 30 × 36 × 64
    got = video_item_bytes(fam, s, 1920, 1080, 900, Fraction(30), {})
    assert got == 30 * 36 * 64 * (3 * 2 * 16 * 16) * 4
