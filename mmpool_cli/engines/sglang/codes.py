"""SGLang's finding codes: what ``plan``, ``validate`` and ``check`` say about an SGLang pool."""

from __future__ import annotations

from mmpool_cli.core.codes import Code, CodeRegistry
from mmpool_cli.core.findings import Severity

SGLANG = CodeRegistry(
    "sglang",
    [
        Code("budget-floors-to-zero", Severity.error, "the budget is under 1 MiB: SGLang's whole-MiB value is 0"),
        Code(
            "budget-not-positive",
            Severity.error,
            "SGLANG_MM_FEATURE_CACHE_MB is 0 or negative",
            also=(Severity.warning,),
        ),
        Code(
            "env-budget-invalid",
            Severity.error,
            "SGLANG_MM_FEATURE_CACHE_MB is not an integer to Python's int() (more than 4 300 digits included): SGLang silently uses 1024",
        ),
        Code(
            "env-budget-too-large",
            Severity.error,
            "int() reads it, but the pool's bytes pass 2^63 - 1: torch cannot allocate it and SGLang fails at start-up",
        ),
        Code("workers-not-positive", Severity.error, "--tokenizer-worker-num below 1 (Tokenizer worker num must >= 1)"),
        Code("base-gpu-id-negative", Severity.error, "--base-gpu-id below 0 (base_gpu_id must be non-negative)"),
        Code("budget-exceeds-gpu", Severity.error, "the budget is more than any GPU has (288 GiB, NVIDIA B300)"),
        Code("hbm-exceeds-gpu", Severity.error, "the pools and tokenizer contexts are more than any GPU has"),
        Code(
            "dp-replicas-with-attention-dp",
            Severity.error,
            "--dp-size > 1 together with attention DP, which SGLang refuses",
        ),
        Code("attention-dp-not-divisor", Severity.error, "--tp-size is not a multiple of the attention-DP size"),
        Code("pool-too-small", Severity.error, "a worker's share does not exceed the cuda_ipc control header"),
        Code("vmm-below-granularity", Severity.error, "a worker's share is below one CUDA VMM granule"),
        Code("feature-empty", Severity.error, "a feature size of 0 bytes"),
        Code("budget-not-whole-mib", Severity.warning, "the budget is floored to whole MiB"),
        Code(
            "feature-never-fits",
            Severity.warning,
            "a feature can never fit a fresh worker pool: it always takes the CPU path",
        ),
        Code("allocator-rounding", Severity.warning, "the caching allocator reserves more than the budget"),
        Code("env-legacy-overrides", Severity.warning, "SGL_MM_FEATURE_CACHE_MB overrides SGLANG_MM_FEATURE_CACHE_MB"),
        Code("split-remainder", Severity.info, "the budget does not split evenly: a few bytes stay unused"),
        Code("feature-slot-cap", Severity.info, "the 4096 in-flight slots, not bytes, limit a small feature"),
        Code("budget-default", Severity.info, "where the budget came from"),
        Code("budget-from-env", Severity.info, "where the budget came from"),
        Code("kv-reservation", Severity.info, "what SGLang (0.5.18 and later) takes out of the KV-cache budget"),
        Code(
            "model-not-pooled",
            Severity.warning,
            "the model's features never enter the pool: the pool is pure cost",
        ),
        Code("env-vlm-cache-invalid", Severity.warning, "SGLANG_VLM_CACHE_SIZE_MB is not an integer: SGLang uses 100"),
        Code(
            "env-vlm-cache-negative",
            Severity.warning,
            "SGLANG_VLM_CACHE_SIZE_MB below 0: no embedding cache, and the KV reservation falls short of the pools",
        ),
        Code("workload-request", Severity.info, "the tensors one request of the given items puts in the pool"),
        Code("kv-cost", Severity.info, "the KV-cache tokens the reservation costs (with --model PATH)"),
        Code("qwen3-vl-vlm-cache", Severity.info, "SGLang sets the VLM cache to 0 for Qwen3-VL on large Hopper GPUs"),
        Code(
            "positional-embeds-pool",
            Severity.info,
            "under cuda_vmm (0.5.22 and later) a second, unreserved pool can appear",
        ),
        Code("transport-not-in-release", Severity.error, "cuda_vmm before 0.5.18, --attn-dp-size before 0.5.22"),
        Code(
            "no-split",
            Severity.warning,
            "0.5.10 gives every worker the whole budget (info with one worker)",
            also=(Severity.info,),
        ),
        Code(
            "split-floor",
            Severity.warning,
            "0.5.11-0.5.15 give every worker at least 128 MiB",
        ),
        Code(
            "kv-not-reserved",
            Severity.warning,
            "before 0.5.18 the KV cache does not make room for the pools; before 0.5.14 they ignore --base-gpu-id",
        ),
        Code(
            "pool-on-current-device",
            Severity.warning,
            "before 0.5.18 the KV cache does not make room for the pools; before 0.5.14 they ignore --base-gpu-id",
        ),
        Code(
            "config-unknown-key",
            Severity.error,
            "mmpool config: a key it does not know (with the closest one), a bad value",
        ),
        Code(
            "config-invalid-value",
            Severity.error,
            "mmpool config: a key it does not know (with the closest one), a bad value",
        ),
        Code(
            "config-size-env-differs",
            Severity.warning,
            "pool.size differs from the SGLANG_MM_FEATURE_CACHE_MB that SGLang will read",
        ),
        Code(
            "hbm-exceeds-free", Severity.error, "the pools and contexts do not fit gpu.free_hbm; inconsistent GPU sizes"
        ),
        Code(
            "gpu-free-exceeds-total",
            Severity.error,
            "the pools and contexts do not fit gpu.free_hbm; inconsistent GPU sizes",
        ),
        Code("hbm-share", Severity.info, "what the reservation takes from the base GPU"),
        Code("hbm-base-gpu", Severity.info, "what the reservation takes from the base GPU"),
        Code(
            "sglang-config-unsupported",
            Severity.error,
            "a key SGLang's merger refuses (enable-dp-attention, boolean-optional flags)",
        ),
        Code("sglang-config-env-var", Severity.error, "an environment variable in a --config file"),
        Code(
            "sglang-config-underscore-key",
            Severity.error,
            "tokenizer_worker_num: SGLang emits --tokenizer_worker_num, which argparse refuses",
        ),
        Code("sglang-config-key-not-string", Severity.error, "a key that is not text: SGLang's merger crashes"),
        Code("sglang-config-false-ignored", Severity.warning, "a key SGLang skips: it changes nothing"),
        Code("sglang-config-empty-list", Severity.warning, "a key SGLang skips: it changes nothing"),
        Code(
            "sglang-config-store-true",
            Severity.info,
            "a store-true flag switched on by the file, which the command line cannot undo",
        ),
        Code("keep-on-device-conflict", Severity.error, "0.5.16-0.5.20: --keep-mm-feature-on-device means cuda_ipc"),
        Code(
            "keep-on-device-deprecated", Severity.warning, "0.5.16-0.5.20: --keep-mm-feature-on-device means cuda_ipc"
        ),
        Code(
            "model-path-missing",
            Severity.error,
            "no model: sglang serve needs it on the command line even with --config",
        ),
        Code("transport-layout", Severity.error, "cuda_ipc with --nnodes != 1, or cuda_vmm with --pp-size != 1"),
        Code(
            "gpu-id-step-not-positive",
            Severity.error,
            "SGLang's start-up refusals (check_server_args of the release its texts were read from; other releases are not checked for them), whatever the transport: Tokenizer worker num must >= 1, base_gpu_id must be non-negative, gpu_id_step must be positive",
        ),
        Code(
            "tp-not-divisible-by-nodes",
            Severity.error,
            "tp_size must be divisible by number of nodes (TP × PP over --nnodes); --nnodes below 1 (0 crashes SGLang's check with ZeroDivisionError)",
        ),
        Code(
            "nnodes-not-positive",
            Severity.error,
            "tp_size must be divisible by number of nodes (TP × PP over --nnodes); --nnodes below 1 (0 crashes SGLang's check with ZeroDivisionError)",
        ),
        Code(
            "dp-replicas-multi-node",
            Severity.error,
            "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes",
        ),
        Code(
            "dwdp-not-tp",
            Severity.error,
            "dwdp_size (N) must equal tp_size (M); DWDP requires --disaggregation-mode null or prefill",
        ),
        Code(
            "dwdp-disaggregation",
            Severity.error,
            "dwdp_size (N) must equal tp_size (M); DWDP requires --disaggregation-mode null or prefill",
        ),
        Code("encoder-only-cpu", Severity.warning, "--encoder-only turns a pool transport into cpu"),
        Code("no-pool", Severity.info, "the transport resolves to cpu (or the launch is text-only): no pool exists"),
        Code("launch-help", Severity.info, "the launch asks for SGLang's help: it prints it and exits 0, no pool"),
        Code(
            "transport-opt-in",
            Severity.info,
            "no transport given: the plan is of the pool SGLang makes when asked; unasked it picks cpu",
        ),
        Code("assumption-model", Severity.info, "what the check could not know and assumed"),
        Code("assumption-multinode", Severity.info, "what the check could not know and assumed"),
        Code("assumption-gpu", Severity.warning, "what the check could not know and assumed"),
        Code("qwen3-vl-override", Severity.info, "the Qwen3-VL rule picked cuda_ipc or 3072 MiB"),
        Code("qwen3-vl-budget", Severity.info, "the Qwen3-VL rule picked cuda_ipc or 3072 MiB"),
        Code(
            "env-recycle-not-positive",
            Severity.error,
            "the recycle interval fails every pool, spins, or kills the recycler thread (inf)",
        ),
        Code(
            "env-recycle-nan",
            Severity.error,
            "the recycle interval fails every pool, spins, or kills the recycler thread (inf)",
        ),
        Code(
            "env-recycle-too-large",
            Severity.error,
            "the recycle interval fails every pool, spins, or kills the recycler thread (inf)",
        ),
        Code("env-recycle-invalid", Severity.warning, "not a number to float(): SGLang uses 0.05 s"),
        Code(
            "env-legacy-transport",
            Severity.warning,
            "SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated, unparsable, or overridden by the flag",
        ),
        Code(
            "env-legacy-transport-invalid",
            Severity.warning,
            "SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated, unparsable, or overridden by the flag",
        ),
        Code(
            "env-legacy-transport-conflict",
            Severity.warning,
            "SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated, unparsable, or overridden by the flag",
        ),
        Code(
            "pidfd-getfd-needed",
            Severity.warning,
            "expandable segments with cuda_ipc need pidfd_getfd rights, not tested or not testable",
        ),
        Code(
            "pidfd-getfd-unknown",
            Severity.warning,
            "expandable segments with cuda_ipc need pidfd_getfd rights, not tested or not testable",
        ),
        Code("pidfd-getfd-refused", Severity.error, "this machine refuses pidfd_getfd between sibling processes"),
        Code("pidfd-getfd-allowed", Severity.info, "it allows it"),
        # its request logs (mmpool trace, simulate --from)
        Code("traffic-log-line", Severity.error, "a request line of the server log mmpool cannot read"),
        Code("traffic-log-time", Severity.error, "a request line without a time stamp"),
        Code(
            "traffic-request-fails",
            Severity.warning,
            "a request SGLang itself fails (a raw base64 JPEG, '/9j/...', opened as a path): not pooled",
        ),
    ],
)
