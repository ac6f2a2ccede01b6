"""Every invocation of the behaviour corpus (scripts/corpus.py) prints what it printed when recorded.

The corpus pins stdout, stderr and the exit code of each case byte for byte; re-record it with
``python scripts/corpus.py --record`` only for a change of output that is meant.
"""

from __future__ import annotations

import json
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


# Cases that print exactly what another prints on purpose: an environment twin of a flag
# (MMPOOL_FORMAT, MMPOOL_STRICT, MMPOOL_QUIET, MMPOOL_EXIT_ZERO) gives what the flag gives, and a
# --config file gives the plan the same flags give on the command line. Any other pair of cases
# with one output proves nothing about one of their names.
INTENTIONALLY_EQUAL = [
    {"plan-defaults-json", "plan-env-format-json"},
    {"validate-example-invalid-mmpool.yaml-sarif", "validate-env-format-sarif"},
    {"validate-strict", "validate-env-strict"},
    {"validate-quiet", "validate-env-quiet"},
    {"validate-exit-zero", "validate-env-exit-zero"},
    {"check-serve", "check-config"},
]


def test_no_two_cases_print_the_same_unless_meant_to() -> None:
    by_output: dict[tuple[object, ...], set[str]] = {}
    for name, case in RECORDED.items():
        key = (case["exit"], json.dumps(case["stdout"]), json.dumps(case["stderr"]))
        by_output.setdefault(key, set()).add(name)
    same = [names for names in by_output.values() if len(names) > 1]
    unexpected = [sorted(names) for names in same if names not in INTENTIONALLY_EQUAL]
    assert unexpected == [], "these cases print the same: make each exercise what it names, or list it"
    assert sorted(map(sorted, INTENTIONALLY_EQUAL)) == sorted(map(sorted, same)), "a listed pair now differs"


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_case_unchanged(case: dict, request: pytest.FixtureRequest) -> None:
    if case["argv"][:1] == ["probe"] and request.config.getoption("--run-gpu"):
        pytest.skip("recorded on a machine without a GPU")
    expected = RECORDED[case["name"]]
    got = corpus.run_case(case)
    assert (got["exit"], got["stderr"], got["stdout"]) == (expected["exit"], expected["stderr"], expected["stdout"])
