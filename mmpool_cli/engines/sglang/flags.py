"""Every option of SGLang's server parser (``sglang serve``/``launch_server``) in each known release.

argparse resolves an abbreviated option (``allow_abbrev=True``) against all of them, and refuses an
option that is none of them (``unrecognized arguments``), so mmpool needs the full list of the
release in use, not only the pool flags. ``data/flags.json`` is generated from each wheel's own
parser by ``scripts/gen_sglang_tables.py`` (one row per flag with the releases that have it and
where its attributes changed); it is read on first use only, since ``mmpool plan`` never needs it.
Pure core: standard library only.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmpool_cli.core.flag_history import FlagHistory
from mmpool_cli.engines.sglang.versions import DATA_DIR, NEWEST


@dataclass(frozen=True)
class FlagTable:
    """One release's server options."""

    version: str
    options: frozenset[str]  # every option string, ``--help``/``-h`` included
    sorted_long: tuple[str, ...]  # the ``--`` ones in order: prefix look-ups by bisection cost log time
    # ``--config`` keys SGLang's merger refuses ("Unsupported config option ... with action ..."),
    # keyed as the merger keys them, with the action class it names.
    config_unsupported: Mapping[str, str]

    def missing(self, option: str) -> str | None:
        """For an option this release lacks but another has: which releases have it, as a clause.

        ``--keep-mm-feature-on-device`` on 0.5.23 gives "was removed after 0.5.20"; an option of
        newer releases only gives "is new in 0.5.22". None when no known release has it.
        """
        have = _releases_with().get(option)
        if not have:
            return None
        order = _order()
        at = order[self.version]
        older = [v for v in have if order[v] < at]
        newer = [v for v in have if order[v] > at]
        if older and not newer:
            return f"was removed after {older[-1]}" + _span(have)
        if newer and not older:
            return f"is new in {newer[0]}" + _span(have)
        return "is not in this release" + _span(have)

    def choices(self, option: str) -> tuple[str, ...] | None:
        """The values this release's parser allows for ``option``; None when it takes any (or lacks it)."""
        found = row(option)
        if found is None or not _present(found, self.version):
            return None
        values = _at(found["choices"], self.version)
        return None if values is None else tuple(str(v) for v in values)


def _span(have: list[str]) -> str:
    return f" (SGLang {have[0]} … {have[-1]} has it)" if _contiguous(have) else f" (SGLang {', '.join(have)} have it)"


def _contiguous(have: list[str]) -> bool:
    first = _order()[have[0]]
    return _versions()[first : first + len(have)] == have


_HISTORY = FlagHistory(DATA_DIR / "flags.json")
_data, _versions, _order = _HISTORY.data, _HISTORY.versions, _HISTORY.order
_at, _present, _releases_with = _HISTORY.at, _HISTORY.present, _HISTORY.releases_with


@functools.cache
def table(version: str = NEWEST) -> FlagTable:
    """The options of ``version`` (one of ``versions.known()``)."""
    options = {"--help", "-h"}
    for r in _data()["flags"]:
        if _present(r, version):
            options.update(_at(r["options"], version))
    return FlagTable(
        version=version,
        options=frozenset(options),
        sorted_long=tuple(sorted(o for o in options if o.startswith("--"))),
        config_unsupported=dict(_data()["config_unsupported"][version]),
    )


def row(option: str) -> dict[str, Any] | None:
    """The generated row of the flag ``option`` belongs to in any release (its history)."""
    for r in _data()["flags"]:
        if any(option in strings for _, strings in r["options"]):
            return dict(r)
    return None
