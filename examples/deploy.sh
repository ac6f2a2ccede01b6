#!/usr/bin/env bash
# Deployment script: check the launch and its environment, then start SGLang only if the
# check passes. `mmpool check --exec` replaces itself with the launch command (no shell),
# so signals and the exit status belong to SGLang. Exit 1: findings; exit 2: usage error.
set -euo pipefail

export SGLANG_MM_FEATURE_CACHE_MB="${SGLANG_MM_FEATURE_CACHE_MB:-1024}"
MODEL="${MODEL:-Qwen/Qwen2.5-VL-7B-Instruct}"

exec mmpool check --exec --strict -- \
    python -m sglang.launch_server \
    --model-path "$MODEL" \
    --tp-size 8 \
    --tokenizer-worker-num 4 \
    --mm-feature-transport cuda_ipc
