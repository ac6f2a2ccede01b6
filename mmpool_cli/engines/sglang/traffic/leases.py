"""How SGLang 0.5.23 holds a request's leases and decodes its images, per model family and flags.

* Eager (most families): the scheduler copies the features and acknowledges them when it receives
  the request (``managers/schedule_batch.py:763-783``); the lease is given back at the first
  recycler tick after that receipt. The receipt comes ``recv_delay`` after the tokenizer's copy.
* Deferred: Qwen3-VL at TP = 1, and Qwen3-VL with ``--mm-enable-dp-encoder``
  (``multimodal/processors/qwen_vl.py:1212-1228``; Qwen3.5, also deferred there, is not a family
  mmpool sizes), and Kimi-K2.5 with ``--mm-enable-dp-encoder`` (``kimi_k25.py:612-620``): held
  through the queue wait until the encoder runs.

Images: processors with ``gpu_image_decode`` (the default, ``base_processor.py:243``; every
family mmpool pools) decode a whole JPEG with nvJPEG; ``smart_to_rgb``'s ``exif_transpose`` runs
only for processors with ``smart_rgb_conversion`` (``base_processor.py:1036-1040``: GLM-4V in
0.5.23, none of mmpool's families), so the processor sees the stored size either way.
Kimi-K2.5 decodes on the CPU when ``SGLANG_FORCE_CPU_IMAGE_PREPROCESSING`` is set (``kimi_k25.py:27, 528``).
Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mmpool_cli.inputs.traffic.refs import Decode

NS_PER_S = 10**9
# One scheduler step: the tokenizer's copy to the scheduler's receipt on a busy server, whose
# scheduler takes requests only between forward steps (managers/scheduler.py:2033-2049). Consumers
# that do nothing else acknowledged in a median 1.4 ms on an H200 (benchmarks/README.md, "## record"):
# that is the floor, not a serving server's delay, so the default stays one step.
DEFAULT_RECV_DELAY_NS = 20_000_000
DEFAULT_RECV_DELAY_TEXT = "0.02 s (one scheduler step)"


@dataclass(frozen=True)
class LeaseRule:
    """The lease rule for one run: eager or deferred, and why."""

    deferred: bool
    why: str


def lease_rule(family: str, tp_size: int, dp_encoder: bool) -> LeaseRule:
    """Whether SGLang 0.5.23 defers the acknowledgement of ``family``'s features with these flags."""
    if family == "qwen3-vl" and dp_encoder:
        return LeaseRule(True, "Qwen3-VL with --mm-enable-dp-encoder defers it to the encoder")
    if family == "qwen3-vl" and tp_size == 1:
        return LeaseRule(True, "Qwen3-VL at TP 1 defers it to the encoder")
    if family == "kimi-k2.5" and dp_encoder:
        return LeaseRule(True, "Kimi-K2.5 with --mm-enable-dp-encoder defers it to the encoder")
    return LeaseRule(False, "acknowledged on the scheduler's receipt")


def decode_mode(family: str, environ: Mapping[str, str]) -> Decode:
    """How ``family``'s processor decodes images on a CUDA server."""
    gpu = True
    if family == "kimi-k2.5":
        raw = environ.get("SGLANG_FORCE_CPU_IMAGE_PREPROCESSING", "")
        gpu = raw.strip().lower() not in ("1", "true", "yes", "y")  # EnvBool, environ.py:145-148
    return Decode(gpu_jpeg=gpu, exif_transpose=False)


# The per-item request fields that change sizes, and the families whose processors read them
# (entrypoints/openai/protocol.py:604-633). None of mmpool's pooled families reads one in 0.5.23:
# a video_url's fps, max_frames, max_tokens_per_frame and max_image_tokens travel as a VideoData's
# preprocess_kwargs (parser/jinja_template_utils.py:272-293), which load_video drops
# (utils/common.py:2245-2248) and only GLM-4V's processor reads; Qwen's preprocess_video samples
# with the server's --mm-process-config video section alone (multimodal/processors/qwen_vl.py:248-290).
ITEM_FIELDS_USED: dict[str, frozenset[str]] = {
    "max_dynamic_patch": frozenset(),  # InternVL-style tiling: never pooled
    "min_dynamic_patch": frozenset(),
    "max_long_side_pixel": frozenset(),  # MiniMax-M3 only
    "fps": frozenset(),
    "max_frames": frozenset(),
    "max_tokens_per_frame": frozenset(),
    "max_image_tokens": frozenset(),
    "preprocess_kwargs": frozenset(),
}
