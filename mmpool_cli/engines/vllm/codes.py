"""vLLM's finding codes: what ``plan``, ``validate`` and ``check`` say about vLLM's multimodal memory.

The codes of reading a command line that every engine shares (``flag-not-in-release``,
``flag-bad-value``, ...) are ``core.codes.LAUNCH``'s.
"""

from __future__ import annotations

from mmpool_cli.core.codes import Code, CodeRegistry
from mmpool_cli.core.findings import Severity

VLLM = CodeRegistry(
    "vllm",
    [
        Code("vllm-config-not-mapping", Severity.error, "a --config file that is not a mapping of flags"),
        Code("vllm-config-key-not-string", Severity.error, "a --config key that is not text"),
        Code("vllm-config-false-ignored", Severity.warning, "key: false for a flag without a --no- form does nothing"),
        Code("vllm-no-model", Severity.error, "no model on the command line or in the --config file"),
        Code(
            "vllm-value-refused",
            Severity.error,
            "a value the parser reads but vLLM refuses at start-up (below 0, NaN, infinite)",
        ),
        Code(
            "vllm-gib-rounded",
            Severity.warning,
            "a GiB value whose float gives vLLM other bytes than the decimal written",
        ),
        Code(
            "vllm-gib-spelling",
            Severity.warning,
            "a GiB value float() reads in an unusual spelling (4_0, other scripts)",
        ),
        Code("vllm-api-server-count-negative", Severity.error, "--api-server-count below 0"),
        Code("vllm-dp-lb-conflict", Severity.error, "hybrid and external load balancing together"),
        Code("vllm-external-lb-needs-rank", Severity.error, "external load balancing without --data-parallel-rank"),
        Code(
            "vllm-external-lb-size-local",
            Severity.error,
            "external load balancing with --data-parallel-size-local other than 1",
        ),
        Code(
            "vllm-external-lb-dense", Severity.error, "external load balancing with DP > 1 for a model without experts"
        ),
        Code("vllm-hybrid-lb-size-local", Severity.error, "hybrid load balancing without --data-parallel-size-local"),
        Code(
            "vllm-processor-only-cache",
            Severity.info,
            "more than one API process or internal DP: each API process caches on its own",
        ),
        Code("vllm-processor-cache-host", Severity.info, "the host RAM the processor cache can take, by process"),
        Code(
            "vllm-host-memory-exceeded",
            Severity.error,
            "the processor cache can take more host RAM than --host-memory (or the machine's)",
        ),
        Code("vllm-shm-exceeded", Severity.error, "the shm cache's segment is larger than /dev/shm"),
        Code("vllm-cache-item-skipped", Severity.warning, "an item larger than the processor cache is never cached"),
        Code(
            "vllm-shm-object-too-large",
            Severity.warning,
            "an item above --mm-shm-cache-max-object-size-mb is never cached",
        ),
        Code("vllm-gpu-assumed", Severity.info, "no --gpu-memory/--gpu-name: the token default is an H200's"),
        Code("vllm-encoder-budget", Severity.info, "the encoder cache's tokens and GPU bytes"),
        Code("vllm-encoder-not-modelled", Severity.info, "a model family whose encoder tokens mmpool does not count"),
        Code(
            "vllm-item-not-counted",
            Severity.info,
            "an item whose tokens depend on what the launch leaves to the request or content",
        ),
        Code(
            "vllm-item-exceeds-encoder-cache",
            Severity.error,
            "an item with more embedding tokens than the encoder cache: HTTP 400",
        ),
        Code("vllm-modality-disabled", Severity.error, "an item of a modality --limit-mm-per-prompt sets to 0"),
        Code(
            "vllm-chunked-mm-input",
            Severity.error,
            "--disable-chunked-mm-input with an item larger than max_num_batched_tokens",
        ),
        Code(
            "vllm-gpu-pool-floors-to-zero",
            Severity.error,
            "the decode pool's share is 0 bytes: 'total_bytes must be positive, got 0'",
        ),
        Code(
            "vllm-decode-request-too-large",
            Severity.error,
            "a video's decode asks for more than one API process's share",
        ),
        Code("vllm-gpu-pool-unused", Severity.warning, "a decode pool without the GPU video backend: pure KV cost"),
        Code("vllm-kv-reservation", Severity.info, "the KV-cache tokens the decode pool costs each GPU worker"),
        Code("vllm-tune-fixed", Severity.info, "tune: a memory the traffic gives nothing to decide keeps one setting"),
        Code("vllm-tune-no-today", Severity.info, "tune: no --num-gpu-blocks-override, so no row of today's launch"),
        Code("vllm-tune-video-unsized", Severity.warning, "tune: a video of the traffic the decode pool cannot size"),
        Code(
            "vllm-tune-host-cache",
            Severity.info,
            "tune: the processor cache (host RAM) at today's setting, not divided",
        ),
        Code(
            "vllm-model-not-local",
            Severity.info,
            "the launch names a hub id: the encoder cache is planned without the model unless --model names it",
        ),
    ],
)
