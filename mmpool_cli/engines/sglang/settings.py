"""The pool settings, declared once: each plan-request field, where users set it, and its default.

One row per ``PlanRequest`` field a user sets: mmpool's own flags for it (``plan``, ``probe``,
``simulate``), its key in an mmpool config, the destination SGLang's parser stores it in on a
launch command (with SGLang's flag), and its default. The config keys findings point at
(``mmpool_config.SUBJECT_PATHS``), the launch-command destinations (``resolution.SUBJECT_DESTS``)
and the flags plan findings name derive from it; a test keeps ``PlanRequest``'s and the CLI's
defaults equal to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmpool_cli.engines.sglang.rules import DEFAULT_VMM_GRANULARITY


@dataclass(frozen=True)
class Setting:
    """One pool setting: the request field, mmpool's flags, the config key, SGLang's destination."""

    subject: str  # the PlanRequest field, and the ``subject`` of findings about it
    flags: tuple[str, ...]  # mmpool's flags, the first the one --help shows first
    config: tuple[str, str] | None  # the key of an mmpool config that findings about it point at
    dest: str | None  # SGLang's argparse destination on a launch command
    sglang_flag: str | None  # SGLang's own spelling, for messages
    default: Any


SETTINGS = (
    Setting("budget", ("--size",), ("pool", "size"), None, None, None),
    Setting(
        "workers", ("--workers", "--tokenizer-worker-num"), ("pool", "tokenizer_workers"), "tokenizer_worker_num",
        "--tokenizer-worker-num", 1,
    ),
    Setting("tp_size", ("--tp", "--tp-size"), ("parallel", "tp"), "tp_size", "--tp-size", 1),
    Setting("dp_size", ("--dp", "--dp-size"), ("parallel", "dp"), "dp_size", "--dp-size", 1),
    Setting("attn_dp_size", ("--attn-dp-size",), ("parallel", "attn_dp"), "attn_dp_size", "--attn-dp-size", 1),
    # no finding is about it alone: it is read as attn_dp_size (resolve_attention_dp)
    Setting("enable_dp_attention", ("--enable-dp-attention",), None, None, "--enable-dp-attention", False),
    Setting(
        "transport", ("--transport", "--mm-feature-transport"), ("pool", "transport"), "mm_feature_transport",
        "--mm-feature-transport", "cuda_ipc",
    ),
    Setting("vmm_granularity", ("--vmm-granularity",), None, None, None, DEFAULT_VMM_GRANULARITY),
    Setting("feature_sizes", ("--feature-size",), ("workload", "feature_sizes"), None, None, ()),
    Setting("base_gpu_id", ("--base-gpu-id",), ("parallel", "base_gpu_id"), "base_gpu_id", "--base-gpu-id", 0),
    Setting("context_bytes", ("--context-size",), None, None, None, None),
)  # fmt: skip

BY_SUBJECT = {s.subject: s for s in SETTINGS}
SUBJECT_PATHS: dict[str, tuple[str, ...]] = {s.subject: s.config for s in SETTINGS if s.config}
SUBJECT_DESTS: dict[str, str] = {s.subject: s.dest for s in SETTINGS if s.dest}


def sglang_flag(subject: str) -> str:
    """SGLang's flag for a setting, e.g. ``--tp-size`` for ``tp_size``."""
    flag = BY_SUBJECT[subject].sglang_flag
    assert flag is not None, f"{subject} has no SGLang flag"
    return flag
