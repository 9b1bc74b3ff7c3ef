//===- Widen.cpp - f16/bf16 <-> f32 conversion and the widening kernel wrapper ===//
//
// Built for x86-64-v3: the f16 loops become F16C conversions (vcvtph2ps / vcvtps2ph) and the
// bf16 loops integer shifts and a rounding add, eight lanes at a time.
//
#include "kernels/Float16.h"
#include "kernels/cpu/GrowingScratch.h"
#include "kernels/cpu/Kernel.h"

#include <algorithm>
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

float *scratch16(int64_t floats) {
  thread_local GrowingScratch scratch;
  return static_cast<float *>(scratch.reserve((size_t)std::max<int64_t>(floats, 0) * sizeof(float)));
}

namespace {
/// How an elementwise step splits into chunks: every operand either has the result's n
/// elements or broadcasts over its leading dims (a bias, a scalar: its shape, leading 1s
/// dropped, is the result's trailing dims), all such with `inner` elements. A chunk is `rows`
/// rows of `inner` elements (rows * inner <= kWidenChunk, at least one row); 0 rows: no chunking.
struct Chunking {
  int64_t n = 0, inner = 1, rows = 0;
};

Chunking chunking(const KernelContext &ctx) {
  Chunking c;
  if (ctx.outputs.empty())
    return c;
  const std::vector<int64_t> &shape = ctx.outputs[0].shape;
  c.n = ctx.outputs[0].numel();
  int64_t inner = -1;
  auto fits = [&](const TensorRef &t) {
    if (t.numel() == c.n)
      return true;
    size_t lead = 0;
    while (lead < t.shape.size() && t.shape[lead] == 1)
      ++lead;
    size_t dims = t.shape.size() - lead;
    if (dims > shape.size() || !std::equal(t.shape.begin() + lead, t.shape.end(), shape.end() - dims))
      return false;
    if (inner >= 0 && inner != t.numel())
      return false;
    inner = t.numel();
    return true;
  };
  if (!std::all_of(ctx.inputs.begin(), ctx.inputs.end(), fits) ||
      !std::all_of(ctx.outputs.begin(), ctx.outputs.end(), [&](const TensorRef &t) { return t.numel() == c.n; }))
    return c;
  c.inner = inner > 0 ? inner : 1;
  c.rows = c.n == 0 ? 0 : std::max<int64_t>(1, std::min(c.n, kWidenChunk) / c.inner);
  return c;
}

int64_t count16(const KernelContext &ctx) {
  auto is16 = [](const TensorRef &t) { return is16BitFloat(t.dtype); };
  return std::count_if(ctx.inputs.begin(), ctx.inputs.end(), is16) +
         std::count_if(ctx.outputs.begin(), ctx.outputs.end(), is16);
}


/// Floats of scratch an elementwise step chunked as `c` needs: a chunk per 16-bit operand.
int64_t chunkedScratch(const KernelContext &ctx, const Chunking &c) {
  return count16(ctx) * std::min(c.n, c.rows * c.inner);
}
} // namespace

int64_t widenedScratch(const KernelContext &ctx, bool elementwise) {
  if (Chunking c = chunking(ctx); elementwise && c.rows > 0)
    return chunkedScratch(ctx, c);
  int64_t floats = 0;
  for (const auto *list : {&ctx.inputs, &ctx.outputs})
    for (const TensorRef &t : *list)
      if (is16BitFloat(t.dtype))
        floats += t.numel();
  return floats;
}

void runWidened(KernelPtr fn, KernelContext &ctx) {
  float *scratch = scratch16(widenedScratch(ctx, false));
  KernelContext wide = ctx;
  auto widen = [&](TensorRef &ref) {
    if (!is16BitFloat(ref.dtype))
      return;
    // Results too: a kernel may read its output (an accumulation) before writing it.
    widenToFloat(ref.dtype, ref.data, scratch, ref.numel());
    ref.data = scratch;
    ref.dtype = DType::F32;
    scratch += ref.numel();
  };
  for (TensorRef &t : wide.inputs)
    widen(t);
  for (TensorRef &t : wide.outputs)
    widen(t);
  fn(wide);
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (is16BitFloat(ctx.outputs[i].dtype))
      narrowFromFloat(ctx.outputs[i].dtype, wide.outputs[i].as<float>(), ctx.outputs[i].data,
                      ctx.outputs[i].numel());
}

void runWidenedElementwise(KernelPtr fn, KernelContext &ctx) {
  Chunking c = chunking(ctx);
  if (c.rows == 0)
    return runWidened(fn, ctx);
  int64_t chunk = std::min(c.n, c.rows * c.inner);
  float *scratch = scratch16(chunkedScratch(ctx, c));
  KernelContext part = ctx;
  // Each 16-bit operand has a chunk of scratch; the others are viewed in place. A broadcast
  // operand is the same `inner` elements in every chunk.
  auto view = [&](const TensorRef &whole, TensorRef &piece, int64_t begin, int64_t count, float *&slot) {
    bool full = whole.numel() == c.n;
    int64_t from = full ? begin : 0, elements = full ? count : whole.numel();
    piece.shape = full ? std::vector<int64_t>{count / c.inner, c.inner} : std::vector<int64_t>{whole.numel()};
    if (!is16BitFloat(whole.dtype)) {
      piece.data = static_cast<uint8_t *>(whole.data) + from * dtypeSize(whole.dtype);
      return;
    }
    piece.dtype = DType::F32;
    piece.data = slot;
    widenToFloat(whole.dtype, static_cast<uint8_t *>(whole.data) + from * 2, slot, elements);
    slot += chunk;
  };
  for (int64_t begin = 0; begin < c.n; begin += chunk) {
    int64_t count = std::min(chunk, c.n - begin);
    float *slot = scratch;
    for (size_t i = 0; i < ctx.inputs.size(); ++i)
      view(ctx.inputs[i], part.inputs[i], begin, count, slot);
    for (size_t i = 0; i < ctx.outputs.size(); ++i)
      view(ctx.outputs[i], part.outputs[i], begin, count, slot);
    fn(part);
    for (size_t i = 0; i < ctx.outputs.size(); ++i)
      if (is16BitFloat(ctx.outputs[i].dtype))
        narrowFromFloat(ctx.outputs[i].dtype, part.outputs[i].as<float>(),
                        static_cast<uint8_t *>(ctx.outputs[i].data) + begin * 2, count);
  }
}

} // namespace kernels
} // namespace cpc
