"""Every finding code the vLLM engine emits: its severity and what it means (the README's table).

Codes shared with SGLang's launch reading (``flag-not-in-release``, ``flag-bad-value``, ...) mean
the same thing for both engines. Pure core: standard library only.
"""

from __future__ import annotations

from typing import Literal

Sev = Literal["error", "warning", "info"]

CODES: dict[str, tuple[Sev, str]] = {
    "flag-not-in-release": (
        "error",
        "a vLLM flag another release has, but not the chosen one (named with the releases that have it)",
    ),
    "flag-bad-value": ("error", "a value vLLM's parser refuses: not a number, not a choice, no value"),
    "unrecognized-argument": ("error", "an option no known vLLM release has, or a second positional word"),
    "ambiguous-option": ("error", "a prefix argparse cannot resolve to one option"),
    "abbreviated-option": ("info", "a unique prefix argparse expands; spell it out"),
    "config-not-merged": ("error", "--config=FILE or an abbreviation: vLLM ignores the file"),
    "config-multiple": ("error", "more than one --config"),
    "config-missing-path": ("error", "--config without a file"),
    "config-not-yaml": ("error", "a --config file not named .yaml/.yml"),
    "vllm-config-not-mapping": ("error", "a --config file that is not a mapping of flags"),
    "vllm-config-key-not-string": ("error", "a --config key that is not text"),
    "vllm-config-false-ignored": ("warning", "key: false for a flag without a --no- form does nothing"),
    "vllm-no-model": ("error", "no model on the command line or in the --config file"),
    "vllm-value-refused": ("error", "a value the parser reads but vLLM refuses at start-up (below 0, NaN, infinite)"),
    "vllm-gib-rounded": ("warning", "a GiB value whose float gives vLLM other bytes than the decimal written"),
    "vllm-gib-spelling": ("warning", "a GiB value float() reads in an unusual spelling (4_0, other scripts)"),
    "parallel-not-positive": ("error", "a data- or tensor-parallel size below 1"),
    "vllm-api-server-count-negative": ("error", "--api-server-count below 0"),
    "vllm-dp-lb-conflict": ("error", "hybrid and external load balancing together"),
    "vllm-external-lb-needs-rank": ("error", "external load balancing without --data-parallel-rank"),
    "vllm-external-lb-size-local": ("error", "external load balancing with --data-parallel-size-local other than 1"),
    "vllm-external-lb-dense": ("error", "external load balancing with DP > 1 for a model without experts"),
    "vllm-hybrid-lb-size-local": ("error", "hybrid load balancing without --data-parallel-size-local"),
    "vllm-processor-only-cache": (
        "info",
        "more than one API process or internal DP: each API process caches on its own",
    ),
    "vllm-processor-cache-host": ("info", "the host RAM the processor cache can take, by process"),
    "vllm-host-memory-exceeded": (
        "error",
        "the processor cache can take more host RAM than --host-memory (or the machine's)",
    ),
    "vllm-shm-exceeded": ("error", "the shm cache's segment is larger than /dev/shm"),
    "vllm-cache-item-skipped": ("warning", "an item larger than the processor cache is never cached"),
    "vllm-shm-object-too-large": ("warning", "an item above --mm-shm-cache-max-object-size-mb is never cached"),
    "vllm-gpu-assumed": ("info", "no --gpu-memory/--gpu-name: the token default is an H200's"),
    "vllm-encoder-budget": ("info", "the encoder cache's tokens and GPU bytes"),
    "vllm-encoder-not-modelled": ("info", "a model family whose encoder tokens mmpool does not count"),
    "vllm-item-exceeds-encoder-cache": ("error", "an item with more embedding tokens than the encoder cache: HTTP 400"),
    "vllm-modality-disabled": ("error", "an item of a modality --limit-mm-per-prompt sets to 0"),
    "vllm-chunked-mm-input": ("error", "--disable-chunked-mm-input with an item larger than max_num_batched_tokens"),
    "vllm-gpu-pool-floors-to-zero": (
        "error",
        "the decode pool's share is 0 bytes: 'total_bytes must be positive, got 0'",
    ),
    "vllm-decode-request-too-large": ("error", "a video's decode asks for more than one API process's share"),
    "vllm-gpu-pool-unused": ("warning", "a decode pool without the GPU video backend: pure KV cost"),
    "vllm-kv-reservation": ("info", "the KV-cache tokens the decode pool costs each GPU worker"),
}
