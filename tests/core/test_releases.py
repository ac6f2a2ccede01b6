from __future__ import annotations

import pytest

from mmpool_cli.core import origin, releases
from mmpool_cli.errors import MmpoolError


def test_a_known_release_is_found_with_or_without_a_leading_v() -> None:
    table = {"0.34.0": "rules"}
    assert releases.lookup(table, "v0.34.0 ", "vLLM", "scripts/gen_vllm_tables.py") == "rules"
    assert releases.supported_range(("0.30.0", "0.34.0")) == "0.30.0 … 0.34.0 (2 releases)"


@pytest.mark.parametrize(("engine", "generator"), [("SGLang", "scripts/gen_sglang_tables.py"), ("vLLM", "scripts/gen_vllm_tables.py")])
def test_an_unknown_release_names_the_generator_only_where_it_exists(
    monkeypatch: pytest.MonkeyPatch, engine: str, generator: str
) -> None:
    with pytest.raises(MmpoolError, match=f"{generator} adds newer ones"):
        releases.lookup({"1.0": 1}, "9.9", engine, generator)  # this checkout has both scripts
    monkeypatch.setattr(origin, "script", lambda _relative: None)  # as from a wheel
    with pytest.raises(MmpoolError, match=f"a newer {engine} release needs a newer mmpool") as e:
        releases.lookup({"1.0": 1}, "x" * 100, engine, generator)
    assert "x" * 41 not in str(e.value)
