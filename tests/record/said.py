"""What ``mmpool record`` says of its own once the command ended: the last line on stderr, what it recorded."""

from __future__ import annotations

RECORDED = "mmpool record: recorded in "
NOTHING = "mmpool record: warning: nothing was recorded in "


def own_stderr(stderr: str, *, nothing: bool = False) -> str:
    """The recorded command's own stderr: the line ``mmpool record`` adds last (what it recorded; with ``nothing``,
    its warning that nothing was) checked there, and taken off."""
    head, _, last = stderr.rstrip("\n").rpartition("\n")
    said = NOTHING if nothing else RECORDED
    assert last.startswith(said) and said not in head, stderr
    return head + "\n" if head else ""
