from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmpool_cli.core.flag_history import FlagHistory


def test_a_flag_history_answers_per_release_from_its_change_points(tmp_path: Path) -> None:
    path = tmp_path / "flags.json"
    rows = [
        {"spans": [["1", "2"], ["4", "4"]], "options": [["1", ["--old"]], ["2", ["--old", "--new"]]]},
        {"spans": [["3", "4"]], "options": [["3", ["--late"]]]},
    ]
    path.write_text(json.dumps({"versions": ["1", "2", "3", "4"], "flags": rows}))
    history = FlagHistory(path)
    assert history.at(rows[0]["options"], "1") == ["--old"]
    assert history.at(rows[0]["options"], "4") == ["--old", "--new"]
    assert [history.present(rows[0], v) for v in "1234"] == [True, True, False, True]
    assert history.releases_with() == {"--old": ["1", "2", "4"], "--new": ["2", "4"], "--late": ["3", "4"]}


def test_nothing_is_read_until_asked(tmp_path: Path) -> None:
    # plan never needs the flags: constructing reads nothing, so a file that does not exist yet
    # is no error, and the first question reads the file as it is then (once)
    path = tmp_path / "flags.json"
    history = FlagHistory(path)
    assert not path.exists()
    path.write_text(json.dumps({"versions": ["1", "2"], "flags": []}))
    assert history.versions() == ["1", "2"]
    path.write_text(json.dumps({"versions": ["9"], "flags": []}))
    assert history.versions() == ["1", "2"]  # read once, on first use
    early = FlagHistory(path)  # an existing file is not read either until asked
    path.write_text(json.dumps({"versions": ["3"], "flags": []}))
    assert early.versions() == ["3"]
    with pytest.raises(FileNotFoundError):
        FlagHistory(tmp_path / "missing.json").versions()
