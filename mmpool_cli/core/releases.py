"""What every engine's table of releases shares: the known range, and a lookup whose miss says what to do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from mmpool_cli.core import origin
from mmpool_cli.errors import MmpoolError

T = TypeVar("T")


def supported_range(names: tuple[str, ...]) -> str:
    """The known releases as text: ``0.5.10 … 0.5.23 (18 releases)``."""
    return f"{names[0]} … {names[-1]} ({len(names)} releases)"


def newer_releases(engine: str, generator: str) -> str:
    """What adds a release of ``engine`` mmpool does not know yet, from where mmpool runs.

    A checkout has the generator script; an installed wheel has not, so it names the upgrade instead.
    """
    script = origin.script(generator)
    return f"{script} adds newer ones" if script else f"a newer {engine} release needs a newer mmpool"


def lookup(table: Mapping[str, T], version: str, engine: str, generator: str) -> T:
    """The entry of ``version`` (a leading ``v`` allowed); an unknown one is a usage error listing the known."""
    found = table.get(version.strip().removeprefix("v"))
    if found is None:
        shown = version if len(version) <= 40 else version[:40] + "…"
        raise MmpoolError(
            f"{engine} {shown!r} is not a release mmpool knows: pick one of {', '.join(table)} "
            f"({newer_releases(engine, generator)})"
        )
    return found
