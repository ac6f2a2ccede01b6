"""The finding codes of ``mmpool probe``: what the measurements on the GPU say."""

from __future__ import annotations

from mmpool_cli.core.codes import Code, CodeRegistry
from mmpool_cli.core.findings import Severity

PROBE = CodeRegistry(
    "probe",
    [
        Code("base-gpu-missing", Severity.error, "--base-gpu-id names no visible GPU"),
        Code("does-not-fit", Severity.error, "pools and tokenizer contexts need more than the base GPU's free memory"),
        Code(
            "kv-headroom-exceeded",
            Severity.error,
            "what the contexts and rounding take of the headroom --mem-fraction-static leaves",
        ),
        Code(
            "kv-headroom-tight",
            Severity.warning,
            "what the contexts and rounding take of the headroom --mem-fraction-static leaves",
        ),
        Code(
            "kv-headroom",
            Severity.info,
            "what the contexts and rounding take of the headroom --mem-fraction-static leaves",
        ),
        Code("device-mapping", Severity.error, "CUDA and NVML disagree on which GPU --base-gpu-id is"),
        Code("alloc-oom", Severity.error, "a pool allocation ran out of memory"),
        Code("child-died", Severity.error, "a probe process crashed, ran past --timeout, or failed, with its error"),
        Code("child-timeout", Severity.error, "a probe process crashed, ran past --timeout, or failed, with its error"),
        Code("child-error", Severity.error, "a probe process crashed, ran past --timeout, or failed, with its error"),
        Code("probe-unavailable", Severity.error, "(JSON only, exit 3) the probe cannot run on this machine, and why"),
        Code("verify-mismatch", Severity.error, "a pool read back different bytes than were written"),
        Code(
            "ipc-open-failed",
            Severity.error,
            "the consumer could not open the shared pool (with the pidfd_getfd fixes)",
        ),
        Code(
            "ipc-pidfd-refused",
            Severity.error,
            "the consumer could not open the shared pool (with the pidfd_getfd fixes)",
        ),
        Code("ipc-data-mismatch", Severity.error, "the shared bytes or the acknowledgement did not arrive"),
        Code("ipc-ack-missing", Severity.error, "the shared bytes or the acknowledgement did not arrive"),
        Code("vmm-no-handle", Severity.error, "cuda_vmm is planned but neither FABRIC nor POSIX FD handles work"),
        Code("memory-not-released", Severity.error, "free memory did not return to its baseline"),
        Code("allocator-differs", Severity.warning, "a measurement disagrees with the plan, or cannot be made"),
        Code("vmm-granularity-differs", Severity.warning, "a measurement disagrees with the plan, or cannot be made"),
        Code("vmm-unchecked", Severity.warning, "a measurement disagrees with the plan, or cannot be made"),
        # info when verification reads at least VERIFY_GOAL of the copy bandwidth, a warning below it
        Code(
            "verify-bandwidth",
            Severity.warning,
            "a measurement disagrees with the plan, or cannot be made",
            also=(Severity.info,),
        ),
        Code("fits", Severity.info, "the measurements"),
        Code("context-as-predicted", Severity.info, "the measurements"),
        Code("context-differs", Severity.info, "the measurements"),
        Code("allocator-as-predicted", Severity.info, "the measurements"),
        Code("ipc-ok", Severity.info, "the measurements"),
        Code("vmm-facts", Severity.info, "the measurements"),
        Code("plan-failed", Severity.error, "the plan has errors, so the probe allocates nothing"),
    ],
)
