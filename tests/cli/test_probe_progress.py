"""The probe's progress: a spinner on a terminal that takes escapes; plain lines or nothing elsewhere."""

from __future__ import annotations

import io

import pytest

from mmpool_cli.cli import probe as probe_cli


class Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _progress(monkeypatch: pytest.MonkeyPatch, tty: bool) -> str:
    err = Terminal(tty)
    monkeypatch.setattr(probe_cli.sys, "stderr", err)

    def work(note):
        note("reading the GPUs through NVML")
        note("allocating 4 × 256 MiB")
        return 7

    assert probe_cli._with_progress(work, show=True) == 7
    return err.getvalue()


@pytest.mark.parametrize(("variable", "value"), [("NO_COLOR", "1"), ("TERM", "dumb")])
def test_no_cursor_escapes_where_the_terminal_should_not_get_them(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    shown = _progress(monkeypatch, tty=True)
    assert "\x1b" not in shown
    assert "\r" not in shown
    assert shown.splitlines() == ["mmpool probe: reading the GPUs through NVML", "mmpool probe: allocating 4 × 256 MiB"]


def test_nothing_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert _progress(monkeypatch, tty=False) == ""
