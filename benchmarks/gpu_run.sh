#!/usr/bin/env bash
# Run mmpool's GPU tests and the probe benchmark on a machine with an NVIDIA GPU.
# Usage: benchmarks/gpu_run.sh [OUTDIR]   (default: $OUT, else ./gpu-run)
# Needs python3 with torch, nvidia-ml-py and mmpool's dependencies (typer 0.28, pydantic, rich,
# PyYAML); wheels in .whl/ are installed first when present (for machines without a package index).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-run}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mmpool-site .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/mmpool-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
{
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
    python3 -c "import sys, torch; print('python:', sys.version.split()[0], '| torch:', torch.__version__, '| cuda:', torch.version.cuda)"
} | tee "$out/machine.txt"
python3 -m pytest tests/probe/ --run-gpu -v -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.txt"
tests=${PIPESTATUS[0]}
python3 -m mmpool_cli probe 2>&1 | tee "$out/probe-defaults.txt"
python3 -m mmpool_cli probe --size 1GiB --workers 4 --tp 8 --mem-fraction-static 0.85 2>&1 | tee "$out/probe-w4-tp8.txt"
python3 benchmarks/probe.py --runs 3 --out "$out" > "$out/benchmark.txt" 2>&1
tail -n 40 "$out/benchmark.txt"
exit "$tests"
