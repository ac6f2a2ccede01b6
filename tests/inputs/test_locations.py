"""Every finding the plan makes names its subject, and every front end locates each subject."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang import budget, capacity, eras
from mmpool_cli.engines.sglang import plan as planmod
from mmpool_cli.engines.sglang.env_vars import budget_from_env, read_launch_env
from mmpool_cli.engines.sglang.files import validate_file
from mmpool_cli.engines.sglang.launch import check_launch
from mmpool_cli.engines.sglang.mmpool_config import subject_path
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.engines.sglang.resolution import SUBJECT_DESTS, Assumptions

MiB = 2**20


def _flag(n: int) -> Budget:
    return Budget(bytes=n, source="flag")


# One request per way the plan can speak; together they reach every finding code in plan.py.
REQUESTS = [
    PlanRequest(budget=budget_from_env({})),
    PlanRequest(budget=budget_from_env({"SGLANG_MM_FEATURE_CACHE_MB": "1GB"})),
    PlanRequest(budget=budget_from_env({"SGLANG_MM_FEATURE_CACHE_MB": "9" * 4300})),
    PlanRequest(budget=budget_from_env({"SGL_MM_FEATURE_CACHE_MB": "2", "SGLANG_MM_FEATURE_CACHE_MB": "3"})),
    PlanRequest(budget=_flag(0)),
    PlanRequest(budget=_flag(1000)),
    PlanRequest(budget=_flag(MiB + 1), workers=3),
    PlanRequest(budget=_flag(MiB), workers=8, tp_size=8),
    PlanRequest(budget=_flag(MiB), transport="cuda_vmm"),
    PlanRequest(budget=_flag(MiB), workers=0),
    PlanRequest(budget=_flag(MiB), tp_size=0),
    PlanRequest(budget=_flag(MiB), dp_size=2, attn_dp_size=2),
    PlanRequest(budget=_flag(MiB), tp_size=8, attn_dp_size=3),
    PlanRequest(budget=_flag(MiB), tp_size=2, attn_dp_size=4),
    PlanRequest(budget=_flag(3 * MiB), feature_sizes=(0, 1, 3 * MiB)),
    # the rules of older SGLang releases
    PlanRequest(budget=budget_from_env({}), workers=2, sglang_version="0.5.10"),
    PlanRequest(budget=_flag(0), workers=16, base_gpu_id=1, sglang_version="0.5.13"),
    PlanRequest(budget=_flag(MiB), transport="cuda_vmm", sglang_version="0.5.17"),
    PlanRequest(budget=_flag(MiB), tp_size=4, attn_dp_size=2, sglang_version="0.5.21"),
    PlanRequest(budget=_flag(10**30)),
    PlanRequest(budget=_flag(MiB * 1024), workers=800),
    PlanRequest(budget=_flag(MiB), base_gpu_id=-1),
    PlanRequest(budget=budget_from_env({}), transport_asked=False),  # SGLang's cpu unless asked
]


def _plan_codes() -> set[str]:
    source = "".join(Path(m.__file__).read_text() for m in (planmod, budget, capacity, eras))
    return set(re.findall(r'Severity\.\w+,\s*"([a-z0-9]+(?:-[a-z0-9]+)+)"', source))


def test_the_requests_reach_every_plan_finding() -> None:
    made = {f.code for r in REQUESTS for f in make_plan(r).findings}
    assert made == _plan_codes()


@pytest.mark.parametrize("request_", REQUESTS, ids=range(len(REQUESTS)))
def test_every_plan_finding_has_a_subject_each_front_end_locates(request_: PlanRequest) -> None:
    for f in make_plan(request_).findings:
        if f.code in ("kv-reservation", "kv-not-reserved"):
            assert f.subject is None  # about the model's KV cache as a whole
            continue
        assert f.subject == "env" or subject_path(f.subject) is not None, f  # feature_sizes.N: the item
        # a launch sets everything but the budget (the environment's) and feature sizes (mmpool's flags)
        assert (f.subject or "").partition(".")[0] in {*SUBJECT_DESTS, "env", "budget", "feature_sizes"}, f


def test_config_locates_at_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pool:\n  size: 1MiB\n  tokenizer_workers: 0\nparallel:\n  tp: 8\n  dp: 0\n")
    found = {f.code: f.location for f in validate_file(str(path), read_launch_env({})).findings}
    assert found["workers-not-positive"] == f"{path}:3:22"
    assert found["parallel-not-positive"] == f"{path}:6:7"


def test_launch_locates_at_the_flag() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "M", "--mm-feature-transport", "cuda_ipc"]
    argv += ["--dp-size", "0", "--tokenizer-worker-num", "0"]
    found = {f.code: f.location for f in check_launch(argv, {}, Assumptions()).findings}
    assert found["parallel-not-positive"] == "argv[8]"  # the value
    assert found["workers-not-positive"] == "argv[10]"
