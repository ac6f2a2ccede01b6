"""The requests ``python -m sglang.bench_serving --dataset-name image`` sends (SGLang 0.5.23).

``benchmark/datasets/image.py``: ``--image-count`` images per request, or uniform 1..N with
``--random-image-count`` (:269-277); ``--image-resolution`` presets ``4k`` (3840x2160), ``1080p``
(the default), ``720p``, ``360p``, custom sizes HEIGHTxWIDTH, or
``random:<min_h>x<min_w>-<max_h>x<max_w>``, each side uniform per image (:73-127, :300-305);
``--image-format`` jpeg (decoded by nvJPEG at its stored size) or png. Arrivals as
bench_serving's ``--request-rate`` (``inf``: all at t = 0, else exponential gaps) and
``--max-concurrency``. Counts and sizes are drawn by mmpool's own seeded generator from the same
distributions, not numpy's stream. Pure core: standard library only.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
from dataclasses import dataclass

from mmpool_cli.engines.sglang.versions import NEWEST
from mmpool_cli.inputs.traffic.model import NS_PER_S, TrafficError

PRESETS = {"4k": (3840, 2160), "1080p": (1920, 1080), "720p": (1280, 720), "360p": (640, 360)}
MAX_PROMPTS = 10_000_000
MAX_IMAGES = 4096


@dataclass(frozen=True)
class BenchRequest:
    index: int
    t_ns: int
    images: list[tuple[int, int]]  # (width, height)


@dataclass(frozen=True)
class Bench:
    requests: list[BenchRequest]
    not_modelled: list[str]  # the arguments given that change nothing mmpool models
    notes: list[str]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[no-untyped-def]
        raise TrafficError(f"bench-serving arguments: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="bench_serving", add_help=False, allow_abbrev=False)
    p.add_argument("--dataset-name", default="image")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--image-count", type=int, default=1)
    p.add_argument("--random-image-count", action="store_true")
    p.add_argument("--image-resolution", default="1080p")
    p.add_argument("--image-format", default="jpeg")
    p.add_argument("--request-rate", default="inf")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    return p


def _size(text: str) -> tuple[int, int]:
    if text in PRESETS:
        return PRESETS[text]
    parts = text.strip().lower().split("x")
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[0]) > 0 and int(parts[1]) > 0:
        return int(parts[1]), int(parts[0])  # HEIGHTxWIDTH
    raise TrafficError(
        f"--image-resolution {text[:40]!r}: choose 4k, 1080p, 720p, 360p, HEIGHTxWIDTH (e.g. 1080x1920) "
        "or random:<min_h>x<min_w>-<max_h>x<max_w>"
    )


def requests(argv: list[str], duration_ns: int) -> Bench:
    """The requests of ``argv``; ``duration_ns`` is each request's time, for ``--max-concurrency``.

    Raises:
        TrafficError: a value bench_serving would refuse, or a dataset other than ``image``.
    """
    args, rest = _parser().parse_known_args(argv)
    not_modelled = [a for a in rest if a.startswith("--")]
    if "video" in args.dataset_name.lower():
        raise TrafficError(
            f"--dataset-name {args.dataset_name}: bench_serving in SGLang {NEWEST} has no video dataset "
            "(benchmark/datasets/ holds none, and no dataset sends videos); log the server's requests "
            "and read them with --from-format sglang-log"
        )
    if args.dataset_name != "image":
        raise TrafficError(f"--dataset-name {args.dataset_name}: mmpool models bench_serving's image dataset only")
    if not 1 <= args.num_prompts <= MAX_PROMPTS:
        raise TrafficError(f"--num-prompts: expected 1 to {MAX_PROMPTS}, not {args.num_prompts}")
    if not 1 <= args.image_count <= MAX_IMAGES:
        raise TrafficError(f"--image-count: expected 1 to {MAX_IMAGES}, not {args.image_count}")
    if args.image_format not in ("jpeg", "png"):
        raise TrafficError(f"--image-format {args.image_format}: bench_serving writes jpeg or png")
    res = args.image_resolution.strip()
    if res.lower().startswith("random:"):
        bounds = res[len("random:") :].split("-", maxsplit=1)
        if len(bounds) != 2:
            raise TrafficError(
                "--image-resolution random:<min_h>x<min_w>-<max_h>x<max_w>, e.g. random:256x256-1024x1024"
            )
        (w0, h0), (w1, h1) = _size(bounds[0]), _size(bounds[1])
        if w0 > w1 or h0 > h1:
            raise TrafficError("--image-resolution: the random minimum exceeds the maximum")
    else:
        w0, h0 = w1, h1 = _size(args.image_resolution)
    try:
        rate = float(args.request_rate)
    except ValueError:
        raise TrafficError(f"--request-rate {args.request_rate!r}: a number of requests per second or inf") from None
    if not rate > 0 or math.isnan(rate):
        raise TrafficError(f"--request-rate {args.request_rate}: must be above 0 (or inf)")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise TrafficError(f"--max-concurrency: must be at least 1, not {args.max_concurrency}")
    rng = random.Random(args.seed)
    counts = [
        rng.randint(1, args.image_count) if args.random_image_count else args.image_count
        for _ in range(args.num_prompts)
    ]
    gaps = [0 if math.isinf(rate) else round(rng.expovariate(rate) * NS_PER_S) for _ in range(args.num_prompts)]
    out: list[BenchRequest] = []
    t = 0
    slots: list[int] = []  # end times of the requests in flight, with --max-concurrency
    for i, n in enumerate(counts):
        start = t
        if args.max_concurrency is not None:
            if len(slots) >= args.max_concurrency:
                start = max(start, heapq.heappop(slots))
            heapq.heappush(slots, start + duration_ns)
        images = [(rng.randint(w0, w1), rng.randint(h0, h1)) for _ in range(n)]
        out.append(BenchRequest(i + 1, start, images))
        t += gaps[i]
    notes = [
        "image counts and sizes drawn by mmpool's seeded generator from bench_serving's distributions "
        "(the same laws, not numpy's stream)",
        "arrivals: all at t = 0" if math.isinf(rate) else f"arrivals: Poisson at {rate:g} requests per second",
    ]
    if args.max_concurrency is not None:
        notes.append(f"--max-concurrency {args.max_concurrency}: each request lasts --request-time")
    return Bench(out, not_modelled, notes)
