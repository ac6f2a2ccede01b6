"""The pool's environment variables, read by one rule (SGLang 0.5.23's environ.py) in every command."""

from __future__ import annotations

import json

HUGE = "17592186044416"  # MiB: SGLang's int() takes it, and 2**44 MiB is 2**64 bytes (cuda_ipc.py:16)


def test_a_huge_budget_is_shown_as_sglang_computes_it_beside_its_failure(run_line) -> None:
    env = {"SGLANG_MM_FEATURE_CACHE_MB": HUGE}
    human = run_line(["mmpool", "plan"], env=env)
    assert human.exit_code == 1
    assert "requested                   18,446,744,073,709,551,616 B" in human.stdout
    assert "SGLANG_MM_FEATURE_CACHE_MB  17592186044416" in human.stdout
    assert "1,073,741,824" not in human.stdout  # not SGLang's default: SGLang does not fall back here
    data = json.loads(run_line(["mmpool", "plan", "--format", "json"], env=env).stdout)
    assert data["budget_bytes"] == 2**64 == data["effective_budget_bytes"]
    assert data["sglang_mm_feature_cache_mb"] == 2**44
    assert "env-budget-too-large" in [f["code"] for f in data["findings"]]
