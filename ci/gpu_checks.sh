#!/usr/bin/env bash
# The GPU checks, as one prepared script for a machine with CUDA (run from the repo root).
# Saves every figure under ${OUT:-gpu-results}/. Takes a few minutes after the build.
#
#   1. CUDA tests of the suite (prefetcher on CUDA == CPU path, batch transforms on CUDA)
#   2. bench/check_prefetcher_cuda.py: exactness vs the CPU path and data-wait with a
#      fixed-time consumer (overlap of H2D copy + YUV with the consumer's step)
#   3. python -m fastprep.bench on the real CUDA trainer, with --check-syncs
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-results}"
mkdir -p "$OUT"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())" \
  | tee "$OUT/device.txt"
pip install -q --no-build-isolation -e ".[test,bench]" >"$OUT/install.log" 2>&1
python -m pytest -q tests/test_data.py -k cuda 2>&1 | tee "$OUT/pytest_cuda.txt"
python bench/check_prefetcher_cuda.py --json "$OUT/prefetcher.json" 2>&1 | tee "$OUT/prefetcher.txt"
python -m fastprep.bench --quick --device cuda --check-syncs --no-progress \
  --json "$OUT/bench_cuda.json" --plot "$OUT/bench_cuda.png" 2>&1 | tee "$OUT/bench_cuda.txt"
