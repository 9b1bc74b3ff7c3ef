//===- Collectives.cu - kernels the NCCL communicator queues ---------------===//
#include "kernels/cuda/CollectiveMath.h"
#include "kernels/cuda/Collectives.h"
#include "kernels/cuda/CudaCommon.cuh"

#include <algorithm>
#include <string>

namespace cpc::kernels::cuda {
namespace {

// A grid-stride loop of at most 1024 blocks: the buffers are a collective's (small: a max is a
// softmax's row statistics), and the launch needs no device query.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

template <typename Key, typename Bits>
__global__ void toKeysKernel(const Bits *values, Key *keys, int64_t n, FloatFormat<Bits> f) {
  CPC_GRID_STRIDE(i, n)
    keys[i] = maxKey<Key>(values[i], f); // in place when Key and Bits are as wide: read before written
}

template <typename Key, typename Bits>
__global__ void fromKeysKernel(const Key *keys, Bits *values, int64_t n, FloatFormat<Bits> f) {
  CPC_GRID_STRIDE(i, n)
    values[i] = bitsOfMaxKey<Key>(keys[i], f);
}

template <typename Key, typename Bits>
void convert(bool toKeys, const void *in, void *out, int64_t count, FloatFormat<Bits> f, cudaStream_t stream) {
  if (count <= 0)
    return;
  int64_t blocks = std::min(blocksFor(count, kThreads), kMaxBlocks);
  if (toKeys)
    toKeysKernel<Key, Bits><<<blocks, kThreads, 0, stream>>>((const Bits *)in, (Key *)out, count, f);
  else
    fromKeysKernel<Key, Bits><<<blocks, kThreads, 0, stream>>>((const Key *)in, (Bits *)out, count, f);
  checkCuda(cudaGetLastError(), toKeys ? "max keys" : "max keys back");
}

void convertAny(bool toKeys, const void *in, void *out, int64_t count, DType type, cudaStream_t stream) {
  switch (type) {
  case DType::F32: return convert<int32_t>(toKeys, in, out, count, kF32Format, stream);
  case DType::F64: return convert<int64_t>(toKeys, in, out, count, kF64Format, stream);
  case DType::F16: return convert<int32_t>(toKeys, in, out, count, kF16Format, stream);
  case DType::BF16: return convert<int32_t>(toKeys, in, out, count, kBF16Format, stream);
  default: throw RuntimeError(std::string("no max keys for ") + dtypeName(type));
  }
}

} // namespace

size_t maxKeyBytes(DType type) { return type == DType::F64 ? 8 : 4; }

void toMaxKeys(const void *values, void *keys, int64_t count, DType type, cudaStream_t stream) {
  convertAny(true, values, keys, count, type, stream);
}
void fromMaxKeys(const void *keys, void *values, int64_t count, DType type, cudaStream_t stream) {
  convertAny(false, keys, values, count, type, stream);
}

} // namespace cpc::kernels::cuda
