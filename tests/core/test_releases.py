from __future__ import annotations

import pytest

from mmpool_cli.core import origin, releases
from mmpool_cli.errors import MmpoolError


def test_a_known_release_is_found_with_or_without_a_leading_v() -> None:
    table = {"0.34.0": "rules"}
    assert releases.lookup(table, "v0.34.0 ", "vLLM", "scripts/gen_vllm_tables.py") == "rules"
    assert releases.supported_range(("0.30.0", "0.34.0")) == "0.30.0 … 0.34.0 (2 releases)"


@pytest.mark.parametrize(
    ("engine", "generator"), [("SGLang", "scripts/gen_sglang_tables.py"), ("vLLM", "scripts/gen_vllm_tables.py")]
)
def test_an_unknown_release_names_the_generator_only_where_it_exists(
    monkeypatch: pytest.MonkeyPatch, engine: str, generator: str
) -> None:
    with pytest.raises(MmpoolError, match=f"{generator} adds newer ones"):
        releases.lookup({"1.0": 1}, "9.9", engine, generator)  # this checkout has both scripts
    monkeypatch.setattr(origin, "script", lambda _relative: None)  # as from a wheel
    with pytest.raises(MmpoolError, match=f"a newer {engine} release needs a newer mmpool") as e:
        releases.lookup({"1.0": 1}, "x" * 100, engine, generator)
    assert "x" * 41 not in str(e.value)


def test_the_release_is_chosen_by_flag_then_environment_then_installed_then_newest() -> None:
    table = {"1.0": "one", "2.0": "two"}

    def pick(flag: str | None, environ: dict[str, str], installed: str | None) -> tuple[str, str]:
        find = lambda v: releases.lookup(table, v, "X", "scripts/none.py")  # noqa: E731
        return releases.choose(find, "two", flag, "--x-version", environ, "MMPOOL_X", installed, "x", "1.0 … 2.0")

    assert pick("1.0", {"MMPOOL_X": "2.0"}, "2.0") == ("one", "--x-version")
    assert pick(None, {"MMPOOL_X": "1.0"}, "2.0") == ("one", "MMPOOL_X")
    assert pick(None, {}, "1.0") == ("one", "installed")
    assert pick(None, {}, None) == ("two", "newest")
    with pytest.raises(MmpoolError, match=r"^MMPOOL_X: X '9' is not a release"):
        pick(None, {"MMPOOL_X": "9"}, None)
    with pytest.raises(
        MmpoolError,
        match=r"the installed x '9' is not a release mmpool knows \(1.0 … 2.0\): pass --x-version or set MMPOOL_X",
    ):
        pick(None, {}, "9")
