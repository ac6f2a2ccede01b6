"""How trace and simulate --from read a fleet's files: in order, with a progress line on a terminal only."""

from __future__ import annotations

import sys

from mmpool_cli.cli.fleet import file_reader
from mmpool_cli.cli.simulate_options import ExecutorChoice

NAMES = {"command": "trace", "job": "the trace", "unfinished": "nothing was written"}


def test_a_terminal_is_shown_the_files_read_and_a_pipe_nothing(monkeypatch, capsys) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with file_reader(ExecutorChoice.local, None, 2, **NAMES) as read:
        assert list(read(str.upper, ["a", "b"])) == ["A", "B"]  # in the files' order
    assert "reading 2 files" in capsys.readouterr().err
    with file_reader(ExecutorChoice.local, None, 0, **NAMES) as read:  # one file, or --format json: no line
        assert list(read(str.upper, ["a"])) == ["A"]
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with file_reader(ExecutorChoice.local, None, 2, **NAMES) as read:
        list(read(str.upper, ["a", "b"]))
    assert capsys.readouterr().err == ""  # nor when stderr is piped


def test_simulate_from_without_ray_is_one_line_naming_the_extra(run_line, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    log = tmp_path / "a.log"
    log.write_text("x\n")
    result = run_line(["mmpool", "simulate", "--model", "qwen2.5-vl", "--from", str(log), "--executor", "ray"])
    assert result.exit_code == 2
    assert result.stderr.startswith("mmpool: error: --executor ray needs Ray: pip install 'mmpool[ray]'")
