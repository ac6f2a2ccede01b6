"""The workload flags of ``plan`` and ``simulate`` (a model and the items of one request), declared once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from mmpool_cli.workload.features import Workload
    from mmpool_cli.workload.kv import KvRequest

from mmpool_cli.cli.options import with_options
from mmpool_cli.engines import engine
from mmpool_cli.errors import MmpoolError


class KvDtypeChoice(StrEnum):
    auto = "auto"
    bf16 = "bf16"
    bfloat16 = "bfloat16"
    fp8_e5m2 = "fp8_e5m2"
    fp8_e4m3 = "fp8_e4m3"


@dataclass(frozen=True)
class WorkloadOptions:
    """The workload flags of ``plan`` (a model and the items of one request), as given."""

    model: str | None = None
    image: list[str] | None = None
    video: list[str] | None = None
    audio: list[str] | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    patch_size: int | None = None
    max_frames: int | None = None
    pan_and_scan: bool = False
    kv_cache_dtype: KvDtypeChoice = KvDtypeChoice.auto
    page_size: int = 1

    def resolve(self, environ: Mapping[str, str]) -> tuple[Workload | None, KvRequest | None]:
        """The workload and the KV-cost request these flags make (each None when not asked for).

        Raises:
            MmpoolError: items or processor flags without ``--model``, a bad item, an unknown family.
        """
        from mmpool_cli.workload import items as wi
        from mmpool_cli.workload import video_env as wenv
        from mmpool_cli.workload.families import with_overrides
        from mmpool_cli.workload.features import workload
        from mmpool_cli.workload.hf import resolve

        defaults = WorkloadOptions()
        if self.model is None:
            given = [f for f in _WORKLOAD_FLAGS if getattr(self, f) != getattr(defaults, f)]
            if given:
                flag = _WORKLOAD_FLAGS[given[0]]
                raise MmpoolError(f"{flag} needs --model NAME|PATH (a family or a model directory)")
            return None, None
        model = resolve(self.model, processor_kwargs=engine().processor_kwargs)
        items: list[wi.Item] = [wi.parse_image(t) for t in self.image or ()]
        items += [wi.parse_video(t) for t in self.video or ()]
        items += [wi.parse_audio(t) for t in self.audio or ()]
        overrides = {
            "min_pixels": self.min_pixels,
            "max_pixels": self.max_pixels,
            "patch_size": self.patch_size,
            "max_frames": self.max_frames,
            "pan_and_scan": True if self.pan_and_scan else None,
        }
        settings = with_overrides(model.family, model.settings, overrides, _WORKLOAD_FLAGS)
        if "max_frames" in settings:
            settings["video_total_pixels"] = wenv.video_total_pixels(environ)
        load = replace(
            workload(model.name, model.family, settings, items, engine().pooled(model.family.name)),
            model_path=model.model_path,
        )
        return load, self._kv(model, environ)

    def item_flags(self) -> list[str]:
        """The flags given that describe a request's items (and their processor), as ``--flag-name``."""
        defaults = WorkloadOptions()
        kv = ("kv_cache_dtype", "page_size")
        return [flag for f, flag in _WORKLOAD_FLAGS.items() if f not in kv and getattr(self, f) != getattr(defaults, f)]

    def kv_only(self, environ: Mapping[str, str]) -> KvRequest | None:
        """The KV-cost request of ``--model`` alone, for traffic that carries its own items (``--from``,
        ``--trace``): None without a model, or where the model gives no attention shape (a family name).

        Raises:
            MmpoolError: ``--kv-cache-dtype``/``--page-size`` where no shape is known, a bad model.
        """
        from mmpool_cli.workload.hf import resolve

        model = None if self.model is None else resolve(self.model, processor_kwargs=engine().processor_kwargs)
        return self._kv(model, environ)

    def _kv(self, model: Any, environ: Mapping[str, str]) -> KvRequest | None:
        from mmpool_cli.engines.sglang.env_vars import vlm_cache_from_env
        from mmpool_cli.workload.kv import KvRequest

        if model is not None and model.kv is not None:
            vlm = vlm_cache_from_env(environ)
            return KvRequest(
                model=model.kv,
                kv_cache_dtype=self.kv_cache_dtype.value,
                page_size=self.page_size,
                vlm_cache_mb=vlm.mb,
                vlm_cache_variable=vlm.variable,
                vlm_cache_raw=vlm.raw,
                vlm_cache_invalid=vlm.invalid,
                qwen3_vl=model.family.name == "qwen3-vl",
            )
        if self.kv_cache_dtype is not KvDtypeChoice.auto or self.page_size != 1:
            raise MmpoolError("--kv-cache-dtype and --page-size need --model PATH (a model directory with config.json)")
        return None


_WORKLOAD_FLAGS = {
    "image": "--image",
    "video": "--video",
    "audio": "--audio",
    "min_pixels": "--min-pixels",
    "max_pixels": "--max-pixels",
    "patch_size": "--patch-size",
    "max_frames": "--max-frames",
    "pan_and_scan": "--pan-and-scan",
    "kv_cache_dtype": "--kv-cache-dtype",
    "page_size": "--page-size",
}

_WORKLOAD_DECLARATIONS: dict[str, Any] = {
    "model": Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="NAME|PATH",
            help="A model family (qwen2-vl, qwen2.5-vl, qwen3-vl, gemma3, llama4, kimi-k2.5, internvl, "
            "llava-onevision, minicpm-v, kimi-vl, whisper), a local model directory or its config.json, or a "
            "hub id in the local Hugging Face cache (never downloaded).",
        ),
    ],
    "image": Annotated[
        list[str] | None, typer.Option("--image", metavar="WxH", help="One image of a request; repeat per image.")
    ],
    "video": Annotated[
        list[str] | None,
        typer.Option(
            "--video",
            metavar="WxH:SECONDS:FPS",
            help=(
                "One video of a request: frame size, length and source frame rate, e.g. 1920x1080:30:30 "
                "(⌈SECONDS × FPS⌉ frames), or WxH:FRAMES@FPS, e.g. 1920x1080:180@30000/1001."
            ),
        ),
    ],
    "audio": Annotated[
        list[str] | None, typer.Option("--audio", metavar="SECONDS", help="One audio clip of a request.")
    ],
    "min_pixels": Annotated[
        int | None,
        typer.Option(
            "--min-pixels", metavar="PIXELS", min=1, help="Qwen image processor min_pixels (overrides the model's)."
        ),
    ],
    "max_pixels": Annotated[
        int | None,
        typer.Option(
            "--max-pixels", metavar="PIXELS", min=1, help="Qwen image processor max_pixels (overrides the model's)."
        ),
    ],
    "patch_size": Annotated[
        int | None, typer.Option("--patch-size", metavar="PX", min=1, help="Vision patch size (Qwen, Kimi-K2.5).")
    ],
    "max_frames": Annotated[
        int | None,
        typer.Option("--max-frames", metavar="N", min=2, help="Most video frames SGLang samples (Qwen; default 768)."),
    ],
    "pan_and_scan": Annotated[bool, typer.Option("--pan-and-scan", help="Gemma 3: turn pan-and-scan crops on.")],
    "kv_cache_dtype": Annotated[
        KvDtypeChoice, typer.Option("--kv-cache-dtype", help="SGLang's --kv-cache-dtype, for the KV cost.")
    ],
    "page_size": Annotated[
        int, typer.Option("--page-size", metavar="TOKENS", min=1, help="SGLang's --page-size, for the KV cost.")
    ],
}


def with_workload_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the workload flags, declared once here, as one ``workload: WorkloadOptions`` argument."""
    return with_options(WorkloadOptions, _WORKLOAD_DECLARATIONS, "workload")(command)
