#!/usr/bin/env bash
# The GPU run behind benchmarks/README.md's "## record": the hook's cost per event on SGLang's pools
# (CPU), six recorded runs of SGLang 0.5.23's own pools across processes (two transports x three
# budgets, under `mmpool record`), and the paired publish-path timing with the decisions check.
# Usage, from the repository root on a machine with an NVIDIA GPU, torch and mmpool's dependencies:
#   benchmarks/record_run.sh SGLANG_WHEEL_OR_DIR OUTDIR      (then: python benchmarks/record_check.py OUTDIR)
# BUDGETS (MiB, default "64 192 1024"), REQUESTS (per worker, 150), REPS (200), BLOCKS (16) change the run;
# STEPS (default "hook gpu publish process") chooses the parts; PROCESS_MIB ("1 48"), RUNS (5), RATE (2000
# rounds a second, two events each) the whole-process runs (record_process.py: plain, then recorded, in turn).
set -uo pipefail
sglang=${1:?SGLang 0.5.23 wheel or folder}; out=${2:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
  cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null; } 2>&1 | tee "$out/machine.txt"
quiet() { grep -v 'WARNING:sglang\|CudaIPCTypes'; }  # SGLang's own pool-full warnings and torch's IPC note
steps=" ${STEPS:-hook gpu publish process} "
if [[ $steps == *" process "* ]]; then  # the whole process, ABAB: plain and recorded runs in turn
  for mib in ${PROCESS_MIB:-1 48}; do
    for i in $(seq "${RUNS:-5}"); do
      python3 benchmarks/record_process.py --sglang "$sglang" --mib "$mib" --out "$out/process-$mib-plain-$i.json"
      python3 -m mmpool_cli record --out "$out/rec-process-$mib-$i" -- python3 benchmarks/record_process.py \
        --sglang "$sglang" --mib "$mib" --out "$out/process-$mib-recorded-$i.json"
    done
  done
  for i in $(seq 3); do  # a realistic rate: the CPU time the hook adds
    python3 benchmarks/record_process.py --sglang "$sglang" --rate "${RATE:-2000}" --out "$out/process-rate-plain-$i.json"
    python3 -m mmpool_cli record --out "$out/rec-process-rate-$i" -- python3 benchmarks/record_process.py \
      --sglang "$sglang" --rate "${RATE:-2000}" --out "$out/process-rate-recorded-$i.json"
  done
  python3 benchmarks/record_process.py --summary "$out"/process-*.json | tee "$out/process-summary.json"
fi
[[ $steps == *" hook "* ]] &&
  python3 benchmarks/record_hook.py --sglang "$sglang" --loops 20000 --blocks 21 --out "$out/hook-cpu.json" 2>&1 | tail -4
[[ $steps == *" gpu "* ]] && for t in cuda_ipc cuda_vmm; do
  for b in ${BUDGETS:-64 192 1024}; do
    timeout 150 python3 -m mmpool_cli record --out "$out/rec-$t-$b" -- python3 benchmarks/record_gpu.py \
      --sglang "$sglang" --transport "$t" --budget-mib "$b" --requests "${REQUESTS:-150}" \
      --truth "$out/truth-$t-$b" 2>&1 | quiet | tail -6
  done
done
[[ $steps == *" publish "* ]] && timeout 400 python3 -m mmpool_cli record --out "$out/rec-publish" -- python3 benchmarks/record_publish.py \
  --sglang "$sglang" --reps "${REPS:-200}" --blocks "${BLOCKS:-16}" --out "$out/publish.json" 2>&1 | quiet | tail -30
