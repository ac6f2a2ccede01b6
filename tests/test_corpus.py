"""Every invocation of the behaviour corpus (scripts/corpus.py) prints what it printed when recorded.

The corpus pins stdout, stderr and the exit code of each case byte for byte; re-record it with
``python scripts/corpus.py --record`` only for a change of output that is meant.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import corpus  # noqa: E402

CASES = corpus.cases()
RECORDED = corpus.load()


def test_corpus_is_large_and_recorded_as_listed() -> None:
    assert len(CASES) >= 150
    assert sorted(RECORDED) == sorted(case["name"] for case in CASES)
    assert {case["exit"] for case in RECORDED.values()} >= {0, 1, 2, 3}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_case_unchanged(case: dict, request: pytest.FixtureRequest) -> None:
    if case["argv"][:1] == ["probe"] and request.config.getoption("--run-gpu"):
        pytest.skip("recorded on a machine without a GPU")
    expected = RECORDED[case["name"]]
    got = corpus.run_case(case)
    assert (got["exit"], got["stderr"], got["stdout"]) == (expected["exit"], expected["stderr"], expected["stdout"])
