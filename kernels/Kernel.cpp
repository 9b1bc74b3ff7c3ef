//===- Kernel.cpp - the registry, and what every kernel's context offers --===//
#include "kernels/Kernel.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/Float16.h"
#include "runtime/Plan.h"

#include <algorithm>

namespace cpc::kernels {

void KernelContext::setAttrs(const nlohmann::json &json) {
  try {
    attrs = decodeOpAttrs(op, json);
  } catch (const RuntimeError &e) {
    fail(e.what());
  }
}

DType stepDType(const KernelContext &ctx) {
  if (!ctx.outputs.empty())
    return ctx.outputs[0].dtype;
  return ctx.inputs.empty() ? DType::F32 : ctx.inputs[0].dtype;
}

void KernelContext::fail(const std::string &message) const { throw RuntimeError(std::string(opName(op)) + ": " + message); }

IndexBlock indexBlock(const KernelContext &ctx, int64_t local) {
  IndexBlock block{0, local, local};
  if (!ctx.attrs.has(AttrId::blockAxes))
    return block;
  if (!ctx.meshShape || !ctx.meshAxes || ctx.meshShape->size() != ctx.meshAxes->size())
    ctx.fail("block_axes without a device mesh");
  auto [index, parts] =
      meshShardIndex(ctx.rank, *ctx.meshShape, *ctx.meshAxes, ctx.attrs.blockAxes);
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
    registerFusedKernels(r);
    registerAttentionKernels(r);
    return r;
  }();
  return registry;
}

void KernelRegistry::merge(const KernelRegistry &other) {
  for (const auto &[key, entry] : other.table_)
    table_[key] = entry;
  for (const auto &[op, fn] : other.workspace_)
    workspace_[op] = fn;
}

KernelWorkspace KernelRegistry::workspace(OpKind op, const KernelContext &ctx) const {
  auto it = workspace_.find(op);
  return it == workspace_.end() ? KernelWorkspace{} : it->second(ctx);
}

const KernelRegistry::Entry *KernelRegistry::lookup(OpKind op, DeviceKind device, DType dtype) const {
  auto it = table_.find(Key{op, device, (int)dtype});
  if (it == table_.end())
    it = table_.find(Key{op, device, kAnyType});
  return it == table_.end() ? nullptr : &it->second;
}

KernelFn KernelRegistry::find(OpKind op, DeviceKind device, DType dtype) const {
  const Entry *entry = lookup(op, device, dtype);
  if (!entry)
    return nullptr;
  KernelPtr fn = entry->fn;
  if (entry->storage == Storage16::Native)
    return fn;
  bool elementwise = entry->storage == Storage16::Elementwise;
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

int64_t KernelRegistry::scratchBytes(OpKind op, const KernelContext &ctx) const {
  const Entry *entry = lookup(op, DeviceKind::Cpu, stepDType(ctx));
  if (!entry)
    return 0;
  switch (entry->storage) {
  case Storage16::Native: return entry->scratch ? entry->scratch(ctx) * 4 : 0;
  case Storage16::Widened: return widenedScratch(ctx, false) * 4;
  case Storage16::Elementwise: return widenedScratch(ctx, true) * 4;
  }
  return 0;
}

std::vector<OpKind> KernelRegistry::kinds(DeviceKind device) const {
  std::vector<OpKind> out;
  for (auto &[key, entry] : table_)
    if (key.device == device && (out.empty() || out.back() != key.op))
      out.push_back(key.op);
  return out;
}

std::vector<DType> KernelRegistry::dtypes(OpKind op, DeviceKind device) const {
  std::vector<DType> out;
  for (auto &[key, entry] : table_)
    if (key.op == op && key.device == device && key.dtype != kAnyType)
      out.push_back((DType)key.dtype);
  return out;
}

} // namespace cpc::kernels
