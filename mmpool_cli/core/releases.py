"""What every engine's table of releases shares: the known range, and a lookup whose miss says what to do."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
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


def installed_version(distribution: str) -> str | None:
    """The version of ``distribution`` on ``sys.path``, from its metadata; None without one.

    A directory scan first, so that mmpool does not pay for ``importlib.metadata`` where the
    engine is not installed; the engine itself is never imported.
    """
    prefix = distribution.lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        if any(n.lower().startswith(prefix) and n.endswith((".dist-info", ".egg-info")) for n in names):
            break
    else:
        return None
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def choose(
    release: Callable[[str], T],
    newest: T,
    flag: str | None,
    option: str,
    environ: Mapping[str, str],
    env_var: str,
    installed: str | None,
    distribution: str,
    supported: str,
) -> tuple[T, str]:
    """The release to plan for and how it was chosen: ``option``, then ``env_var``, then the
    ``installed`` version of ``distribution``, then ``newest``; each miss is a usage error saying which."""
    if flag:
        return release(flag), option
    if environ.get(env_var):
        try:
            return release(environ[env_var]), env_var
        except MmpoolError as e:
            raise MmpoolError(f"{env_var}: {e}") from None
    if installed is not None:
        try:
            return release(installed), "installed"
        except MmpoolError:
            raise MmpoolError(
                f"the installed {distribution} {installed[:40]!r} is not a release mmpool knows ({supported}): "
                f"pass {option} or set {env_var}"
            ) from None
    return newest, "newest"
