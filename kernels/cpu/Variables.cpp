//===- Variables.cpp - writes into persistent variables -------------------===//
#include "kernels/cpu/Kernel.h"

#include <cstring>

namespace cpc::kernels {

namespace {
/// cpc.assign: copies the value (input 0) into the variable's buffer (output 0). The plan
/// builder usually lets the producer write the variable directly; this is the fallback.
void assignKernel(KernelContext &ctx) {
  const TensorRef &src = ctx.inputs.at(0), &dst = ctx.outputs.at(0);
  if (src.bytes() != dst.bytes() || src.dtype != dst.dtype)
    ctx.fail("value and variable differ in type or size");
  if (src.data != dst.data)
    std::memmove(dst.data, src.data, src.bytes());
}
} // namespace

void registerVariableKernels(KernelRegistry &registry) { registry.add(OpKind::Assign, assignKernel, Storage16::Native); }

} // namespace cpc::kernels
