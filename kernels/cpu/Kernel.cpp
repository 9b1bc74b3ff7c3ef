//===- Kernel.cpp - registry and attribute helpers ------------------------===//
#include "kernels/cpu/Kernel.h"
#include "kernels/Float16.h"
#include "runtime/Plan.h"

#include <algorithm>

namespace cpc::kernels {

const nlohmann::json &KernelContext::attr(const char *name) const {
  auto it = attrs->find(name);
  if (it == attrs->end())
    fail(std::string("missing attribute '") + name + "'");
  return *it;
}

bool KernelContext::attrBool(const char *name, bool fallback) const {
  auto it = attrs->find(name);
  return it == attrs->end() ? fallback : it->get<bool>();
}

std::string KernelContext::attrString(const char *name, const std::string &fallback) const {
  auto it = attrs->find(name);
  return it == attrs->end() ? fallback : it->get<std::string>();
}

void KernelContext::fail(const std::string &message) const { throw RuntimeError(op + ": " + message); }

IndexBlock indexBlock(const KernelContext &ctx, int64_t local) {
  IndexBlock block{0, local, local};
  auto it = ctx.attrs->find("block_axes");
  if (it == ctx.attrs->end())
    return block;
  if (!ctx.meshShape || !ctx.meshAxes || ctx.meshShape->size() != ctx.meshAxes->size())
    ctx.fail("block_axes without a device mesh");
  auto [index, parts] =
      meshShardIndex(ctx.rank, *ctx.meshShape, *ctx.meshAxes, it->get<std::vector<std::string>>());
  return {index * local, local, parts * local};
}

const KernelRegistry &KernelRegistry::cpu() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    registerElementwiseKernels(r);
    registerReductionKernels(r);
    registerNormalizationKernels(r);
    registerLinalgKernels(r);
    registerMovementKernels(r);
    registerIndexingKernels(r);
    registerRandomKernels(r);
    registerBackwardKernels(r);
    registerOptimizerKernels(r);
    registerVariableKernels(r);
    return r;
  }();
  return registry;
}

KernelFn KernelRegistry::find(const std::string &op) const {
  auto it = table_.find(op);
  if (it == table_.end())
    return nullptr;
  KernelPtr fn = it->second.fn;
  if (it->second.storage == Storage16::Native)
    return fn;
  bool elementwise = it->second.storage == Storage16::Elementwise;
  return [fn, elementwise](KernelContext &ctx) {
    auto is16 = [](const TensorRef &t) { return is16BitFloat(t.dtype); };
    if (std::none_of(ctx.inputs.begin(), ctx.inputs.end(), is16) &&
        std::none_of(ctx.outputs.begin(), ctx.outputs.end(), is16))
      fn(ctx);
    else if (elementwise)
      runWidenedElementwise(fn, ctx);
    else
      runWidened(fn, ctx);
  };
}

int64_t KernelRegistry::scratchBytes(const std::string &op, const KernelContext &ctx) const {
  auto it = table_.find(op);
  if (it == table_.end())
    return 0;
  switch (it->second.storage) {
  case Storage16::Native: return it->second.scratch ? it->second.scratch(ctx) * 4 : 0;
  case Storage16::Widened: return widenedScratch(ctx, false) * 4;
  case Storage16::Elementwise: return widenedScratch(ctx, true) * 4;
  }
  return 0;
}

std::vector<std::string> KernelRegistry::names() const {
  std::vector<std::string> out;
  for (auto &[name, entry] : table_)
    out.push_back(name);
  return out;
}

} // namespace cpc::kernels
