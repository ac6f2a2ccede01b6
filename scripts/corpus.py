"""The behaviour corpus: every command's stdout, stderr and exit code on a fixed set of invocations.

``python scripts/corpus.py --record`` runs every case and writes ``tests/data/corpus/corpus.json``;
``python scripts/corpus.py --check`` runs them again and reports every case whose output differs
(exit 1). ``tests/test_corpus.py`` replays the same cases. Each case runs in-process through
``mmpool_cli.cli.main`` (the console entry point, so usage errors are formatted as a user sees them)
inside click's isolation: its own stdin, stdout, stderr and a fixed environment (no SGLang, PyTorch or
mmpool variables unless the case sets them, ``NO_COLOR=1``, ``COLUMNS=100``, ``TERM=dumb``, and an
empty Hugging Face cache in ``HF_HUB_CACHE``). Run it from
anywhere: it works in the repository root, so every path in a case (and in its output) is relative.
Nothing in the output is scrubbed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "corpus" / "corpus.json"
INPUTS = "tests/data/corpus/inputs"

# Variables a case starts without: they change what mmpool reads or how it prints.
CLEARED_PREFIXES = (
    "SGLANG_", "SGL_", "MMPOOL_", "PYTORCH_", "CUDA_", "FORCE_COLOR", "CLICOLOR", "VIDEO_", "HF_", "HUGGINGFACE_",
)  # fmt: skip
# a Hugging Face cache that holds nothing, so a hub id's lookup reads the same everywhere
FIXED_ENV = {
    "NO_COLOR": "1", "COLUMNS": "100", "LINES": "50", "TERM": "dumb", "HF_HUB_CACHE": "tests/data/corpus/hf-cache",
}  # fmt: skip

RELEASES = [f"0.5.{n}" for n in range(10, 24)]
FORMATS = ["human", "json", "github", "sarif"]
LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "MODEL"]
# check --from: a launch mmpool tune can score over the chat example (its model directory, its KV capacity)
TUNED = ["sglang", "serve", "--model-path", "examples/qwen2.5-vl-7b", "--max-total-tokens", "2048"]
TUNED += ["--mm-feature-transport", "cuda_ipc"]
CHATS = ["--from", "examples/traffic/chats.jsonl"]
# check --from on vLLM: a launch tune --engine vllm scores over its chat example (the host given: not this machine's)
VLLM_TUNED = ["vllm", "serve", "examples/qwen2.5-vl-7b", "--num-gpu-blocks-override", "400"]
VLLM_HOST = ["--host-memory", "64GiB", "--shm-size", "1GiB"]
VLLM_CHATS = ["--from", "examples/traffic/vllm-chats.jsonl"]
# the chats and one clip, decoded on the GPU within a pool of 0.001 GiB, too small for it
VLLM_VIDEO = [*VLLM_CHATS, "--from", f"{INPUTS}/vllm-video.jsonl"]
VLLM_DECODE = ["--mm-ipc-gpu-memory-gb", "0.001", "--media-io-kwargs", '{"video": {"video_backend": "pynvvideocodec"}}']


def _case(name: str, argv: list[str], env: dict[str, str] | None = None, stdin: str | None = None) -> dict[str, Any]:
    case: dict[str, Any] = {"name": name, "argv": argv}
    if env:
        case["env"] = env
    if stdin is not None:
        case["stdin"] = stdin
    return case


def cases() -> list[dict[str, Any]]:
    """Every invocation of the corpus, in a fixed order."""
    out: list[dict[str, Any]] = []
    add = out.append

    # the command line itself
    add(_case("root-no-args", []))
    add(_case("root-help", ["--help"]))
    add(_case("root-version", ["--version"]))
    add(_case("root-unknown-command", ["nosuch"]))
    for command in ["plan", "validate", "check", "simulate", "schema", "probe"]:
        add(_case(f"{command}-help", [command, "--help"]))

    # plan: budgets, layouts, transports, bounds
    plan = [
        ("defaults", []),
        ("readme", ["--size", "1GiB", "--workers", "4", "--tp", "8", "--feature-size", "50633856"]),
        ("size-gb", ["--size", "1GB"]),
        ("size-mib", ["--size", "512MiB", "--workers", "3"]),
        ("size-fraction", ["--size", "1.5GiB", "--workers", "2"]),
        ("size-bytes", ["--size", "1073741825"]),
        ("size-zero", ["--size", "0"]),
        ("size-floors-to-zero", ["--size", "100KiB"]),
        ("size-over-gpu", ["--size", "300GiB"]),
        ("size-hbm-over-gpu", ["--size", "280GiB", "--workers", "64"]),
        ("size-bad", ["--size", "abc"]),
        ("size-negative", ["--size", "-1GiB"]),
        ("size-bits", ["--size", "1Gb"]),
        ("size-float-bytes", ["--size", "4.35MB"]),
        ("workers-zero", ["--workers", "0"]),
        ("workers-too-many", ["--workers", "1025"]),
        ("workers-alias", ["--tokenizer-worker-num", "8", "--size", "2GiB"]),
        ("tp-zero", ["--tp", "0"]),
        ("tp-too-big", ["--tp", "4097"]),
        ("dp-attention", ["--tp", "8", "--dp", "4", "--enable-dp-attention"]),
        ("attn-dp", ["--tp", "8", "--attn-dp-size", "2"]),
        ("attn-dp-not-divisor", ["--tp", "8", "--attn-dp-size", "3"]),
        ("dp-zero", ["--dp", "0"]),
        ("vmm", ["--transport", "cuda_vmm", "--workers", "4", "--tp", "8", "--feature-size", "6MiB"]),
        ("vmm-granularity", ["--transport", "cuda_vmm", "--vmm-granularity", "4KiB", "--feature-size", "6MiB"]),
        ("vmm-granularity-bad", ["--transport", "cuda_vmm", "--vmm-granularity", "3MiB"]),
        ("vmm-too-small", ["--transport", "cuda_vmm", "--size", "1MiB", "--workers", "1"]),
        ("transport-bad", ["--transport", "cpu"]),
        ("base-gpu-negative", ["--base-gpu-id", "-1"]),
        ("base-gpu-too-big", ["--base-gpu-id", "4097"]),
        ("context-small", ["--context-size", "1KiB"]),
        ("context-large", ["--context-size", "2GiB", "--workers", "8"]),
        ("features-many", ["--feature-size", "6MiB", "--feature-size", "50633856", "--feature-size", "2GiB"]),
        ("feature-zero", ["--feature-size", "0"]),
        ("ipc-too-small", ["--size", "1MiB", "--workers", "1", "--tp", "64"]),
        ("unknown-flag", ["--bogus"]),
        ("format-bad", ["--format", "xml"]),
        ("release-unknown", ["--sglang-version", "0.5.9"]),
        ("release-bad", ["--sglang-version", "latest"]),
    ]
    for name, args in plan:
        add(_case(f"plan-{name}", ["plan", *args]))
        if name in {"defaults", "readme", "size-gb", "size-over-gpu", "vmm", "dp-attention", "ipc-too-small"}:
            add(_case(f"plan-{name}-json", ["plan", *args, "--format", "json"]))

    # plan: every release, both transports
    for release in RELEASES:
        args = ["--sglang-version", release, "--size", "1GiB", "--workers", "4", "--tp", "8", "--feature-size", "6MiB"]
        add(_case(f"plan-release-{release}-ipc", ["plan", *args]))
        add(_case(f"plan-release-{release}-vmm-json", ["plan", *args, "--transport", "cuda_vmm", "--format", "json"]))
    add(_case("plan-release-attn-dp-old", ["plan", "--sglang-version", "0.5.21", "--attn-dp-size", "2", "--tp", "4"]))

    # plan: the environment
    plan_env = [
        ("env-mb", {"SGLANG_MM_FEATURE_CACHE_MB": "2048"}, []),
        ("env-mb-gb", {"SGLANG_MM_FEATURE_CACHE_MB": "1GB"}, []),
        ("env-mb-zero", {"SGLANG_MM_FEATURE_CACHE_MB": "0"}, []),
        ("env-mb-negative", {"SGLANG_MM_FEATURE_CACHE_MB": "-5"}, []),
        ("env-mb-old-name", {"SGL_MM_FEATURE_CACHE_MB": "512"}, []),
        ("env-mb-both", {"SGL_MM_FEATURE_CACHE_MB": "512", "SGLANG_MM_FEATURE_CACHE_MB": "256"}, []),
        ("env-mb-and-flag", {"SGLANG_MM_FEATURE_CACHE_MB": "2048"}, ["--size", "1GiB"]),
        ("env-format-json", {"MMPOOL_FORMAT": "json"}, []),
        ("env-release", {"MMPOOL_SGLANG_VERSION": "0.5.15"}, ["--workers", "4"]),
        ("env-expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, ["--workers", "2"]),
        ("env-vlm-cache", {"SGLANG_VLM_CACHE_SIZE_MB": "200"}, ["--model", f"{INPUTS}/qwen25-model"]),
    ]
    for name, env, args in plan_env:
        add(_case(f"plan-{name}", ["plan", *args], env=env))

    # plan: workloads
    workloads = [
        ("qwen25", ["--model", "qwen2.5-vl", "--image", "1920x1080", "--workers", "4", "--tp", "8"]),
        ("qwen2", ["--model", "qwen2-vl", "--image", "640x480", "--image", "1280x720"]),
        ("qwen3", ["--model", "qwen3-vl", "--image", "1920x1080"]),
        ("qwen25-video", ["--model", "qwen2.5-vl", "--video", "1920x1080:30:30"]),
        ("qwen25-pixels", ["--model", "qwen2.5-vl", "--image", "4000x3000", "--max-pixels", "1000000"]),
        ("qwen25-frames", ["--model", "qwen2.5-vl", "--video", "1280x720:60:24", "--max-frames", "16"]),
        ("gemma3", ["--model", "gemma3", "--image", "896x896"]),
        ("gemma3-pan", ["--model", "gemma3", "--image", "1920x1080", "--pan-and-scan"]),
        ("llama4", ["--model", "llama4", "--image", "1920x1080"]),
        ("kimi25", ["--model", "kimi-k2.5", "--image", "1920x1080"]),
        ("internvl", ["--model", "internvl", "--image", "1920x1080"]),
        ("llava", ["--model", "llava-onevision", "--image", "1920x1080"]),
        ("minicpm", ["--model", "minicpm-v", "--image", "1920x1080"]),
        ("whisper", ["--model", "whisper", "--audio", "30"]),
        ("kv-dtype", ["--model", "qwen2.5-vl", "--image", "1920x1080", "--kv-cache-dtype", "fp8_e4m3"]),
        ("unknown-model", ["--model", "nosuch", "--image", "10x10"]),
        ("hub-id", ["--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--image", "10x10"]),
        ("image-bad", ["--model", "qwen2.5-vl", "--image", "1920by1080"]),
        ("image-no-model", ["--image", "1920x1080"]),
        ("video-bad", ["--model", "qwen2.5-vl", "--video", "1920x1080:x:30"]),
        ("model-dir", ["--model", f"{INPUTS}/qwen25-model", "--image", "1920x1080", "--page-size", "16"]),
        (
            "model-dir-fp8",
            [
                "--model",
                f"{INPUTS}/qwen25-model/config.json",
                "--video",
                "640x480:4:30",
                "--kv-cache-dtype",
                "fp8_e4m3",
            ],
        ),
    ]
    for name, args in workloads:
        add(_case(f"plan-workload-{name}", ["plan", *args]))
        if name in {"qwen25", "qwen25-video", "gemma3-pan", "internvl", "model-dir"}:
            add(_case(f"plan-workload-{name}-json", ["plan", *args, "--format", "json"]))
    add(
        _case(
            "plan-workload-video-max-pixels",
            ["plan", "--model", "qwen2.5-vl", "--video", "1920x1080:10:30"],
            env={"VIDEO_MAX_PIXELS": "1000000"},
        )
    )

    # validate: every test config and every example, in every format
    configs = sorted(p for p in (ROOT / "tests/data/configs").rglob("*") if p.is_file() and p.name != "expected.yaml")
    for path in configs:
        rel = path.relative_to(ROOT).as_posix()
        for fmt in FORMATS:
            add(_case(f"validate-{path.parent.name}-{path.name}-{fmt}", ["validate", "--format", fmt, rel]))
    # prometheus.yml is a scrape config for mmpool record's metrics, not a file mmpool validates
    examples = sorted(
        p for p in (ROOT / "examples").iterdir() if p.suffix in {".yaml", ".yml"} and p.name != "prometheus.yml"
    )
    for path in examples:
        rel = path.relative_to(ROOT).as_posix()
        for fmt in FORMATS:
            add(_case(f"validate-example-{path.name}-{fmt}", ["validate", "--format", fmt, rel]))
    validate = [
        ("readme", ["examples/mmpool.yaml", "examples/invalid-sglang-config.yaml"], None, None),
        ("environment-alone", [], None, None),
        ("env-flag", ["--env", "SGLANG_MM_FEATURE_CACHE_MB=1GB"], None, None),
        ("env-flag-bad", ["--env", "NOEQUALS"], None, None),
        ("env-file", ["--env-file", f"{INPUTS}/pool.env", "examples/mmpool.yaml"], None, None),
        ("env-file-missing", ["--env-file", f"{INPUTS}/missing.env"], None, None),
        (
            "no-process-env",
            ["--no-process-env", "--env", "SGLANG_MM_FEATURE_CACHE_MB=512", "examples/mmpool.yaml"],
            {"SGLANG_MM_FEATURE_CACHE_MB": "1GB"},
            None,
        ),
        ("process-env", ["examples/mmpool.yaml"], {"SGLANG_MM_FEATURE_CACHE_MB": "1GB"}, None),
        ("kind-mmpool", ["--kind", "mmpool", "examples/sglang-config.yaml"], None, None),
        ("kind-sglang", ["--kind", "sglang", "examples/mmpool.yaml"], None, None),
        ("strict", ["--strict", "tests/data/configs/invalid/mmpool-never-fits.yaml"], None, None),
        ("quiet", ["-q", "examples/invalid-mmpool.yaml"], None, None),
        ("verbose", ["-v", "examples/invalid-mmpool.yaml", "examples/sglang-config.yaml"], None, None),
        ("exit-zero", ["--exit-zero", "examples/invalid-mmpool.yaml"], None, None),
        ("env-strict", ["tests/data/configs/invalid/mmpool-never-fits.yaml"], {"MMPOOL_STRICT": "1"}, None),
        ("env-quiet", ["examples/invalid-mmpool.yaml"], {"MMPOOL_QUIET": "1"}, None),
        ("env-exit-zero", ["examples/invalid-mmpool.yaml"], {"MMPOOL_EXIT_ZERO": "1"}, None),
        ("env-format-sarif", ["examples/invalid-mmpool.yaml"], {"MMPOOL_FORMAT": "sarif"}, None),
        ("directory", ["tests/data/configs/valid"], None, None),
        ("directory-none", ["tests/data/corpus/inputs/empty-dir"], None, None),
        ("directory-examples-json", ["--format", "json", "examples"], None, None),
        ("missing-file", ["no/such/file.yaml"], None, None),
        ("undecodable-name", ["bad\udcff.yaml"], None, None),
        ("undecodable-name-json", ["--format", "json", "bad\udcff.yaml"], None, None),
        ("stdin-mmpool", ["-"], None, "pool: {size: 2GiB, tokenizer_workers: 4}\nparallel: {tp: 8}\n"),
        ("stdin-sglang", ["-"], None, "tokenizer-worker-num: 0\nmm-feature-transport: cuda_ipc\n"),
        ("stdin-syntax", ["--format", "json", "-"], None, "pool: [\n"),
        (
            "release-old",
            ["--sglang-version", "0.5.12", "examples/sglang-config.yaml", "examples/mmpool.yaml"],
            None,
            None,
        ),
        (
            "release-vmm-old",
            ["--sglang-version", "0.5.15", "tests/data/configs/valid/sglang-vmm-multinode.yaml"],
            None,
            None,
        ),
        ("kind-bad", ["--kind", "toml", "examples/mmpool.yaml"], None, None),
        (
            "env-bad-values",
            [
                "--env",
                "SGLANG_USE_CUDA_IPC_TRANSPORT=maybe",
                "--env",
                "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=-1",
            ],
            None,
            None,
        ),
    ]
    for name, args, env, stdin in validate:
        add(_case(f"validate-{name}", ["validate", *args], env=env, stdin=stdin))

    # check: launch commands
    check = [
        ("readme", [], [*LAUNCH, "--tp", "8", "--mm-feature-transport", "cuda_ipc", "--nnodes", "2"]),
        (
            "serve",
            ["--no-probe-pidfd"],
            [
                "sglang",
                "serve",
                "--model-path",
                "M",
                "--tokenizer-worker-num",
                "4",
                "--tp-size",
                "8",
                "--mm-feature-transport",
                "cuda_ipc",
            ],
        ),
        ("default-cpu", [], [*LAUNCH]),
        (
            "python3-equals",
            [],
            ["python3", "-m", "sglang.launch_server", "--tp-size=4", "--mm-feature-transport=cuda_vmm"],
        ),
        ("path-to-sglang", [], ["/usr/local/bin/sglang", "serve", "--mm-feature-transport", "cuda_ipc"]),
        ("config", [], [*LAUNCH, "--config", "examples/sglang-config.yaml"]),
        ("config-invalid", [], [*LAUNCH, "--config", "examples/invalid-sglang-config.yaml"]),
        ("config-missing", [], [*LAUNCH, "--config", "no/such.yaml"]),
        ("config-override", [], [*LAUNCH, "--config", "examples/sglang-config.yaml", "--tokenizer-worker-num", "2"]),
        ("workers-zero", [], [*LAUNCH, "--tokenizer-worker-num", "0", "--mm-feature-transport", "cuda_ipc"]),
        (
            "dp-attention",
            [],
            [*LAUNCH, "--tp", "8", "--dp", "2", "--enable-dp-attention", "--mm-feature-transport", "cuda_ipc"],
        ),
        (
            "attn-dp-not-divisor",
            [],
            [*LAUNCH, "--tp", "8", "--attn-dp-size", "3", "--mm-feature-transport", "cuda_ipc"],
        ),
        ("unknown-flag", [], [*LAUNCH, "--no-such-flag", "--mm-feature-transport", "cuda_ipc"]),
        ("ambiguous-prefix", [], [*LAUNCH, "--mm", "cuda_ipc"]),
        ("transport-bad", [], [*LAUNCH, "--mm-feature-transport", "nvlink"]),
        ("encoder-only", [], [*LAUNCH, "--encoder-only"]),
        ("vmm-pp", [], [*LAUNCH, "--mm-feature-transport", "cuda_vmm", "--pp-size", "2"]),
        ("not-sglang", [], ["ls", "-l"]),
        ("empty-python", [], ["python"]),
        (
            "qwen3",
            ["--hf-model-type", "qwen3_vl", "--sm90", "--gpu-memory", "141GiB"],
            [*LAUNCH, "--max-running-requests", "400"],
        ),
        ("qwen3-no-sm90", ["--hf-model-type", "qwen3_vl", "--no-sm90"], [*LAUNCH]),
        (
            "feature-size",
            ["--feature-size", "50633856", "--context-size", "600MiB"],
            [*LAUNCH, "--tokenizer-worker-num", "4", "--tp", "8", "--mm-feature-transport", "cuda_ipc"],
        ),
        (
            "vmm-granularity",
            ["--vmm-granularity", "4KiB", "--feature-size", "6MiB"],
            [*LAUNCH, "--mm-feature-transport", "cuda_vmm"],
        ),
        ("strict", ["--strict"], [*LAUNCH, "--tp", "8", "--mm-feature-transport", "cuda_ipc"]),
        ("quiet", ["-q"], [*LAUNCH, "--tp", "8", "--mm-feature-transport", "cuda_ipc", "--nnodes", "2"]),
        ("exit-zero", ["--exit-zero"], [*LAUNCH, "--mm-feature-transport", "cuda_ipc", "--nnodes", "2"]),
        ("env-flag", ["--env", "SGLANG_MM_FEATURE_CACHE_MB=1GB"], [*LAUNCH, "--mm-feature-transport", "cuda_ipc"]),
        (
            "env-file",
            ["--no-process-env", "--env-file", f"{INPUTS}/pool.env"],
            [*LAUNCH, "--mm-feature-transport", "cuda_ipc"],
        ),
        ("exec-env-refused", ["--exec", "--env", "A=1"], [*LAUNCH]),
        ("exec-exit-zero-refused", ["--exec", "--exit-zero"], [*LAUNCH]),
        ("exec-failing", ["--exec"], [*LAUNCH, "--mm-feature-transport", "cuda_ipc", "--nnodes", "2"]),
        ("release-old", ["--sglang-version", "0.5.11"], [*LAUNCH, "--mm-feature-transport", "cuda_vmm"]),
        ("release-attn-dp", ["--sglang-version", "0.5.20"], [*LAUNCH, "--attn-dp-size", "2", "--tp", "4"]),
        ("gpu-memory-bad", ["--gpu-memory", "100MiB"], [*LAUNCH]),
        ("traffic-held", ["-v", *CHATS, "--max-fallback", "0", "--min-prefix-hit", "20"], TUNED),
        ("traffic-fallback-over", ["--env", "SGLANG_MM_FEATURE_CACHE_MB=2", *CHATS, "--max-fallback", "0"], TUNED),
        ("traffic-prefix-under", ["--format", "json", *CHATS, "--min-prefix-hit", "99.5"], TUNED),
        ("traffic-bound-alone", ["--max-fallback", "0"], TUNED),
        ("traffic-no-kv", [*CHATS], TUNED[:4] + TUNED[6:]),
        ("traffic-vllm-held", ["-v", *VLLM_HOST, *VLLM_CHATS, "--min-prefix-hit", "20"], VLLM_TUNED),
        (
            "traffic-vllm-prefix-under",
            ["--format", "json", *VLLM_HOST, *VLLM_CHATS, "--min-prefix-hit", "50"],
            VLLM_TUNED,
        ),
        ("traffic-vllm-fallback-over", [*VLLM_HOST, *VLLM_VIDEO, "--max-fallback", "0"], [*VLLM_TUNED, *VLLM_DECODE]),
        ("traffic-vllm-no-blocks", [*VLLM_HOST, *VLLM_CHATS], VLLM_TUNED[:3]),
        ("traffic-vllm-hub-model", [*VLLM_HOST, *VLLM_CHATS], ["vllm", "serve", "Qwen/Qwen2.5-VL-7B-Instruct"]),
        ("traffic-vllm-bound-alone", [*VLLM_HOST, "--min-prefix-hit", "20"], VLLM_TUNED),
    ]
    for name, opts, launch in check:
        add(_case(f"check-{name}", ["check", *opts, "--", *launch]))
        if name in {"readme", "serve", "config-invalid", "dp-attention", "qwen3"}:
            for fmt in FORMATS[1:]:
                add(_case(f"check-{name}-{fmt}", ["check", "--format", fmt, *opts, "--", *launch]))
    check_env = [
        ("env-ipc-transport", {"SGLANG_USE_CUDA_IPC_TRANSPORT": "1"}, ["--no-probe-pidfd"], [*LAUNCH]),
        ("env-ipc-transport-bad", {"SGLANG_USE_CUDA_IPC_TRANSPORT": "yes please"}, [], [*LAUNCH]),
        ("env-mb", {"SGLANG_MM_FEATURE_CACHE_MB": "4096"}, [], [*LAUNCH, "--mm-feature-transport", "cuda_ipc"]),
        (
            "env-expandable",
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
            ["--no-probe-pidfd"],
            [*LAUNCH, "--mm-feature-transport", "cuda_ipc"],
        ),
        ("env-format-github", {"MMPOOL_FORMAT": "github"}, [], [*LAUNCH, "--mm-feature-transport", "cuda_ipc"]),
    ]
    for name, env, opts, launch in check_env:
        add(_case(f"check-{name}", ["check", *opts, "--", *launch], env=env))
    add(_case("check-no-launch", ["check"]))
    add(_case("check-no-dashdash", ["check", "python", "-m", "sglang.launch_server"]))

    # simulate
    trace = ["--trace", "examples/trace.jsonl", "--workers", "2"]
    synthetic = ["--feature-size", "50633856", "--size", "256MiB", "--requests", "200"]
    simulate = [
        ("trace", [*trace]),
        ("trace-json", [*trace, "--format", "json"]),
        ("trace-events", [*trace, "--events", "--format", "json"]),
        ("trace-small", [*trace, "--size", "64MiB"]),
        ("trace-one-worker", ["--trace", "examples/trace.jsonl"]),
        ("trace-smallest", [*trace, "--smallest-budget", "--target-fallback", "0"]),
        ("trace-smallest-scan", [*trace, "--smallest-budget", "--target-fallback", "1/100", "--search", "scan"]),
        ("trace-max-events", [*trace, "--max-events", "2"]),
        ("trace-missing", ["--trace", "no/such.jsonl"]),
        ("trace-bad", ["--trace", f"{INPUTS}/bad-trace.jsonl"]),
        ("rate", [*synthetic, "--rate", "20"]),
        ("rate-json", [*synthetic, "--rate", "20", "--format", "json"]),
        ("concurrency", [*synthetic, "--concurrency", "4", "--duration", "0.5"]),
        ("exponential", [*synthetic, "--rate", "50", "--residency", "exponential", "--seed", "7"]),
        ("deferred", [*synthetic, "--rate", "20", "--mode", "deferred", "--hold", "0.5"]),
        ("eager-ack", [*synthetic, "--rate", "20", "--ack-delay", "0.01"]),
        (
            "smallest",
            [*synthetic, "--rate", "20", "--smallest-budget", "--target-fallback", "0.05", "--target-basis", "bytes"],
        ),
        (
            "model",
            [
                "--model",
                "qwen2.5-vl",
                "--image",
                "1920x1080",
                "--rate",
                "10",
                "--requests",
                "100",
                "--workers",
                "2",
                "--tp",
                "8",
            ],
        ),
        ("vmm", [*synthetic, "--rate", "20", "--transport", "cuda_vmm"]),
        ("old-release", [*synthetic, "--rate", "20", "--sglang-version", "0.5.10"]),
        ("release-17", [*synthetic, "--rate", "20", "--sglang-version", "0.5.17"]),
        ("no-workload", ["--rate", "20"]),
        ("rate-and-concurrency", [*synthetic, "--rate", "20", "--concurrency", "2"]),
        ("duration-bad", [*synthetic, "--rate", "20", "--duration", "1e-12"]),
        ("target-bad", [*trace, "--smallest-budget", "--target-fallback", "2"]),
        ("workers-zero", [*synthetic, "--rate", "20", "--workers", "0"]),
    ]
    for name, args in simulate:
        add(_case(f"simulate-{name}", ["simulate", *args]))
    with (ROOT / "examples/trace.jsonl").open() as f:
        stdin = f.read()
    add(_case("simulate-trace-stdin", ["simulate", "--trace", "-", "--workers", "2", "--format", "json"], stdin=stdin))

    # schema and probe (no GPU here: the probe reports what stops it)
    add(_case("schema", ["schema"]))
    probe = [
        ("defaults", []),
        ("json", ["--format", "json"]),
        # no GPU here: JSON shows the plan each probe would check, beside why it cannot run
        (
            "readme",
            ["--size", "1GiB", "--workers", "4", "--tp", "8", "--mem-fraction-static", "0.85", "--format", "json"],
        ),
        ("config", ["--config", "examples/mmpool.yaml", "--format", "json"]),
        ("config-invalid", ["--config", "examples/invalid-mmpool.yaml", "--format", "json"]),
        ("config-invalid-human", ["--config", "examples/invalid-mmpool.yaml"]),
        ("timeout-zero", ["--timeout", "0"]),
        ("fraction-bad", ["--mem-fraction-static", "2"]),
        ("size-over-gpu", ["--size", "300GiB", "--format", "json"]),
    ]
    for name, args in probe:
        add(_case(f"probe-{name}", ["probe", *args]))

    # cache --engine vllm: vLLM's caches over the shipped chat log, and the other engine's flags refused
    chats = ["--model", "qwen2.5-vl", "--from", "examples/traffic/vllm-chats.jsonl"]
    cache = [
        ("vllm-json", ["--engine", "vllm", *chats, "--api-server-count", "2", "--format", "json"]),
        ("vllm-sglang-flag", ["--engine", "vllm", *chats, "--workers", "2"]),
        ("sglang-vllm-flag", [*chats, "--encoder-window", "2"]),
        # SGLang's caches over the README's example: the report, its JSON, --exit-zero, the help's panels
        ("sglang-example", ["--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/chats.jsonl"]),
        (
            "sglang-example-json",
            ["--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/chats.jsonl", "--format", "json"],
        ),
        (
            "sglang-example-exit-zero",
            ["--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/chats.jsonl", "--exit-zero"],
        ),
        ("help", ["--help"]),
    ]
    for name, args in cache:
        add(_case(f"cache-{name}", ["cache", *args]))

    # tune over the README's example: the split of today's launch, of a budget (JSON), the usage errors, its help
    example = ["--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/chats.jsonl"]
    tune = [
        ("sglang-example", [*example, "--max-total-tokens", "2048"]),
        ("sglang-budget-json", [*example, "--max-total-tokens", "2048", "--budget", "220MiB", "--format", "json"]),
        ("sglang-least-work", [*example, "--budget", "150MiB", "--objective", "least-work"]),
        ("no-budget", example),
        ("budget-bad", [*example, "--budget", "12 furlongs"]),
        ("help", ["--help"]),
    ]
    # vLLM's split of the same model over the vLLM example: videos off (the encoder's floor an image), today's blocks
    vllm = ["--engine", "vllm", "--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/vllm-chats.jsonl"]
    no_video = ["--limit-mm-per-prompt", '{"video": 0}']
    tune += [
        ("vllm-example", [*vllm, "--num-gpu-blocks-override", "400", *no_video]),
        ("vllm-budget-json", [*vllm, *no_video, "--budget", "600MiB", "--points", "4", "--format", "json"]),
        ("vllm-no-budget", vllm),
    ]
    for name, args in tune:
        add(_case(f"tune-{name}", ["tune", *args]))

    # trace's --from: the files, as in simulate and cache; the old spelling of the format still read
    bodies = ["trace", "--model", "qwen2.5-vl", "--from"]
    add(_case("trace-from-old-spelling", [*bodies, "openai", "examples/traffic/chats.jsonl", "-o", "/dev/null"]))
    add(_case("trace-from-garbage", [*bodies, "garbage.bin"]))
    curve = ["simulate", "--trace", "examples/trace.jsonl", "--workers", "2", "--curve"]
    add(_case("simulate-curve-negative", [*curve, "-1GB:"]))

    # the library example
    add(_case("example-plan_from_python", ["@python", "examples/plan_from_python.py"]))
    return out


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def _stdin(text: str | None) -> Iterator[Any]:
    """Standard input as a real pipe, as ``cat FILE | mmpool ...`` gives it (readers ask for its fileno)."""
    if text is None:
        yield None
        return
    data = text.encode("utf-8")
    assert len(data) < 60_000, "a corpus stdin must fit in one pipe buffer"
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        yield pipe


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in-process; its exit code, stdout and stderr (text, or base64 when not UTF-8)."""
    from click.testing import CliRunner

    from mmpool_cli.cli import main

    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(CLEARED_PREFIXES)}
    env.update(FIXED_ENV)
    env.update(case.get("env", {}))
    runner = CliRunner()
    argv = case["argv"]
    with _chdir(ROOT), _stdin(case.get("stdin")) as stdin, runner.isolation(input=stdin, env=env) as (out, err, _):
        if argv and argv[0] == "@python":
            code = 0
            runpy.run_path(argv[1], run_name="__main__")
        else:
            code = main(list(argv))
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
    return {"exit": code, "stdout": _text(stdout), "stderr": _text(stderr)}


def _text(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _shown(argv: list[str]) -> list[str]:
    # an argument that is not UTF-8 (a surrogate-escaped byte) is written as \\xNN for the reader
    return [os.fsencode(a).decode("utf-8", "backslashreplace") for a in argv]


def load() -> dict[str, dict[str, Any]]:
    """The recorded corpus by case name: each case's expected exit, stdout and stderr."""
    recorded: list[dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return {case["name"]: case for case in recorded}


def record() -> int:
    table = cases()
    names = [case["name"] for case in table]
    assert len(names) == len(set(names)), "case names must be unique"
    recorded = [{**case, "argv": _shown(case["argv"]), **run_case(case)} for case in table]
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    CORPUS.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(recorded)} invocations in {CORPUS.relative_to(ROOT)}")
    return 0


def differences(case: dict[str, Any], expected: dict[str, Any] | None) -> list[str]:
    """What differs between a case's run now and its recording: ``exit``, ``stdout``, ``stderr``."""
    if expected is None:
        return ["not recorded"]
    got = run_case(case)
    return [key for key in ("exit", "stdout", "stderr") if got[key] != expected[key]]


def check() -> int:
    recorded = load()
    table = cases()
    differ = 0
    for case in table:
        diff = differences(case, recorded.get(case["name"]))
        if diff:
            differ += 1
            print(f"{case['name']}: {', '.join(diff)} differ", file=sys.stderr)
    stale = set(recorded) - {case["name"] for case in table}
    for name in sorted(stale):
        print(f"{name}: recorded but no longer a case", file=sys.stderr)
    print(f"{len(table) - differ} of {len(table)} invocations unchanged")
    return 1 if differ or stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", action="store_true", help="run every case and write the corpus")
    group.add_argument("--check", action="store_true", help="compare every case with the corpus")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    return record() if args.record else check()


if __name__ == "__main__":
    sys.exit(main())
