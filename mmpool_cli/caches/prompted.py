"""What both prefix replays (``radix``, ``blocks``) read of a request: its prompt, its output and its
images' spans. ``prefix.PrefixRequest`` is the one kind the callers build. Standard library only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class PrefixRequest(Protocol):
    """What the replay reads of ``prefix.PrefixRequest``."""

    @property
    def tokens(self) -> Sequence[int]: ...
    @property
    def output(self) -> Sequence[int]: ...
    @property
    def extra(self) -> Sequence[tuple[int, int, str]]: ...
