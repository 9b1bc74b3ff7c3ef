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
#        bench/gpu_check.sh --bundle FILE.tar.xz         (steps 2-4 from bench/gpu_bundle.sh's file, on a
#                                                        GPU machine that cannot build cpc; --quick: 2-3)
#        --log-dir DIR   keeps the gpu tests' log and the speed plans' op profiles there (with --bundle)
# With --bundle every step runs under a time limit and a failing step does not stop the next: GPU
# time is lent by the minute, so one call reports everything it can. The exit code is 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
skip_build=0 quick=0 bundle="" log_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) skip_build=1 ;;
    --quick) quick=1 ;;
    --bundle) bundle=${2:?"gpu_check: --bundle needs a file"}; shift ;;
    --log-dir) log_dir=${2:?"gpu_check: --log-dir needs a folder"}; shift ;;
    *) echo "gpu_check: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed)" >&2
  exit 1
fi
nvidia-smi -L

if [ -n "$bundle" ]; then
  [ -f "$bundle" ] || { echo "gpu_check: no bundle $bundle (make it with bench/gpu_bundle.sh)" >&2; exit 1; }
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  tar -C "$dir" -xJf "$bundle"
  # CUDA's libraries as this machine has them: the toolkit's, and PyTorch's nvidia-* packages.
  # Only cpc's own programs get the bundle's libraries: python and torch keep the machine's.
  libs="$dir/lib"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(
      python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null |
        while read -r p; do find "$p" -name 'lib*.so*' -printf '%h\n'; done | sort -u || true); do
    if [ -d "$d" ]; then libs="$libs:$d"; fi
  done
  if [ -n "${LD_LIBRARY_PATH:-}" ]; then libs="$libs:$LD_LIBRARY_PATH"; fi
  if LD_LIBRARY_PATH="$libs" ldd "$dir/bin/cpc-gpu-tests" "$dir/bin/cpc-run" | grep "not found"; then
    echo "gpu_check: the libraries above are missing (searched $libs)" >&2
    exit 1
  fi
  log_dir=${log_dir:-$dir}
  mkdir -p "$log_dir"
  failed=0
  echo "== gpu tests (CUDA kernels against the CPU kernels, device, NCCL on one rank)"
  log="$log_dir/gpu-tests.log"
  : >"$log"
  # Suite by suite, each under a time limit: a kernel that faults or hangs costs its suite, not the
  # rest of the run (a CUDA fault poisons the process's context, so later tests would fail too).
  suites=$(LD_LIBRARY_PATH="$libs" "$dir/bin/cpc-gpu-tests" --gtest_list_tests | awk '/^[^ ]/ && $1 ~ /[.]$/ {print $1}')
  for suite in $suites; do
    set +e
    LD_LIBRARY_PATH="$libs" timeout -k 5 "${CPC_GPU_SUITE_LIMIT:-120}" "$dir/bin/cpc-gpu-tests" --gtest_brief=1 \
      --gtest_filter="$suite*" >"$log.suite" 2>&1
    rc=$?
    set -e
    cat "$log.suite" >>"$log"
    summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$log.suite" | tr '\n' ' ')
    echo "$suite ${summary:-no summary} (exit $rc$([ "$rc" = 124 ] && echo ", over the time limit"))"
    if [ "$rc" != 0 ]; then
      grep -E "^\[  FAILED  \]|Failure|error" "$log.suite" | head -20 || true
      failed=1
    elif grep -q "SKIPPED" "$log.suite"; then
      grep -B2 "SKIPPED" "$log.suite" | head -10 || true
      echo "gpu_check: $suite has tests skipped on a GPU machine" >&2
      failed=1
    fi
  done
  rm -f "$log.suite"
  echo "== MAE training: cuda plans against the cpu plan's run (made with the bundle)"
  python_args=(--prepared "$dir/mae" --log-dir "$log_dir")
  [ "$quick" = 1 ] && python_args+=(--quick)
  CPC_BIN="$dir/bin" CPC_LIBRARY_PATH="$libs" python3 bench/gpu_check.py "${python_args[@]}" || failed=1
  exit "$failed"
fi
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
