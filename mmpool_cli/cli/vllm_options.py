"""The vLLM flags of ``plan --engine vllm``, spelled as vLLM spells them and read by vLLM's own rules.

Each given flag becomes the words ``--flag value`` and goes through the same reader as
``mmpool check -- vllm serve ...`` (``engines.vllm.args``), so a value means the same thing in
both commands: ``--mm-processor-cache-gb`` is a float of GiB, ``--max-num-batched-tokens 16k`` is
16 000, ``--limit-mm-per-prompt`` is JSON. A value vLLM refuses is a usage error naming the flag.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from mmpool_cli.cli.options import size_arg, with_options
from mmpool_cli.errors import MmpoolError

PANEL = "vLLM (--engine vllm)"


class CacheType(StrEnum):
    lru = "lru"
    shm = "shm"


class PerformanceMode(StrEnum):
    balanced = "balanced"
    interactivity = "interactivity"
    throughput = "throughput"


class Dtype(StrEnum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float = "float"
    float16 = "float16"
    float32 = "float32"
    half = "half"


class VideoBackend(StrEnum):
    opencv = "opencv"
    pynvvideocodec = "pynvvideocodec"


@dataclass(frozen=True)
class VllmOptions:
    """The vLLM flags of ``plan``, as given; the field defaults are the flags' defaults (vLLM's own)."""

    vllm_version: str | None = None
    mm_processor_cache_gb: str | None = None
    mm_processor_cache_type: CacheType | None = None
    mm_shm_cache_max_object_size_mb: str | None = None
    mm_ipc_gpu_memory_gb: str | None = None
    data_parallel_size: str | None = None
    data_parallel_size_local: str | None = None
    data_parallel_rank: str | None = None
    data_parallel_start_rank: str | None = None
    data_parallel_external_lb: bool = False
    data_parallel_hybrid_lb: bool = False
    api_server_count: str | None = None
    tensor_parallel_size: str | None = None
    max_model_len: str | None = None
    max_num_batched_tokens: str | None = None
    max_num_seqs: str | None = None
    performance_mode: PerformanceMode | None = None
    limit_mm_per_prompt: str | None = None
    mm_device_do_normalize: bool | None = None
    dtype: Dtype | None = None
    video_backend: VideoBackend | None = None
    gpu_memory: str | None = None
    gpu_name: str | None = None
    host_memory: str | None = None
    shm_size: str | None = None

    def given(self) -> list[str]:
        """The flags set to something other than their default, as ``--flag-name``."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]

    def words(self) -> list[tuple[str, str]]:
        """The vLLM flags given, as the words of a ``vllm serve`` command line, each with its flag."""
        out: list[tuple[str, str]] = []
        for name in _VLLM_FLAGS:
            value = getattr(self, name)
            flag = "--" + name.replace("_", "-")
            if value is False and name in _ON_OFF:
                out.append(("--no-" + flag[2:], flag))
                continue
            if value is None or value is False:
                continue
            out.append((flag, flag))
            if value is not True:
                out.append((str(value.value if isinstance(value, StrEnum) else value), flag))
        if self.video_backend is not None:
            backend = json.dumps({"video": {"video_backend": self.video_backend.value}})
            out += [("--media-io-kwargs", "--video-backend"), (backend, "--video-backend")]
        return out

    def request(self, environ: Mapping[str, str], model: Any, items: tuple[Any, ...]) -> Any:
        """The vLLM plan request these flags make with the workload; a value vLLM refuses is a usage error."""
        from mmpool_cli.core.findings import Severity
        from mmpool_cli.engines.vllm import args, versions
        from mmpool_cli.engines.vllm.engine import with_env
        from mmpool_cli.engines.vllm.flags import table
        from mmpool_cli.engines.vllm.plan import request_from_reading
        from mmpool_cli.engines.vllm.reading import Token

        release, chosen = versions.choose(self.vllm_version, environ)
        words = [Token(text, flag) for text, flag in self.words()]
        reading = args.read(words, serve=False, flags=table(release.version))
        for f in reading.findings:
            if f.severity is Severity.error:
                raise MmpoolError(f.message)
        gpu = None
        if self.gpu_memory is not None or self.gpu_name is not None:
            gpu = _gpu(None if self.gpu_memory is None else size_arg("--gpu-memory", self.gpu_memory), self.gpu_name)
        return with_env(
            request_from_reading(
                reading,
                release,
                release_source=chosen,
                model=model,
                items=items,
                gpu=gpu,
                host_memory=None if self.host_memory is None else size_arg("--host-memory", self.host_memory),
                shm_size=None if self.shm_size is None else size_arg("--shm-size", self.shm_size),
            ),
            environ,
        )


# the fields that are vLLM's own flags (the rest are mmpool's: the release, the GPU, the host)
_VLLM_FLAGS = (
    "mm_processor_cache_gb",
    "mm_processor_cache_type",
    "mm_shm_cache_max_object_size_mb",
    "mm_ipc_gpu_memory_gb",
    "data_parallel_size",
    "data_parallel_size_local",
    "data_parallel_rank",
    "data_parallel_start_rank",
    "data_parallel_external_lb",
    "data_parallel_hybrid_lb",
    "api_server_count",
    "tensor_parallel_size",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "performance_mode",
    "limit_mm_per_prompt",
    "mm_device_do_normalize",
    "dtype",
)
# on/off flags whose off is a value of its own (not the default)
_ON_OFF = ("mm_device_do_normalize",)


def _opt(flag: str, metavar: str, help_: str) -> Any:
    return typer.Option(flag, metavar=metavar, help=help_, rich_help_panel=PANEL)


_VLLM_DECLARATIONS: dict[str, Any] = {
    "vllm_version": Annotated[
        str | None,
        _opt(
            "--vllm-version",
            "X.Y.Z",
            "vLLM release to plan for (0.30.0-0.34.0): else the installed vllm, else the newest.",
        ),
    ],
    "mm_processor_cache_gb": Annotated[
        str | None,
        _opt("--mm-processor-cache-gb", "GIB", "Processor cache budget in GiB, a float as vLLM reads it (default 4)."),
    ],
    "mm_processor_cache_type": Annotated[
        CacheType | None, typer.Option("--mm-processor-cache-type", help="lru (default) or shm.", rich_help_panel=PANEL)
    ],
    "mm_shm_cache_max_object_size_mb": Annotated[
        str | None, _opt("--mm-shm-cache-max-object-size-mb", "MIB", "Largest object of the shm cache (default 128).")
    ],
    "mm_ipc_gpu_memory_gb": Annotated[
        str | None,
        _opt("--mm-ipc-gpu-memory-gb", "GIB", "GPU decode pool in GiB, split over the API processes (default 0: off)."),
    ],
    "data_parallel_size": Annotated[str | None, _opt("--data-parallel-size", "N", "DP size (default 1).")],
    "data_parallel_size_local": Annotated[
        str | None, _opt("--data-parallel-size-local", "N", "DP ranks on this node (hybrid balancing).")
    ],
    "data_parallel_rank": Annotated[
        str | None, _opt("--data-parallel-rank", "N", "This launch's DP rank: external load balancing.")
    ],
    "data_parallel_start_rank": Annotated[
        str | None, _opt("--data-parallel-start-rank", "N", "First DP rank on this node: hybrid load balancing.")
    ],
    "data_parallel_external_lb": Annotated[
        bool, typer.Option("--data-parallel-external-lb", help="External load balancing.", rich_help_panel=PANEL)
    ],
    "data_parallel_hybrid_lb": Annotated[
        bool, typer.Option("--data-parallel-hybrid-lb", help="Hybrid load balancing.", rich_help_panel=PANEL)
    ],
    "api_server_count": Annotated[
        str | None,
        _opt("--api-server-count", "N", "API server processes (default: the DP size with internal balancing)."),
    ],
    "tensor_parallel_size": Annotated[str | None, _opt("--tensor-parallel-size", "N", "TP size (default 1).")],
    "max_model_len": Annotated[
        str | None, _opt("--max-model-len", "N", "Context length (default: the model's; 128k is 128 000).")
    ],
    "max_num_batched_tokens": Annotated[
        str | None,
        _opt("--max-num-batched-tokens", "N", "Tokens per step, and the encoder cache's floor (default by GPU)."),
    ],
    "max_num_seqs": Annotated[str | None, _opt("--max-num-seqs", "N", "Sequences per step (default by GPU).")],
    "performance_mode": Annotated[
        PerformanceMode | None,
        typer.Option(
            "--performance-mode", help="balanced (default), interactivity or throughput.", rich_help_panel=PANEL
        ),
    ],
    "limit_mm_per_prompt": Annotated[
        str | None,
        _opt("--limit-mm-per-prompt", "JSON", "Items per modality, e.g. '{\"video\": 0}' (default 999 each)."),
    ],
    "mm_device_do_normalize": Annotated[
        bool | None,
        typer.Option(
            "--mm-device-do-normalize/--no-mm-device-do-normalize",
            help="Keep raw uint8 pixels and normalize on the GPU (default: where the model's class supports it).",
            rich_help_panel=PANEL,
        ),
    ],
    "dtype": Annotated[
        Dtype | None,
        typer.Option(
            "--dtype",
            help="The model's dtype; host-normalized pixels are kept in it (default auto).",
            rich_help_panel=PANEL,
        ),
    ],
    "video_backend": Annotated[
        VideoBackend | None,
        typer.Option(
            "--video-backend", help="vLLM's video loader; pynvvideocodec decodes on the GPU.", rich_help_panel=PANEL
        ),
    ],
    "gpu_memory": Annotated[
        str | None, _opt("--gpu-memory", "SIZE", "The GPU's total memory as torch reports it (default: an H200's).")
    ],
    "gpu_name": Annotated[str | None, _opt("--gpu-name", "NAME", "The GPU's name, e.g. 'NVIDIA A100-SXM4-80GB'.")],
    "host_memory": Annotated[
        str | None, _opt("--host-memory", "SIZE", "Host RAM the processor cache must fit (an error above it).")
    ],
    "shm_size": Annotated[str | None, _opt("--shm-size", "SIZE", "Size of /dev/shm the shm cache must fit.")],
}


def with_vllm_options(command: Any) -> Any:
    """Give a command the vLLM flags as one ``vllm: VllmOptions`` parameter."""
    return with_options(VllmOptions, _VLLM_DECLARATIONS, "vllm")(command)


def with_vllm_options_sharing(*shared: str) -> Callable[[Any], Any]:
    """``with_vllm_options`` for a command that declares the fields ``shared`` (e.g. ``gpu_name``) itself,
    because they mean the same for every engine: they get no flag here and keep their default in ``vllm``."""
    return with_options(VllmOptions, _VLLM_DECLARATIONS, "vllm", shared)


def refuse_mixed(engine: str, sglang_given: list[str], vllm_given: list[str]) -> None:
    """A usage error for flags of the other engine."""
    if engine == "vllm" and sglang_given:
        raise MmpoolError(f"{sglang_given[0]} is an SGLang pool flag; with --engine vllm give vLLM's flags instead")
    if engine != "vllm" and vllm_given:
        raise MmpoolError(f"{vllm_given[0]} is a vLLM flag: add --engine vllm")


def vllm_workload(workload: Any) -> tuple[Any, tuple[Any, ...]]:
    """The model and items of ``plan``'s workload flags, for vLLM (which has no SGLang pool flags).

    Raises:
        MmpoolError: items without --model, a flag vLLM's plan does not use, a bad item, an unknown family.
    """
    from mmpool_cli.workload import items as wi
    from mmpool_cli.workload.families import with_overrides
    from mmpool_cli.workload.hf import resolve

    for name, flag in (
        ("audio", "--audio"),
        ("max_frames", "--max-frames"),
        ("pan_and_scan", "--pan-and-scan"),
        ("page_size", "--page-size"),
    ):
        default = type(workload)().__getattribute__(name)
        if getattr(workload, name) != default:
            raise MmpoolError(f"{flag} is an SGLang workload flag; vLLM's plan does not use it")
    if workload.model is None:
        if workload.image or workload.video:
            raise MmpoolError("--image and --video need --model NAME|PATH (a family or a model directory)")
        return None, ()
    model = resolve(workload.model)
    overrides = {
        "min_pixels": workload.min_pixels,
        "max_pixels": workload.max_pixels,
        "patch_size": workload.patch_size,
    }
    flags = {"min_pixels": "--min-pixels", "max_pixels": "--max-pixels", "patch_size": "--patch-size"}
    model = dataclasses.replace(model, settings=with_overrides(model.family, model.settings, overrides, flags))
    items = tuple(wi.parse_image(t) for t in workload.image or ()) + tuple(
        wi.parse_video(t) for t in workload.video or ()
    )
    return model, items


@dataclass(frozen=True)
class VllmCheckOptions:
    """``check``'s flags for a vLLM launch: what the launch command cannot say."""

    vllm_version: str | None
    gpu_name: str | None
    host_memory: str | None
    shm_size: str | None
    model: str | None
    images: list[str]
    videos: list[str]

    def given(self) -> list[str]:
        """The flags given, as ``--flag-name``."""
        flags = ("--vllm-version", "--gpu-name", "--host-memory", "--shm-size", "--model", "--image", "--video")
        values = (
            self.vllm_version,
            self.gpu_name,
            self.host_memory,
            self.shm_size,
            self.model,
            self.images,
            self.videos,
        )
        return [flag for flag, value in zip(flags, values, strict=True) if value]

    def gpu(self, memory: int | None) -> Any:
        """The GPU as ``--gpu-memory`` (already checked) and ``--gpu-name`` describe it."""
        return _gpu(memory, self.gpu_name)

    def assumptions(self, environ: Mapping[str, str], gpu: Any) -> Any:
        """The vLLM engine's assumptions for ``read_launch``; a bad value is a usage error."""
        from mmpool_cli.engines.vllm import versions
        from mmpool_cli.engines.vllm.engine import VllmAssumptions
        from mmpool_cli.workload import items as wi

        release, chosen = versions.choose(self.vllm_version, environ)
        items = tuple(wi.parse_image(t) for t in self.images) + tuple(wi.parse_video(t) for t in self.videos)
        return VllmAssumptions(
            version=release.version,
            version_chosen=chosen,
            gpu=gpu,
            host_memory=None if self.host_memory is None else size_arg("--host-memory", self.host_memory),
            shm_size=None if self.shm_size is None else size_arg("--shm-size", self.shm_size),
            model=self.model,
            items=items,
        )


def _gpu(memory: int | None, name: str | None) -> Any:
    from mmpool_cli.engines.vllm.encoder_budget import Gpu
    from mmpool_cli.engines.vllm.request import H200

    label = name or "GPU"
    # GB10 (compute capability 12.1) is the one GPU whose capability vLLM's defaults test
    return Gpu(H200.memory_bytes if memory is None else memory, label, (12, 1) if "gb10" in label.lower() else None)
