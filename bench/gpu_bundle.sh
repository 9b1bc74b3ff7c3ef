#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a GPU machine that cannot build cpc (no MLIR, ONNX,
# OpenMPI or OpenBLAS packages, no network: the lent H200s have CUDA, PyTorch and numpy only)
# into one file, made here from build/ (scripts/build with the CUDA backend):
#   bin/   cpc-run and cpc-gpu-tests, stripped
#   lib/   the shared libraries they load that a bare Linux lacks (ldd), but not CUDA's own:
#          the GPU machine's cudart, cuBLASLt, cuDNN and NCCL are used there
#   mae/   the MAE-tiny plans (cpu, and each GPU layout), inputs and the cpu plan's run, and the
#          MAE-base/large bf16 plans without weights (bench/gpu_check.py --prepare)
# Usage: bench/gpu_bundle.sh [OUT.tar.xz]    (default .gpu-bundle/cpc-gpu.tar.xz, git-ignored)
# Then, on the GPU machine: bench/gpu_check.sh --bundle .gpu-bundle/cpc-gpu.tar.xz
# (with the device tool: carry [".gpu-bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu-bundle/cpc-gpu.tar.xz}
[ -x build/bin/cpc-gpu-tests ] || { echo "gpu_bundle: build/ has no CUDA backend (scripts/build with CUDA)" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in cpc-run cpc-gpu-tests; do
  strip -o "$stage/bin/$b" "build/bin/$b"
done
# Every library the binaries resolve here, except the C runtime every Linux has and CUDA's.
for b in cpc-run cpc-gpu-tests; do
  ldd "build/bin/$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libstdc++.so.*|libgcc_s.so.*) ;;
    libcudart.so.*|libcublas*.so.*|libcudnn*.so.*|libnccl.so.*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
/usr/bin/python3 bench/gpu_check.py --prepare "$stage/mae"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" .
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/mae" | grep -c '\.plan$') plans"
