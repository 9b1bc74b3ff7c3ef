//===- Widen.cpp - f16/bf16 <-> f32 conversion and the widening kernel wrapper ===//
//
// Built for x86-64-v3: the f16 loops become F16C conversions (vcvtph2ps / vcvtps2ph) and the
// bf16 loops integer shifts and a rounding add, eight lanes at a time.
//
#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"

#include <vector>

namespace cpc {

void widenToFloat(DType from, const void *src, float *dst, int64_t n) {
  const uint16_t *in = static_cast<const uint16_t *>(src);
  if (from == DType::BF16) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf16ToFloat(in[i]);
  } else if (from == DType::F16) {
    const _Float16 *h = static_cast<const _Float16 *>(src);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = float(h[i]);
  } else {
    throw RuntimeError(std::string("cannot widen ") + dtypeName(from) + " (f16 or bf16 only)");
  }
}

void narrowFromFloat(DType to, const float *src, void *dst, int64_t n) {
  if (to == DType::BF16) {
    uint16_t *out = static_cast<uint16_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = floatToBF16(src[i]);
  } else if (to == DType::F16) {
    _Float16 *out = static_cast<_Float16 *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = _Float16(src[i]);
  } else {
    throw RuntimeError(std::string("cannot narrow to ") + dtypeName(to) + " (f16 or bf16 only)");
  }
}

void add16(DType t, uint16_t *dst, const uint16_t *a, const uint16_t *b, int64_t n) {
  if (t == DType::BF16) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = floatToBF16(bf16ToFloat(a[i]) + bf16ToFloat(b[i]));
  } else if (t == DType::F16) {
    const _Float16 *x = reinterpret_cast<const _Float16 *>(a), *y = reinterpret_cast<const _Float16 *>(b);
    _Float16 *out = reinterpret_cast<_Float16 *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = _Float16(float(x[i]) + float(y[i]));
  } else {
    throw RuntimeError(std::string("cannot add16 ") + dtypeName(t));
  }
}

namespace kernels {

void runWidened(KernelPtr fn, KernelContext &ctx) {
  // One scratch vector per operand slot, kept per thread and grown as needed: no allocation
  // once a step has run.
  thread_local std::vector<std::vector<float>> scratch;
  size_t slots = ctx.inputs.size() + ctx.outputs.size();
  if (scratch.size() < slots)
    scratch.resize(slots);
  KernelContext wide = ctx;
  auto widen = [&](TensorRef &ref, size_t slot) {
    if (!is16BitFloat(ref.dtype))
      return;
    std::vector<float> &buf = scratch[slot];
    if ((int64_t)buf.size() < ref.numel())
      buf.resize(ref.numel());
    // Results too: a kernel may read its output (an accumulation) before writing it.
    widenToFloat(ref.dtype, ref.data, buf.data(), ref.numel());
    ref.data = buf.data();
    ref.dtype = DType::F32;
  };
  for (size_t i = 0; i < wide.inputs.size(); ++i)
    widen(wide.inputs[i], i);
  for (size_t i = 0; i < wide.outputs.size(); ++i)
    widen(wide.outputs[i], ctx.inputs.size() + i);
  fn(wide);
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (is16BitFloat(ctx.outputs[i].dtype))
      narrowFromFloat(ctx.outputs[i].dtype, wide.outputs[i].as<float>(), ctx.outputs[i].data,
                      ctx.outputs[i].numel());
}

} // namespace kernels
} // namespace cpc
