"""An engine's generated table of command-line flags across its releases, read lazily.

Each row of ``flags.json`` holds the spans of releases that have the flag and change-point lists
(``[[since, value], ...]``) for what changed between them; every engine's table has that shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class FlagHistory:
    """The rows of one ``flags.json``, loaded on first use (``plan`` never needs them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: dict[str, Any] | None = None
        self._order: dict[str, int] | None = None
        self._with: dict[str, list[str]] | None = None

    def data(self) -> dict[str, Any]:
        if self._data is None:
            with open(self.path, encoding="utf-8") as f:
                self._data = json.load(f)
        return self._data

    def versions(self) -> list[str]:
        versions: list[str] = self.data()["versions"]
        return versions

    def order(self) -> dict[str, int]:
        if self._order is None:
            self._order = {v: i for i, v in enumerate(self.versions())}
        return self._order

    def at(self, changes: list[list[Any]], version: str) -> Any:
        """The value a change-point list holds at ``version`` (the last change at or before it)."""
        order = self.order()
        value = None
        for since, v in changes:
            if order[since] > order[version]:
                break
            value = v
        return value

    def present(self, row: dict[str, Any], version: str) -> bool:
        """Whether ``version`` lies in one of the row's spans of releases."""
        order = self.order()
        return any(order[lo] <= order[version] <= order[hi] for lo, hi in row["spans"])

    def releases_with(self) -> dict[str, list[str]]:
        """Each option string and the releases whose parser has it, oldest first."""
        if self._with is None:
            versions, order = self.versions(), self.order()
            have: dict[str, set[int]] = {}
            for row in self.data()["flags"]:
                for lo, hi in row["spans"]:
                    for i in range(order[lo], order[hi] + 1):
                        for option in self.at(row["options"], versions[i]):
                            have.setdefault(option, set()).add(i)
            self._with = {option: [versions[i] for i in sorted(found)] for option, found in have.items()}
        return self._with
