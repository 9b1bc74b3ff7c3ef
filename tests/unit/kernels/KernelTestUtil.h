//===- KernelTestUtil.h - building kernel calls by hand in tests ----------===//
#ifndef CPC_TESTS_UNIT_KERNELS_KERNELTESTUTIL_H
#define CPC_TESTS_UNIT_KERNELS_KERNELTESTUTIL_H

#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <vector>

namespace cpc::kernels::testing {

/// A view of `v` as a tensor of `shape` and element type `t`.
template <typename T>
TensorRef ref(std::vector<T> &v, std::vector<int64_t> shape, DType t = DType::F32) {
  TensorRef r;
  r.data = v.data();
  r.dtype = t;
  r.shape = std::move(shape);
  return r;
}

/// Runs the CPU kernel registered for `op` (failing the test when there is none).
inline void run(const char *op, std::vector<TensorRef> ins, std::vector<TensorRef> outs,
                const nlohmann::json &attrs = nlohmann::json::object(), int threads = 2) {
  KernelFn fn = KernelRegistry::cpu().find(op);
  ASSERT_NE(fn, nullptr) << op;
  KernelContext ctx;
  ctx.op = op;
  ctx.inputs = std::move(ins);
  ctx.outputs = std::move(outs);
  ctx.attrs = &attrs;
  ctx.threads = threads;
  fn(ctx);
}

} // namespace cpc::kernels::testing

#endif
