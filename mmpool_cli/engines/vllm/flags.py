"""Every option of ``vllm serve``'s parser in each known vLLM release.

argparse resolves an abbreviated option (``allow_abbrev=True``) against all of them and refuses an
option that is none of them (``unrecognized arguments``), so mmpool needs the full list of the
release in use. ``data/flags.json`` is generated from each wheel's own parser by
``scripts/gen_vllm_tables.py``: one row per flag, with the releases that have it and the change
points of its attributes. Read on first use only. Pure core: standard library only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from mmpool_cli.core.flag_history import FlagHistory
from mmpool_cli.engines.vllm.versions import DATA_DIR, NEWEST


@dataclass(frozen=True)
class Option:
    """One option of a release's parser, as argparse holds it."""

    strings: tuple[str, ...]
    dest: str
    action: str
    nargs: Any
    type: str | None
    choices: tuple[str, ...] | None

    @property
    def takes_value(self) -> bool:
        return bool(self.nargs != 0)

    @property
    def label(self) -> str:
        """How argparse names the option in its errors: ``--data-parallel-size/-dp``."""
        return "/".join(self.strings)


@dataclass(frozen=True)
class FlagTable:
    """One release's ``vllm serve`` options."""

    version: str
    by_string: dict[str, Option]
    sorted_long: tuple[str, ...]  # the ``--`` ones in order, for prefix look-ups

    def missing(self, option: str) -> str | None:
        """For an option this release lacks but another has: which releases have it, as a clause."""
        have = _releases_with().get(option)
        if not have:
            return None
        order = _order()
        at = order[self.version]
        older = [v for v in have if order[v] < at]
        newer = [v for v in have if order[v] > at]
        span = f" (vLLM {', '.join(have)} {'has' if len(have) == 1 else 'have'} it)"
        if older and not newer:
            return f"was removed after {older[-1]}" + span
        if newer and not older:
            return f"is new in {newer[0]}" + span
        return "is not in this release" + span

    def by_dest(self, dest: str) -> Option | None:
        """The option that sets ``dest`` in this release, if any."""
        return next((o for o in self.by_string.values() if o.dest == dest), None)


_HISTORY = FlagHistory(DATA_DIR / "flags.json")
_data, _versions, _order = _HISTORY.data, _HISTORY.versions, _HISTORY.order
_at, _present, _releases_with = _HISTORY.at, _HISTORY.present, _HISTORY.releases_with


@functools.cache
def table(version: str = NEWEST) -> FlagTable:
    """The options of ``version`` (one of ``versions.known()``)."""
    by_string: dict[str, Option] = {}
    for r in _data()["flags"]:
        if not _present(r, version):
            continue
        choices = _at(r["choices"], version)
        opt = Option(
            strings=tuple(_at(r["options"], version)),
            dest=_at(r["dest"], version),
            action=_at(r["action"], version),
            nargs=_at(r["nargs"], version),
            type=_at(r["type"], version),
            choices=None if choices is None else tuple(str(c) for c in choices),
        )
        for s in opt.strings:
            by_string[s] = opt
    help_opt = Option(("-h", "--help"), "help", "_HelpAction", 0, None, None)
    by_string.setdefault("-h", help_opt)
    by_string.setdefault("--help", help_opt)
    return FlagTable(version, by_string, tuple(sorted(s for s in by_string if s.startswith("--"))))
