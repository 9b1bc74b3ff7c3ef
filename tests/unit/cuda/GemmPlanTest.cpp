//===- GemmPlanTest.cpp - the CUDA matmul's cuBLASLt layouts, on the host --===//
//
// Each case plans cpc.matmul as the CUDA kernel does (kernels/cuda/GemmPlan.h), runs the plan
// through a host loop that indexes exactly as cuBLASLt does (column-major matrices with the
// plan's leading dims, transposes, strided batches and host loops) and compares the result
// with the CPU kernel. Every read is bounds-checked against its operand and every result
// element must be written exactly once, so a wrong stride or leading dim cannot pass.
//
#include "kernels/cuda/GemmPlan.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

/// Values stored as element type `t` (bytes), and read back as doubles.
std::vector<uint8_t> store(DType t, const std::vector<double> &v) {
  std::vector<uint8_t> bytes(v.size() * dtypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32)
      reinterpret_cast<float *>(bytes.data())[i] = (float)v[i];
    else if (t == DType::F64)
      reinterpret_cast<double *>(bytes.data())[i] = v[i];
    else
      reinterpret_cast<uint16_t *>(bytes.data())[i] = store16(t, (float)v[i]);
  }
  return bytes;
}
double load(DType t, const std::vector<uint8_t> &bytes, int64_t i) {
  if (t == DType::F32)
    return reinterpret_cast<const float *>(bytes.data())[i];
  if (t == DType::F64)
    return reinterpret_cast<const double *>(bytes.data())[i];
  return load16(t, reinterpret_cast<const uint16_t *>(bytes.data())[i]);
}

struct Case {
  std::vector<int64_t> lhs, rhs, out;
  bool tl = false, tr = false;
};

std::string describe(const Case &c) {
  return shapeString(c.lhs) + (c.tl ? "^T" : "") + " x " + shapeString(c.rhs) + (c.tr ? "^T" : "") + " -> " +
         shapeString(c.out);
}

/// The CPU kernel's result (as stored bytes); throws its RuntimeError on rejected shapes.
std::vector<uint8_t> cpuMatmul(DType t, const Case &c, std::vector<uint8_t> lhs, std::vector<uint8_t> rhs) {
  std::vector<uint8_t> out(numElements(c.out) * dtypeSize(t));
  KernelContext ctx;
  ctx.op = OpKind::MatMul;
  ctx.inputs = {TensorRef{lhs.data(), t, c.lhs}, TensorRef{rhs.data(), t, c.rhs}};
  ctx.outputs = {TensorRef{out.data(), t, c.out}};
  ctx.setAttrs({{"transpose_lhs", c.tl}, {"transpose_rhs", c.tr}});
  runCpuKernel(ctx);
  return out;
}

/// What cuBLASLt computes for the plan: D = op(A) op(B) per batch and call, column-major
/// (element (r, c) of a matrix at r + c * ld), accumulated in double and stored once as `t`.
std::vector<uint8_t> emulateCublasLt(DType t, const GemmPlan &p, const std::vector<uint8_t> &lhs,
                                     const std::vector<uint8_t> &rhs, int64_t outElements) {
  int64_t lhsElements = lhs.size() / dtypeSize(t), rhsElements = rhs.size() / dtypeSize(t);
  std::vector<double> d(outElements, 0);
  std::vector<int> writes(outElements, 0);
  auto read = [&](const std::vector<uint8_t> &bytes, int64_t n, int64_t i) {
    EXPECT_TRUE(i >= 0 && i < n) << "read at " << i << " of " << n;
    return i >= 0 && i < n ? load(t, bytes, i) : 0.0;
  };
  // op(A) is m x k: A stored m x k (ld >= m), or k x m transposed; op(B) is k x n likewise.
  EXPECT_EQ(p.a.transpose ? p.a.cols : p.a.rows, p.m);
  EXPECT_EQ(p.a.transpose ? p.a.rows : p.a.cols, p.k);
  EXPECT_EQ(p.b.transpose ? p.b.cols : p.b.rows, p.k);
  EXPECT_EQ(p.b.transpose ? p.b.rows : p.b.cols, p.n);
  EXPECT_EQ(p.d.rows, p.m);
  EXPECT_EQ(p.d.cols, p.n);
  for (const GemmMatrix *mat : {&p.a, &p.b, &p.d})
    EXPECT_GE(mat->ld, std::max<int64_t>(mat->rows, 1)); // cuBLASLt's requirement
  for (int64_t call = 0; call < p.calls(); ++call) {
    int64_t offA, offB, offD;
    p.callOffsets(call, &offA, &offB, &offD);
    for (int64_t batch = 0; batch < p.batchCount; ++batch) {
      int64_t a0 = offA + batch * p.a.batchStride, b0 = offB + batch * p.b.batchStride;
      int64_t d0 = offD + batch * p.d.batchStride;
      for (int64_t col = 0; col < p.n; ++col)
        for (int64_t row = 0; row < p.m; ++row) {
          double sum = 0;
          for (int64_t k = 0; k < p.k; ++k) {
            int64_t ia = p.a.transpose ? k + row * p.a.ld : row + k * p.a.ld;
            int64_t ib = p.b.transpose ? col + k * p.b.ld : k + col * p.b.ld;
            sum += read(rhs, rhsElements, a0 + ia) * read(lhs, lhsElements, b0 + ib);
          }
          int64_t id = d0 + row + col * p.d.ld;
          EXPECT_TRUE(id >= 0 && id < outElements) << "write at " << id;
          if (id >= 0 && id < outElements) {
            d[id] = sum;
            ++writes[id];
          }
        }
    }
  }
  for (int64_t i = 0; i < outElements; ++i)
    EXPECT_EQ(writes[i], 1) << "result element " << i << " written " << writes[i] << " times";
  return store(t, d);
}

/// Plans `c`, emulates cuBLASLt and compares with the CPU kernel within `rel` (of max(1, |x|)).
GemmPlan checkCase(const Case &c, DType t = DType::F32, double rel = 1e-5, unsigned seed = 7) {
  SCOPED_TRACE(describe(c) + " " + dtypeName(t));
  GemmPlan p = planGemm(c.lhs, c.rhs, c.out, c.tl, c.tr);
  EXPECT_TRUE(p.ok()) << p.error;
  if (!p.ok())
    return p;
  std::vector<uint8_t> lhs = store(t, uniformValues<double>(numElements(c.lhs), seed));
  std::vector<uint8_t> rhs = store(t, uniformValues<double>(numElements(c.rhs), seed + 1));
  std::vector<uint8_t> want = cpuMatmul(t, c, lhs, rhs);
  int64_t n = numElements(c.out);
  std::vector<uint8_t> got = store(t, std::vector<double>(n, 0));
  if (!p.empty && !p.zeroFill)
    got = emulateCublasLt(t, p, lhs, rhs, n);
  for (int64_t i = 0; i < n; ++i) {
    double w = load(t, want, i), g = load(t, got, i);
    EXPECT_LE(std::fabs(w - g), rel * std::max(1.0, std::fabs(w)))
        << "element " << i << ": cpu " << w << ", plan " << g;
  }
  return p;
}

} // namespace

TEST(GemmPlan, Plain2DAndTransposes) {
  for (bool tl : {false, true})
    for (bool tr : {false, true}) {
      Case c{tl ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4},
             tr ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}, {3, 5}, tl, tr};
      GemmPlan p = checkCase(c);
      EXPECT_EQ(p.calls(), 1);
      EXPECT_EQ(p.batchCount, 1);
      // The swap: cuBLASLt's A is the rhs (transposed iff the rhs is), its B the lhs.
      EXPECT_EQ(p.a.transpose, tr);
      EXPECT_EQ(p.b.transpose, tl);
      EXPECT_EQ(p.m, 5);
      EXPECT_EQ(p.n, 3);
      EXPECT_EQ(p.k, 4);
    }
}

TEST(GemmPlan, RankOneOperands) {
  checkCase({{4}, {4, 5}, {5}});
  checkCase({{3, 4}, {4}, {3}});
  checkCase({{4}, {4}, {}});
  checkCase({{2, 3, 4}, {4}, {2, 3}});    // batched matrix-vector: folded rows
  checkCase({{4}, {2, 4, 5}, {2, 5}});    // vector against a batch: lhs stride 0
  checkCase({{4}, {2, 5, 4}, {2, 5}, false, true});
  checkCase({{4, 3}, {4}, {3}, true, false});
}

TEST(GemmPlan, BatchedAndBroadcast) {
  GemmPlan same = checkCase({{2, 3, 4}, {2, 4, 5}, {2, 3, 5}});
  EXPECT_EQ(same.batchCount, 2);
  EXPECT_EQ(same.calls(), 1);
  GemmPlan folded = checkCase({{2, 3, 4}, {4, 5}, {2, 3, 5}}); // a Linear layer
  EXPECT_EQ(folded.batchCount, 1);
  EXPECT_EQ(folded.M, 6);
  GemmPlan lhsBroadcast = checkCase({{3, 4}, {2, 4, 5}, {2, 3, 5}});
  EXPECT_EQ(lhsBroadcast.batchCount, 2);
  EXPECT_EQ(lhsBroadcast.b.batchStride, 0);
  checkCase({{2, 3, 4}, {1, 4, 5}, {2, 3, 5}});
  checkCase({{2, 4, 3}, {4, 5}, {2, 3, 5}, true, false}); // transposed lhs: not folded
  checkCase({{2, 3, 4}, {2, 5, 4}, {2, 3, 5}, false, true});
  checkCase({{2, 4, 3}, {2, 5, 4}, {2, 3, 5}, true, true});
  // [2, 1] against [1, 3] batches: no single stride walks both, so the host loops.
  GemmPlan outer = checkCase({{2, 1, 3, 4}, {1, 3, 4, 5}, {2, 3, 3, 5}});
  EXPECT_EQ(outer.calls() * outer.batchCount, 6);
  EXPECT_EQ(outer.loops.size(), 1u);
  checkCase({{2, 1, 4, 3}, {3, 5, 4}, {2, 3, 3, 5}, true, true});
  checkCase({{3, 1, 2, 1, 3, 4}, {2, 4, 4, 5}, {3, 1, 2, 4, 3, 5}}); // size-1 dims and two loops
  // Broadcast dims that merge: [1, 1] against [2, 5] is one stride-0 dim of 10.
  GemmPlan merged = checkCase({{1, 1, 3, 4}, {2, 5, 4, 6}, {2, 5, 3, 6}});
  EXPECT_EQ(merged.batchCount, 10);
  EXPECT_EQ(merged.calls(), 1);
}

TEST(GemmPlan, MaeShapes) {
  int64_t B = 2, H = 3, N = 17, D = 8;
  // Scores q k^T: [B, H, N, D] x [B, H, D, N], and with k stored [B, H, N, D] transposed.
  GemmPlan scores = checkCase({{B, H, N, D}, {B, H, D, N}, {B, H, N, N}});
  EXPECT_EQ(scores.batchCount, B * H);
  EXPECT_EQ(scores.calls(), 1);
  checkCase({{B, H, N, D}, {B, H, N, D}, {B, H, N, N}, false, true});
  // Attention-weighted values and the backward's transposed products.
  checkCase({{B, H, N, N}, {B, H, N, D}, {B, H, N, D}});
  checkCase({{B, H, N, N}, {B, H, N, D}, {B, H, N, D}, true, false});
  checkCase({{B, H, N, D}, {B, H, N, D}, {B, H, D, D}, true, false});
  // The MLP: [B*N, D] x [D, 4D], its input gradient and its weight gradient.
  checkCase({{B * N, D}, {D, 4 * D}, {B * N, 4 * D}});
  checkCase({{B * N, 4 * D}, {D, 4 * D}, {B * N, D}, false, true});
  checkCase({{B * N, D}, {B * N, 4 * D}, {D, 4 * D}, true, false});
  GemmPlan mlp = checkCase({{B, N, D}, {D, 4 * D}, {B, N, 4 * D}});
  EXPECT_EQ(mlp.M, B * N);
  EXPECT_EQ(mlp.batchCount, 1);
}

TEST(GemmPlan, OtherElementTypes) {
  // f64 takes f32's layout; 16-bit results are the f32-accumulated sum rounded once, as the CPU
  // kernel's (within one ulp: the summation orders differ).
  checkCase({{2, 3, 7}, {2, 7, 5}, {2, 3, 5}}, DType::F64, 1e-12);
  checkCase({{2, 3, 17, 8}, {2, 3, 17, 8}, {2, 3, 17, 17}, false, true}, DType::BF16, 1.0 / 128);
  checkCase({{34, 16}, {16, 64}, {34, 64}}, DType::F16, 1.0 / 1024);
  checkCase({{2, 1, 16, 5}, {3, 16, 4}, {2, 3, 5, 4}, true, false}, DType::F16, 1.0 / 1024);
}

TEST(GemmPlan, EmptyAndZeroContraction) {
  GemmPlan zeroK = checkCase({{2, 3, 0}, {2, 0, 5}, {2, 3, 5}});
  EXPECT_TRUE(zeroK.zeroFill);
  GemmPlan empty = checkCase({{0, 3, 4}, {0, 4, 5}, {0, 3, 5}});
  EXPECT_TRUE(empty.empty);
  EXPECT_TRUE(checkCase({{3, 4}, {4, 0}, {3, 0}}).empty);
}

// Shapes the CPU kernel rejects: the plan rejects them with the same message.
TEST(GemmPlan, RejectsWhatTheCpuRejects) {
  std::vector<Case> bad = {
      {{}, {4, 5}, {5}},                      // rank 0
      {{4}, {4, 5}, {5}, true, false},        // a transposed vector
      {{3, 4}, {5, 6}, {3, 6}},               // contraction dims differ
      {{3, 4}, {4, 6}, {3, 6}, true, false},  // ... after the transpose
      {{2, 3, 4}, {3, 4, 5}, {2, 3, 5}},      // batch dims 2 and 3
      {{3, 4}, {4, 5}, {3, 6}},               // a result of the wrong size
  };
  for (const Case &c : bad) {
    SCOPED_TRACE(describe(c));
    GemmPlan p = planGemm(c.lhs, c.rhs, c.out, c.tl, c.tr);
    ASSERT_FALSE(p.ok());
    std::vector<uint8_t> lhs(std::max<int64_t>(numElements(c.lhs), 1) * 4);
    std::vector<uint8_t> rhs(std::max<int64_t>(numElements(c.rhs), 1) * 4);
    try {
      cpuMatmul(DType::F32, c, lhs, rhs);
      ADD_FAILURE() << "the CPU kernel accepted it";
    } catch (const RuntimeError &e) {
      EXPECT_EQ(std::string(e.what()), "cpc.matmul: " + p.error);
    }
  }
}

TEST(GemmPlan, Alignment) {
  EXPECT_EQ(gemmAlignment(0x1000, {}), 256u);
  EXPECT_EQ(gemmAlignment(0x1010, {}), 16u);
  EXPECT_EQ(gemmAlignment(0x1000, {12}), 4u);   // f32 batches of 3 elements
  EXPECT_EQ(gemmAlignment(0x1000, {30, 64}), 2u); // f16 batches of 15 elements
  // The offsets a plan's matrices start at: its batch strides and loop strides, in bytes.
  GemmPlan p = planGemm({2, 1, 3, 5}, {1, 3, 5, 4}, {2, 3, 3, 4}, false, false);
  ASSERT_TRUE(p.ok());
  std::vector<int64_t> lhs = gemmOffsets(p, 'b', 2), rhs = gemmOffsets(p, 'a', 2);
  EXPECT_EQ(gemmAlignment(0x1000, lhs), 2u); // lhs matrices 15 f16 apart
  EXPECT_EQ(gemmAlignment(0x1000, rhs), 8u); // rhs matrices 20 f16 apart
}

namespace {

/// Element (r, c) of matrix (o, i) of `m` (its own rows and cols, before any transpose).
int64_t at(const SlicedMatrices &m, int64_t o, int64_t i, int64_t r, int64_t c) {
  return o * m.outerStride + i * m.innerStride + r * m.ld + c;
}

/// Plans op(lhs) op(rhs) over outer x inner slices, emulates cuBLASLt (every read in bounds,
/// every result element written once) and compares with the product computed slice by slice.
void checkSliced(int64_t outer, int64_t inner, const SlicedMatrices &lhs, int64_t lhsElements,
                 const SlicedMatrices &rhs, int64_t rhsElements, const SlicedMatrices &out, int64_t outElements,
                 bool tl, bool tr) {
  GemmPlan p = planSlicedGemm(outer, inner, lhs, rhs, out, tl, tr);
  ASSERT_TRUE(p.ok()) << p.error;
  std::vector<double> a = uniformValues<double>(lhsElements, 11), b = uniformValues<double>(rhsElements, 12);
  std::vector<uint8_t> got = emulateCublasLt(DType::F64, p, store(DType::F64, a), store(DType::F64, b), outElements);
  int64_t M = tl ? lhs.cols : lhs.rows, K = tl ? lhs.rows : lhs.cols, N = tr ? rhs.rows : rhs.cols;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < N; ++c) {
          double sum = 0;
          for (int64_t k = 0; k < K; ++k)
            sum += a[tl ? at(lhs, o, i, k, r) : at(lhs, o, i, r, k)] * b[tr ? at(rhs, o, i, c, k) : at(rhs, o, i, k, c)];
          EXPECT_NEAR(load(DType::F64, got, at(out, o, i, r, c)), sum, 1e-12) << o << " " << i << " " << r << " " << c;
        }
}

} // namespace

// Tests attention's products over (batch, head) slices of token-major operands (q [B, N, H, D]:
// a slice's rows H x D apart, its heads D apart) and of contiguous scores [B, H, N, M]: the
// scores q k^T, P v, the gradient's P^T g and dS^T q, and one batch of heads per host loop
// step; with a single head, the batches become cuBLASLt's batch.
TEST(GemmPlan, SlicedTokenMajorAttention) {
  const int64_t B = 3, H = 4, N = 5, M = 7, D = 6, Dv = 2;
  auto tokenMajor = [&](int64_t rows, int64_t width) {
    return SlicedMatrices{rows, width, H * width, rows * H * width, width};
  };
  SlicedMatrices q = tokenMajor(N, D), k = tokenMajor(M, D), v = tokenMajor(M, Dv), o = tokenMajor(N, Dv);
  SlicedMatrices scores{N, M, M, H * N * M, N * M};
  checkSliced(B, H, q, B * N * H * D, k, B * M * H * D, scores, B * H * N * M, false, true);
  checkSliced(B, H, scores, B * H * N * M, v, B * M * H * Dv, o, B * N * H * Dv, false, false);
  checkSliced(B, H, scores, B * H * N * M, o, B * N * H * Dv, v, B * M * H * Dv, true, false);
  checkSliced(B, H, scores, B * H * N * M, q, B * N * H * D, k, B * M * H * D, true, false);
  GemmPlan p = planSlicedGemm(B, H, q, k, scores, false, true);
  EXPECT_EQ(p.batchCount, H);
  EXPECT_EQ(p.calls(), B);
  SlicedMatrices q1{N, D, D, N * D, 0}, k1{M, D, D, M * D, 0}, s1{N, M, M, N * M, 0};
  GemmPlan one = planSlicedGemm(B, 1, q1, k1, s1, false, true);
  EXPECT_EQ(one.batchCount, B);
  EXPECT_EQ(one.calls(), 1);
  checkSliced(B, 1, q1, B * N * D, k1, B * M * D, s1, B * N * M, false, true);
  EXPECT_FALSE(planSlicedGemm(B, H, q, v, scores, false, true).ok()); // D != Dv
}
