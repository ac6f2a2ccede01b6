"""The digests mmpool_record knows: every release from 0.5.10 whose pool the hook's wrappers fit, none other."""

from __future__ import annotations

import json
from pathlib import Path

DIGESTS = Path(__file__).resolve().parents[2] / "mmpool_cli" / "_record" / "mmpool_record" / "digests.json"
IPC = ["0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]


def releases(module: str) -> dict[str, set[str]]:
    """``Class.method`` -> every release that ships a known digest of it."""
    names = json.loads(DIGESTS.read_text())["modules"][module]
    return {name: {r for found in digests.values() for r in found} for name, digests in names.items()}


def test_cuda_ipc_recorded_from_0_5_19() -> None:
    # the hook records a pool whose every method matches one release: 0.5.18 lacks cancel_lease and cancel_proxy
    both = {
        **releases("sglang.srt.multimodal.transport.memory_pool"),
        **releases("sglang.srt.multimodal.transport.cuda_ipc"),
    }
    assert sorted(set.intersection(*both.values())) == IPC
    assert set.union(*both.values()) == {"0.5.18", *IPC}
    assert sorted(both["StreamOrderedMmFeaturePool.cancel_lease"]) == IPC


def test_cuda_vmm_only_where_the_tick_merges_inside_recycle_chunks() -> None:
    found = releases("sglang.srt.utils.cuda_vmm_transport_utils")
    assert len(found) == 11 and all(sorted(r) == ["0.5.22", "0.5.23"] for r in found.values())
