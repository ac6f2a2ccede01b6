#!/usr/bin/env bash
# The GPU run behind benchmarks/README.md's "## record": the hook's cost per event on SGLang's pools
# (CPU), six recorded runs of SGLang 0.5.23's own pools across processes (two transports x three
# budgets, under `mmpool record`), and the paired publish-path timing with the decisions check.
# Usage, from the repository root on a machine with an NVIDIA GPU, torch and mmpool's dependencies:
#   benchmarks/record_run.sh SGLANG_WHEEL_OR_DIR OUTDIR      (then: python benchmarks/record_check.py OUTDIR)
# BUDGETS (MiB, default "64 192 1024"), REQUESTS (per worker, 150), REPS (200), BLOCKS (16) change the run.
set -uo pipefail
sglang=${1:?SGLang 0.5.23 wheel or folder}; out=${2:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
  cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null; } 2>&1 | tee "$out/machine.txt"
quiet() { grep -v 'WARNING:sglang\|CudaIPCTypes'; }  # SGLang's own pool-full warnings and torch's IPC note
python3 benchmarks/record_hook.py --sglang "$sglang" --loops 20000 --blocks 21 --out "$out/hook-cpu.json" 2>&1 | tail -4
for t in cuda_ipc cuda_vmm; do
  for b in ${BUDGETS:-64 192 1024}; do
    timeout 150 python3 -m mmpool_cli record --out "$out/rec-$t-$b" -- python3 benchmarks/record_gpu.py \
      --sglang "$sglang" --transport "$t" --budget-mib "$b" --requests "${REQUESTS:-150}" \
      --truth "$out/truth-$t-$b" 2>&1 | quiet | tail -6
  done
done
timeout 400 python3 -m mmpool_cli record --out "$out/rec-publish" -- python3 benchmarks/record_publish.py \
  --sglang "$sglang" --reps "${REPS:-200}" --blocks "${BLOCKS:-16}" --out "$out/publish.json" 2>&1 | quiet | tail -30
