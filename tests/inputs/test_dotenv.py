"""--env-file files (dotenv style) and --env arguments, assembled over the process environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmpool_cli.inputs.dotenv import EnvArgError, assemble, parse_env_arg, read_env_file


def test_env_file(tmp_path: Path) -> None:
    path = tmp_path / "e.env"
    path.write_text("A=1\nexport B='two words'\n# c\n\nC=\"x\" \nD=3 # note\nbad line\n")
    values, findings = read_env_file(str(path))
    assert values == {"A": "1", "B": "two words", "C": "x", "D": "3"}
    assert [(f.code, f.location) for f in findings] == [("env-file-syntax", f"{path}:7:1")]
    assert read_env_file(str(tmp_path / "none.env"))[1][0].code == "file-missing"


def test_assemble_order(tmp_path: Path) -> None:
    path = tmp_path / "e.env"
    path.write_text("A=file\nB=file\n")
    environ, _ = assemble({"A": "process", "C": "process"}, [str(path)], ["B=flag"])
    assert environ == {"A": "file", "B": "flag", "C": "process"}
    with pytest.raises(EnvArgError):
        parse_env_arg("=x")
