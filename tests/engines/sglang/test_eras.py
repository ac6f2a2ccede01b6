"""The parts of a plan that differ between SGLang releases, each against the release that has it."""

from __future__ import annotations

from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import eras, versions
from mmpool_cli.engines.sglang.models import Budget, HbmEstimate, PlanRequest

OLDEST, NEWEST = versions.release(versions.known()[0]), versions.release(versions.NEWEST)
FLOOR = next(versions.release(v) for v in versions.known() if versions.release(v).split == "floor")


class Found(list):
    def __call__(self, severity: Severity, code: str, message: str, subject: str | None) -> None:
        self.append((severity.value, code))


def test_the_default_budget_is_the_planned_releases_own() -> None:
    default = Budget(bytes=NEWEST.default_budget_bytes, source="default")
    assert eras.release_budget(default, OLDEST).bytes == OLDEST.default_budget_mb * MiB
    flag = Budget(bytes=3 * MiB, source="flag")
    assert eras.release_budget(flag, OLDEST) is flag


def test_smallest_budget_without_a_header_is_one_mib() -> None:
    assert eras.smallest(OLDEST, 4, "cuda_ipc", 8, 0) == 1
    assert eras.smallest(NEWEST, 4, "cuda_ipc", 8, 0) == NEWEST.smallest_valid_budget_mb(4, "cuda_ipc", 8, 0) == 1


def test_a_transport_the_release_lacks_is_an_error() -> None:
    add = Found()
    assert eras.transport_known(NEWEST, "cuda_vmm", add)
    assert not eras.transport_known(OLDEST, "cuda_vmm", add)
    assert add == [("error", "transport-not-in-release")]


def test_consumers_under_attention_dp_follow_the_release() -> None:
    request = PlanRequest(budget=Budget(bytes=MiB, source="flag"), tp_size=8, dp_size=4, enable_dp_attention=True)
    assert eras.consumer_sizes(request, NEWEST, Found()) == (8, 1, 4)
    assert eras.consumer_sizes(request, OLDEST, Found()) == (8, 4, 1)
    add = Found()
    newer_flag = PlanRequest(budget=Budget(bytes=MiB, source="flag"), tp_size=8, attn_dp_size=2)
    assert eras.consumer_sizes(newer_flag, OLDEST, add) is None
    assert add == [("error", "flag-not-in-release")]


def test_split_findings_per_era() -> None:
    add = Found()
    eras.split_findings(OLDEST, 1024 * MiB, 4, 1024 * MiB, 0, add)
    assert add == [("warning", "no-split")]
    add = Found()
    eras.split_findings(FLOOR, 256 * MiB, 4, FLOOR.floor_bytes, 0, add)
    assert add == [("warning", "split-floor")]
    add = Found()
    eras.split_findings(NEWEST, 1024 * MiB, 3, 1024 * MiB // 3, 1, add)
    assert add == [("info", "split-remainder")]


def test_release_findings_kv_reservation_and_device() -> None:
    hbm = HbmEstimate(3, "caching", MiB, MiB, 0, 1, MiB, MiB, 2 * MiB)
    request = PlanRequest(budget=Budget(bytes=MiB, source="flag"), base_gpu_id=3)
    add = Found()
    eras.release_findings(request, NEWEST, 1, hbm, add)
    assert add == [("info", "kv-reservation")]
    add = Found()
    eras.release_findings(request, OLDEST, 1, hbm, add)
    assert add == [("warning", "kv-not-reserved"), ("warning", "pool-on-current-device")]
