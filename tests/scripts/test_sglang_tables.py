"""The generator's merge of per-release parser dumps, and its refusal of source shapes it does not know."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import sglang_rules  # noqa: E402
import sglang_tables  # noqa: E402


def opt(*options: str, dest: str = "", action: str = "_StoreAction", default=None, nargs=None, choices=None) -> dict:
    return {
        "options": list(options),
        "dest": dest or options[0][2:].replace("-", "_"),
        "action": action,
        "nargs": nargs,
        "type": "builtins.int" if nargs is None else None,
        "choices": choices,
        "default": default,
        "required": False,
        "is_store": action == "_StoreAction",
        "is_store_true": action == "_StoreTrueAction",
    }


DUMPS = {
    "1.0": {"options": [opt("--tp-size", dest="tensor_parallel_size", default=1), opt("--old", nargs=0)]},
    "1.1": {"options": [opt("--tp-size", "--tensor-parallel-size", dest="tp_size", default=1)]},
    "1.2": {
        "options": [
            opt("--tensor-parallel-size", "--tp-size", dest="tp_size", default=2),
            opt("--on", "--no-on", action="BooleanOptionalAction", nargs=0),
        ]
    },
}


def test_rows_match_flags_by_any_option_string_and_keep_change_points() -> None:
    rows = {r["flag"]: r for r in sglang_tables.flag_rows(DUMPS)}
    assert set(rows) == {"--tensor-parallel-size", "--old", "--on"}
    tp = rows["--tensor-parallel-size"]
    assert tp["spans"] == [["1.0", "1.2"]]
    assert tp["dest"] == [["1.0", "tensor_parallel_size"], ["1.1", "tp_size"]]
    assert tp["default"] == [["1.0", 1], ["1.2", 2]]
    assert rows["--old"]["spans"] == [["1.0", "1.0"]]
    assert rows["--on"]["spans"] == [["1.2", "1.2"]]


def test_gaps_make_separate_spans() -> None:
    dumps = {"1.0": {"options": [opt("--x")]}, "1.1": {"options": []}, "1.2": {"options": [opt("--x")]}}
    [row] = sglang_tables.flag_rows(dumps)
    assert row["spans"] == [["1.0", "1.0"], ["1.2", "1.2"]]


def test_config_keys_refused_by_dest_or_by_every_spelling() -> None:
    dump = DUMPS["1.2"]
    assert sglang_tables.config_unsupported(dump, "dest") == {"on": "BooleanOptionalAction"}
    assert sglang_tables.config_unsupported(dump, "spellings") == {
        "no_on": "BooleanOptionalAction",
        "on": "BooleanOptionalAction",
    }


def test_probes_give_each_option_string_a_value_it_takes() -> None:
    probes = sglang_tables.probe_argvs(DUMPS)
    assert ["--model-path", "m", "--tp-size", "1"] in probes
    assert ["--model-path", "m", "--old"] in probes


def test_an_unknown_split_shape_stops_the_generator(tmp_path: Path) -> None:
    proc = tmp_path / "sglang" / "srt" / "multimodal" / "processors"
    proc.mkdir(parents=True)
    (proc / "base_processor.py").write_text(
        "class P:\n"
        "    def __init__(self):\n"
        "        per_worker_pool_size = MM_FEATURE_CACHE_SIZE // 3\n"
        "        self.pool = MmItemMemoryPool(per_worker_pool_size, 0.05)\n"
    )
    with pytest.raises(sglang_rules.UnknownShape, match=r"SGLang 9\.9.*split MM_FEATURE_CACHE_SIZE // 3"):
        sglang_rules._split_facts("9.9", tmp_path)
