"""``mmpool simulate``'s flags: the synthetic traffic's, the run's, and their parsers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

from mmpool_cli.cli.options import OutputFormat, int_arg, size_arg
from mmpool_cli.cli.traffic_options import SourceChoice
from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.pools.curve_range import CurveRange


class ModeChoice(StrEnum):
    eager = "eager"
    deferred = "deferred"


class ResidencyChoice(StrEnum):
    fixed = "fixed"
    exponential = "exponential"


class SearchChoice(StrEnum):
    safe = "safe"
    scan = "scan"
    bisect = "bisect"


class BasisChoice(StrEnum):
    items = "items"
    bytes = "bytes"


OLD_SEARCH_LIMIT = 1_000_000  # the most budgets the limit once counted: a plain number up to it is ambiguous
MAX_SEARCH_EVENTS = 10**15
DEFAULT_SEARCH_LIMIT = "1G"
_SI = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


class ExecutorChoice(StrEnum):
    local = "local"
    ray = "ray"


# simulate's and trace's --ray-address: one declaration, one help
RayAddressOpt = Annotated[
    str | None,
    typer.Option(metavar="ADDRESS", help="--executor ray: the cluster (default: RAY_ADDRESS, else a local Ray)."),
]


def search_limit_arg(text: str) -> tuple[int, str]:
    """``--search-limit``: ``(count, "events")`` for replayed events (``500M``, ``2G``, ``2000000000``), or
    ``(count, "replays")`` for whole replays of the trace (``200x``).

    It once counted budgets simulated: a plain number up to ``OLD_SEARCH_LIMIT`` could mean either,
    and is refused with the two spellings that say which.
    """
    raw = text.strip()
    unit = "replays" if raw[-1:] in ("x", "X") else "events"
    digits = raw[:-1] if unit == "replays" or raw[-1:] in _SI else raw
    scale = _SI.get(raw[-1:], 1) if unit == "events" else 1
    count = int(digits) * scale if digits.isdigit() else 0
    if count < 1 or count > MAX_SEARCH_EVENTS:
        raise MmpoolError(
            f"--search-limit: expected replayed events (e.g. 500M, 2G) or whole replays of the trace "
            f"(e.g. 200x), not {text!r}"
        )
    if unit == "events" and scale == 1 and count <= OLD_SEARCH_LIMIT:
        raise MmpoolError(
            f"--search-limit {raw}: the limit counts replayed events now, not budgets; write {raw}x for "
            f"{raw} whole replays of the trace (what {raw} budgets cost at most), or events with a unit, e.g. {raw}M"
        )
    return count, unit


def rate_arg(flag: str, text: str) -> Fraction:
    """A fallback rate from 0 to 1, exactly as written (``0.01`` or ``1/100``)."""
    try:
        rate = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        rate = None
    if rate is None or not 0 <= rate <= 1:
        raise MmpoolError(f"{flag}: expected a fraction from 0 to 1, e.g. 0.01, not {text!r}")
    return rate


@dataclass(frozen=True)
class TrafficOptions:
    """The flags of a synthetic workload, as given; the field defaults are the flags' defaults."""

    rate: float | None = None
    concurrency: int | None = None
    requests: int = 1000
    duration: str = "1"
    residency: ResidencyChoice = ResidencyChoice.fixed
    mode: ModeChoice = ModeChoice.eager
    ack_delay: str = "0.02"
    hold: str | None = None
    seed: int = 0
    burst: bool = False

    def given(self) -> list[str]:
        """The flags set to something other than their default, as ``--flag-name``."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]


TRAFFIC_DECLARATIONS = {
    "rate": Annotated[float | None, typer.Option(metavar="R", help="Synthetic: requests per second (Poisson).")],
    "concurrency": Annotated[
        int | None, typer.Option(metavar="N", help="Synthetic: clients, each waiting for its request.")
    ],
    "requests": Annotated[int, typer.Option(metavar="N", help="Synthetic: requests in all.")],
    "duration": Annotated[str, typer.Option(metavar="SECONDS", help="Synthetic: mean request time.")],
    "residency": Annotated[ResidencyChoice, typer.Option(help="Synthetic: request times fixed or exponential.")],
    "mode": Annotated[
        ModeChoice, typer.Option(help="Synthetic: ack on receipt (eager) or at prefill/request end (deferred).")
    ],
    "ack_delay": Annotated[
        str,
        typer.Option(
            "--ack-delay",
            "--recv-delay",
            metavar="SECONDS",
            help="Eager: arrival to the scheduler's receipt and acknowledgement (one scheduler step).",
        ),
    ],
    "hold": Annotated[
        str | None, typer.Option(metavar="SECONDS", help="Deferred: arrival to acknowledgement (default: the end).")
    ],
    "seed": Annotated[int, typer.Option(metavar="N", help="Synthetic: random seed.")],
    "burst": Annotated[
        bool, typer.Option("--burst", help="Concurrency: every client's first request at t = 0 (the worst case).")
    ],
}


@dataclass(frozen=True)
class RunOptions:
    """What to replay and what to report, beyond the pool, the workload and the traffic."""

    trace: str | None
    smallest_budget: bool
    target_fallback: str
    target_basis: BasisChoice
    search: SearchChoice
    events: bool
    max_events: int
    idle_timeout: float
    output: OutputFormat
    plot: str | None = None
    search_limit: str | None = None  # None: DEFAULT_SEARCH_LIMIT, or --curve's own bound for its mark alone
    executor: ExecutorChoice = ExecutorChoice.local
    ray_address: str | None = None
    # traffic to read (simulate --from, as mmpool trace converts it)
    traffic_from: tuple[str, ...] = ()
    traffic_format: SourceChoice = SourceChoice.auto
    traffic_args: tuple[str, ...] = ()
    dp_encoder: bool = False
    assume_image: str | None = None
    assume_video: str | None = None
    request_time: str = "1"
    curve: str | None = None  # --curve LO:HI as written (":" for a bare --curve)
    curve_points: int | None = None


CURVE_BARE = ":"  # a bare --curve: both ends the trace's own
MAX_CURVE_POINTS = 1024  # simulate.curve.MAX_POINTS: each point replays the whole trace


class CurveCommand(typer.core.TyperCommand):
    """A command whose ``--curve`` may be given bare (the default range) or with ``LO:HI``.

    typer's parser has no option with an optional value, so a bare ``--curve`` (the last argument,
    or one followed by another option, ``_option_like``) is given the value ``:`` before parsing. The value of an
    option that takes one is skipped whatever it looks like (``--trace --curve`` reads a file named
    ``--curve``), and nothing after ``--`` is touched.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        takes_value = {
            name
            for p in self.params
            if isinstance(p, typer.core.TyperOption) and not p.is_flag and not p.count
            for name in p.opts
        }
        out: list[str] = []
        rest = list(args)
        while rest:
            arg = rest.pop(0)
            out.append(arg)
            if arg == "--":
                break
            if arg == "--curve" and (not rest or _option_like(rest[0])):
                out.append(CURVE_BARE)
            elif arg in takes_value and rest:
                out.append(rest.pop(0))
        result: list[str] = super().parse_args(ctx, out + rest)
        return result


def _option_like(word: str) -> bool:
    """Whether the word after a bare ``--curve`` is another option, not its value: ``-1GB:`` (a negative
    bound, refused by the size's own rule) and ``-:`` are values, as ``--curve=-1GB:`` is."""
    return word.startswith("-") and len(word) > 1 and not (word[1].isdigit() or word[1] in ".:")


def curve_arg(text: str) -> tuple[int | None, int | None]:
    """``--curve LO:HI`` as whole MiB (either end may be left out: None), sizes as ``--size`` reads them.

    A bound beyond any GPU, not a whole MiB (SGLang takes the budget in whole MiB) or a range whose
    ends are reversed is a usage error; whether the engine accepts the bounds is the use case's.
    """
    from mmpool_cli.core.bounds import LARGEST_GPU_HBM_BYTES, largest_gpu
    from mmpool_cli.core.excerpt import shorten
    from mmpool_cli.core.units import MiB, format_binary

    flag = f"--curve {shorten(text)!r}"
    lo_text, colon, hi_text = text.partition(":")
    if not colon:
        raise MmpoolError(
            f"--curve: expected LO:HI, e.g. 512MiB:2GiB (either end may be left out, a bare --curve "
            f"leaves out both), not {shorten(text)!r}"
        )
    ends: list[int | None] = []
    for written in (lo_text.strip(), hi_text.strip()):
        if not written:
            ends.append(None)
            continue
        nbytes = size_arg(flag, written)
        if nbytes > LARGEST_GPU_HBM_BYTES:
            raise MmpoolError(
                f"{flag}: {written} is more than any GPU has ({largest_gpu()}), and every pool lives on the base GPU"
            )
        if nbytes % MiB:
            down, up = nbytes // MiB, -(-nbytes // MiB)
            raise MmpoolError(
                f"{flag}: {written} is {format_binary(nbytes)}, not a whole MiB, and SGLang takes "
                f"the budget in whole MiB (SGLANG_MM_FEATURE_CACHE_MB); write {down}MiB or {up}MiB"
            )
        ends.append(nbytes // MiB)
    lo, hi = ends
    if lo is not None and hi is not None and lo > hi:
        raise MmpoolError(
            f"{flag}: the lower bound is above the upper one; write --curve {hi_text.strip()}:{lo_text.strip()}"
        )
    return lo, hi


def curve_range(o: RunOptions) -> CurveRange | None:
    """``--curve`` and ``--curve-points`` as the use case takes them (None: no curve)."""
    from mmpool_cli.core.excerpt import shorten
    from mmpool_cli.pools.curve_range import CurveRange

    if o.curve is None:
        if o.curve_points is not None:
            raise MmpoolError("--curve-points sets the points of --curve; add --curve")
        return None
    lo, hi = curve_arg(o.curve)
    if o.curve_points is None:
        return CurveRange(lo, hi, shorten(o.curve))
    return CurveRange(lo, hi, shorten(o.curve), curve_points_arg(o.curve_points))


def curve_points_arg(points: int) -> int:
    """``--curve-points``: from 2 to ``MAX_CURVE_POINTS`` budgets."""
    if not 2 <= points <= MAX_CURVE_POINTS:
        raise MmpoolError(
            f"--curve-points: expected 2 to {MAX_CURVE_POINTS} budgets (each replays the whole traffic), not {points}"
        )
    return points


# The declarations of --curve and --curve-points (int_arg: a huge number is a usage error, not a traceback)
CurveOpt = Annotated[
    str | None,
    typer.Option(
        "--curve",
        metavar="[LO:HI]",
        help="The pool's curve: fallback and KV tokens at whole-MiB budgets from LO to HI (default: from the "
        "largest feature's need to the budget at which no alloc can miss), with --smallest-budget's answer "
        "marked (its search runs too, from the curve's replays; its proof bounded: --search-limit).",
    ),
]
CurvePointsOpt = Annotated[
    int | None,
    typer.Option(
        "--curve-points",
        metavar="N",
        parser=int_arg,
        help=f"--curve: how many budgets, spread evenly (default 64, at most {MAX_CURVE_POINTS}).",
    ),
]
