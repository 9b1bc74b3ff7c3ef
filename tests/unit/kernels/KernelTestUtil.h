//===- KernelTestUtil.h - building kernel calls by hand in tests ----------===//
#ifndef CPC_TESTS_UNIT_KERNELS_KERNELTESTUTIL_H
#define CPC_TESTS_UNIT_KERNELS_KERNELTESTUTIL_H

#include "kernels/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <string>
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

/// A rank on a device mesh, for kernels that read their block from it.
struct RankOnMesh {
  int rank = 0;
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
};

/// Runs the CPU kernel registered for `op` (failing the test when there is none), as `where`'s
/// rank when given.
inline void run(OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs,
                const nlohmann::json &attrs = nlohmann::json::object(), int threads = 2,
                const RankOnMesh *where = nullptr) {
  KernelFn fn = KernelRegistry::cpu().find(op);
  ASSERT_NE(fn, nullptr) << op;
  KernelContext ctx;
  ctx.op = op;
  ctx.inputs = std::move(ins);
  ctx.outputs = std::move(outs);
  ctx.setAttrs(attrs);
  ctx.threads = threads;
  if (where) {
    ctx.rank = where->rank;
    ctx.meshShape = &where->shape;
    ctx.meshAxes = &where->axes;
  }
  fn(ctx);
}

} // namespace cpc::kernels::testing

#endif
