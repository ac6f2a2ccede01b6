"""OpenAI request bodies -> the image items vLLM's caches see, keyed and sized as vLLM 0.34 would.

vLLM loads an ``image_url`` as a ``data:`` URL, an http(s) URL or a ``file:`` URL and refuses
anything else ("The URL must be either a HTTP, data or file URL.", ``multimodal/media/connector.py:381-427``);
it decodes with Pillow and applies the EXIF orientation (``multimodal/image.py:79``). Its cache key
is a hash of the decoded image: mmpool keys a ``data:`` URL by a digest of its text and an http(s)
or ``file:`` URL by the URL, so the same bytes sent twice hit, as in vLLM; the same picture sent in
two different encodings is two items here (vLLM would hash the pixels to one). A content part's
``uuid`` (which vLLM uses as the key instead) is not read.

Videos and audio are not replayed (counted and said). Pure core: standard library only.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mmpool_cli.core.words import count
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic import openai
from mmpool_cli.inputs.traffic.images import ImageError, probe_base64
from mmpool_cli.inputs.traffic.model import Summary
from mmpool_cli.inputs.traffic.prompts import Prompt
from mmpool_cli.inputs.traffic.refs import Decode, Sized, measure

DECODE = Decode(gpu_jpeg=False, exif_transpose=True)
MAX_SHOWN = 5


class CacheTrafficError(MmpoolError):
    """Traffic the caches cannot be replayed from (no image at all, or lines that are not bodies)."""


@dataclass
class ImageTraffic:
    """The requests as their images' keys, each key's (width, height), and what was left out."""

    files: list[str]
    requests: list[list[str]] = field(default_factory=list)
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    # items known by their pixel bytes instead (a trace's allocs: the float32 pixel_values SGLang pools)
    pixel_bytes: dict[str, int] = field(default_factory=dict)
    bodies: int = 0
    not_replayed: Counter[str] = field(default_factory=Counter)  # reason -> items
    refused: list[str] = field(default_factory=list)  # where: a request vLLM fails
    prompts: list[Prompt | None] = field(default_factory=list)  # each request's prompt, where the bodies carry it
    # the video items, not replayed through the caches: (reference, the end of a cut string, where)
    videos: list[tuple[str, str | None, str]] = field(default_factory=list)

    @property
    def images(self) -> int:
        return sum(len(r) for r in self.requests)

    @property
    def distinct(self) -> int:
        return len(self.dims) + len(self.pixel_bytes)


def _image(ref: str, assume: tuple[int, int] | None) -> tuple[str, int, int] | str:
    """(key, width, height) of one image reference, or why vLLM fails the request."""
    if ref[:5].lower() == "data:":
        head, sep, payload = ref.partition(",")
        if not sep:
            return "a data: URL without a comma"
        try:
            header = probe_base64(payload)
        except ImageError as e:
            return f"not an image vLLM can decode ({e})"
        w, h = (header.height, header.width) if header.swaps else (header.width, header.height)
        return "data:" + hashlib.sha256(payload.encode()).hexdigest(), w, h
    if ref.lower().startswith(("http://", "https://")):
        if assume is None:
            return "an http(s) URL cannot be measured offline (mmpool never fetches one); give --assume-image WxH"
        return "url:" + ref, assume[0], assume[1]
    if ref.lower().startswith("file:"):
        got = measure(ref, DECODE)
        if not isinstance(got, Sized):
            return got.reason
        return "url:" + ref, got.width, got.height
    return "vLLM refuses it: 'The URL must be either a HTTP, data or file URL.' (send data:image/...;base64,...)"


def read(paths: Sequence[str], assume: tuple[int, int] | None = None) -> ImageTraffic:
    """The image requests of the body logs ``paths``, in their order.

    Raises:
        CacheTrafficError: a line that is not a body, an image vLLM would fail on, or no image at all.
    """
    out = ImageTraffic(list(paths))
    bad: list[str] = []
    for path in paths:
        for got in openai.read(path, Summary("openai", [path])):
            if isinstance(got, tuple):
                bad.append(f"{got[0]}: {got[1]}")
                continue
            out.bodies += 1
            keys: list[str] = []
            for item in got.items:
                if item.kind != "image":
                    out.not_replayed[f"{item.kind} items"] += 1
                    if item.kind == "video":
                        out.videos.append((item.ref, item.tail, got.where))
                    continue
                one = _image(item.ref, assume)
                if isinstance(one, str):
                    bad.append(f"{got.where}: {one}")
                    continue
                key, w, h = one
                out.dims.setdefault(key, (w, h))
                keys.append(key)
            if keys:
                out.requests.append(keys)
                out.prompts.append(got.prompt)
    if bad:
        more = f" (and {len(bad) - MAX_SHOWN} more)" if len(bad) > MAX_SHOWN else ""
        raise CacheTrafficError("; ".join(bad[:MAX_SHOWN]) + more)
    if not out.requests:
        raise CacheTrafficError(
            f"{', '.join(paths)}: no request carries image data ({count(out.bodies, 'body', 'bodies')} read, no "
            "image_url part): log the bodies with their image_url parts (data: or http(s) URLs)"
        )
    return out


def from_items(items: Iterable[tuple[str, str, str | None, int]], source: str) -> ImageTraffic:
    """The image requests of a trace's items, each ``(request, kind, key, pixel bytes)`` in order (the
    items of a request together): an item without a key is one of its own; videos are not replayed.

    Raises:
        CacheTrafficError: no image item.
    """
    out = ImageTraffic([source])
    current: str | None = None
    for n, (request, kind, key, nbytes) in enumerate(items):
        if kind != "image":
            out.not_replayed[f"{kind} items"] += 1
            continue
        if request != current or not out.requests:
            out.requests.append([])
            out.bodies += 1
            current = request
        name = f"trace:{key}" if key is not None else f"unkeyed:{n}"
        out.pixel_bytes.setdefault(name, nbytes)
        out.requests[-1].append(name)
    if not out.requests:
        raise CacheTrafficError(f"{source}: no image item in the trace; nothing to replay")
    return out
