#!/usr/bin/env bash
# The GPU backend's check, for a machine with NVIDIA GPUs (sm_80 or sm_90), in under 10 minutes:
#   1. builds (Release, CUDA backend) unless build/ is already built for this tree;
#   2. runs the `gpu` tests: every CUDA kernel against its CPU twin, the device, NCCL (none may
#      be skipped here);
#   3. trains MAE-tiny 20 steps with the cuda plan against the cpu plan (loss and grad_norm per
#      step, final parameters, within 1e-4), and with two or more GPUs dp2 and tp2 over NCCL;
#   4. prints the MAE-base and MAE-large bf16 train-step time and MFU, and PyTorch's on the same
#      GPU when torch with CUDA is installed.
# Usage: bench/gpu_check.sh [--skip-build] [--quick]   (--quick: steps 2-3 only)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
skip_build=0 quick=0
for arg in "$@"; do
  case "$arg" in
    --skip-build) skip_build=1 ;;
    --quick) quick=1 ;;
    *) echo "gpu_check: unknown option $arg" >&2; exit 1 ;;
  esac
done
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed)" >&2
  exit 1
fi
nvidia-smi -L
if [ "$skip_build" = 0 ]; then
  CPC_JOBS=${CPC_JOBS:-$(nproc)} scripts/build
fi
grep -q "CPC_WITH_CUDA:INTERNAL=ON\|cpc: CUDA backend ON" build/CMakeCache.txt 2>/dev/null ||
  [ -x build/bin/cpc-gpu-tests ] || { echo "gpu_check: build/ has no CUDA backend" >&2; exit 1; }

echo "== gpu tests (CUDA kernels against the CPU kernels, device, NCCL)"
log=$(mktemp)
ctest --test-dir build -L gpu --output-on-failure -j 4 | tee "$log"
if grep -q "(Skipped)" "$log"; then
  echo "gpu_check: some gpu tests were skipped on a GPU machine" >&2
  exit 1
fi

echo "== MAE training: cuda plan against cpu plan"
python_args=()
[ "$quick" = 1 ] && python_args+=(--quick)
exec /usr/bin/python3 bench/gpu_check.py "${python_args[@]}"
