//===- Matmul.cu - cpc.matmul through cuBLASLt ------------------------------===//
//
// The layout logic (the column-major swap, batch strides, host loops) is GemmPlan.h's, tested on
// the host. Numerics: f32 with CUBLAS_COMPUTE_32F (no TF32, so results match the CPU kernel
// within 1e-5; CPC_ALLOW_TF32=1 allows it), f16/bf16 accumulated in f32 and rounded once (split-K
// reductions only in f32), f64 in f64. Descriptors and the heuristic's algorithm are made once
// per (GPU, problem, type, epilogue, alignment) and kept in a small map.
//
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/GemmPlan.h"
#include "kernels/cuda/Matmul.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

namespace cpc::kernels::cuda {

bool tf32Allowed() {
  static const bool allowed = [] {
    const char *v = std::getenv("CPC_ALLOW_TF32");
    return v && std::strcmp(v, "1") == 0;
  }();
  return allowed;
}

namespace {

cudaDataType_t cudaTypeOf(DType t) {
  switch (t) {
  case DType::F64: return CUDA_R_64F;
  case DType::F16: return CUDA_R_16F;
  case DType::BF16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

void checkLt(const KernelContext &ctx, cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    ctx.fail(std::string(what) + " failed: " + cublasLtGetStatusName(status));
}

/// A cuBLASLt matmul ready to run: its descriptors and the heuristic's algorithm.
struct LtMatmul {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  LtMatmul() = default;
  LtMatmul(const LtMatmul &) = delete;
  LtMatmul &operator=(const LtMatmul &) = delete;
  ~LtMatmul() { // host memory only: safe whatever work is queued
    if (desc)
      cublasLtMatmulDescDestroy(desc);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l)
        cublasLtMatrixLayoutDestroy(l);
  }
};

cublasLtMatrixLayout_t makeLayout(const KernelContext &ctx, cudaDataType_t type, const GemmMatrix &m,
                                  int64_t batchCount) {
  cublasLtMatrixLayout_t layout = nullptr;
  checkLt(ctx, cublasLtMatrixLayoutCreate(&layout, type, (uint64_t)m.rows, (uint64_t)m.cols, m.ld),
          "cublasLtMatrixLayoutCreate");
  if (batchCount > 1) {
    int32_t count = (int32_t)batchCount;
    int64_t stride = m.batchStride;
    checkLt(ctx, cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
            "cublasLtMatrixLayoutSetAttribute");
    checkLt(ctx,
            cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof(stride)),
            "cublasLtMatrixLayoutSetAttribute");
  }
  return layout;
}

struct Alignments {
  uint32_t a, b, d, bias;
};

/// Builds the descriptors of `plan` and asks the heuristic for its best algorithm.
std::unique_ptr<LtMatmul> makeMatmul(const KernelContext &ctx, CudaDevice &device, const GemmPlan &plan, DType t,
                                     GemmEpilogue epilogue, const void *bias, const Alignments &align) {
  auto mm = std::make_unique<LtMatmul>();
  cudaDataType_t type = cudaTypeOf(t);
  bool f64 = t == DType::F64;
  cublasComputeType_t compute = f64                                   ? CUBLAS_COMPUTE_64F
                                : t == DType::F32 && tf32Allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                      : CUBLAS_COMPUTE_32F;
  checkLt(ctx, cublasLtMatmulDescCreate(&mm->desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
  auto setDesc = [&](cublasLtMatmulDescAttributes_t attr, const void *value, size_t bytes) {
    checkLt(ctx, cublasLtMatmulDescSetAttribute(mm->desc, attr, value, bytes), "cublasLtMatmulDescSetAttribute");
  };
  cublasOperation_t opA = plan.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = plan.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  setDesc(CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA));
  setDesc(CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB));
  if (epilogue != GemmEpilogue::None) {
    cublasLtEpilogue_t e = epilogue == GemmEpilogue::Bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
    // The heuristic reads the pointer's alignment; the bias batch stride stays 0 (broadcast).
    setDesc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  }
  mm->a = makeLayout(ctx, type, plan.a, plan.batchCount);
  mm->b = makeLayout(ctx, type, plan.b, plan.batchCount);
  mm->d = makeLayout(ctx, type, plan.d, plan.batchCount);

  cublasLtMatmulPreference_t pref = nullptr;
  checkLt(ctx, cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
      prefOwner(pref, cublasLtMatmulPreferenceDestroy);
  auto setPref = [&](cublasLtMatmulPreferenceAttributes_t attr, const void *value, size_t bytes) {
    checkLt(ctx, cublasLtMatmulPreferenceSetAttribute(pref, attr, value, bytes),
            "cublasLtMatmulPreferenceSetAttribute");
  };
  size_t workspaceBytes = 0;
  device.gemmWorkspace(&workspaceBytes);
  uint64_t maxWorkspace = workspaceBytes;
  setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &maxWorkspace, sizeof(maxWorkspace));
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align.a, sizeof(uint32_t));
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align.b, sizeof(uint32_t));
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align.d, sizeof(uint32_t));
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align.d, sizeof(uint32_t));
  if (t == DType::F16 || t == DType::BF16) {
    // Split-K partials summed in f32: a reduction in the output type would round more than once.
    uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    setPref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  checkLt(ctx,
          cublasLtMatmulAlgoGetHeuristic(device.blasLt(), mm->desc, mm->a, mm->b, mm->d, mm->d, pref, 1, &result,
                                         &found),
          "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)
    ctx.fail("cuBLASLt has no algorithm for an " + std::to_string(plan.M) + "x" + std::to_string(plan.N) + "x" +
             std::to_string(plan.K) + " " + dtypeName(t) + " GEMM (batch " + std::to_string(plan.batchCount) + ")");
  mm->algo = result.algo;
  return mm;
}

/// The cache of made matmuls. Keys hold everything the descriptors and the algorithm depend on.
class MatmulCache {
public:
  std::mutex mutex; // held while a cached matmul is used (its bias pointer is set per call)

  LtMatmul &get(const KernelContext &ctx, CudaDevice &device, const GemmPlan &plan, DType t, GemmEpilogue epilogue,
                const void *bias, const Alignments &align) {
    std::vector<int64_t> key = {device.index(), (int64_t)t, (int64_t)epilogue, tf32Allowed(), plan.m, plan.n, plan.k,
                                plan.batchCount, align.a, align.b, align.d, align.bias};
    for (const GemmMatrix *m : {&plan.a, &plan.b, &plan.d})
      key.insert(key.end(), {m->rows, m->cols, m->ld, m->transpose, m->batchStride});
    auto it = entries_.find(key);
    if (it != entries_.end())
      return *it->second;
    if (entries_.size() >= kMaxEntries)
      entries_.clear(); // cuBLASLt keeps nothing of a descriptor once a call has been queued
    auto made = makeMatmul(ctx, device, plan, t, epilogue, bias, align);
    return *entries_.emplace(std::move(key), std::move(made)).first->second;
  }

private:
  static constexpr size_t kMaxEntries = 4096;
  std::map<std::vector<int64_t>, std::unique_ptr<LtMatmul>> entries_;
};

MatmulCache &matmulCache() {
  static MatmulCache cache;
  return cache;
}

bool isGemmType(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

/// Queues the plan's cuBLASLt calls: out = epilogue(op(lhs) op(rhs)) (plan neither empty nor a
/// zero fill).
void runPlan(const KernelContext &ctx, const GemmPlan &plan, DType t, const void *lhs, const void *rhs,
             const void *bias, void *out, GemmEpilogue epilogue) {
  CudaDevice &device = deviceOf(ctx);
  int64_t bytes = (int64_t)dtypeSize(t);
  Alignments align{gemmAlignment((uint64_t)rhs, gemmOffsets(plan, 'a', bytes)),
                   gemmAlignment((uint64_t)lhs, gemmOffsets(plan, 'b', bytes)),
                   gemmAlignment((uint64_t)out, gemmOffsets(plan, 'd', bytes)),
                   bias ? gemmAlignment((uint64_t)bias, {}) : 256u};
  size_t workspaceBytes = 0;
  void *workspace = device.gemmWorkspace(&workspaceBytes);

  MatmulCache &cache = matmulCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  LtMatmul &mm = cache.get(ctx, device, plan, t, epilogue, bias, align);
  if (bias)
    checkLt(ctx, cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
            "cublasLtMatmulDescSetAttribute");
  float alpha32 = 1, beta32 = 0;
  double alpha64 = 1, beta64 = 0;
  const void *alpha = t == DType::F64 ? (const void *)&alpha64 : &alpha32;
  const void *beta = t == DType::F64 ? (const void *)&beta64 : &beta32;
  auto *A = static_cast<const char *>(rhs), *B = static_cast<const char *>(lhs);
  auto *D = static_cast<char *>(out);
  for (int64_t call = 0, calls = plan.calls(); call < calls; ++call) {
    int64_t offA, offB, offD;
    plan.callOffsets(call, &offA, &offB, &offD);
    char *d = D + offD * bytes;
    checkLt(ctx,
            cublasLtMatmul(device.blasLt(), mm.desc, alpha, A + offA * bytes, mm.a, B + offB * bytes, mm.b, beta, d,
                           mm.d, d, mm.d, &mm.algo, workspace, workspaceBytes, device.stream()),
            "cublasLtMatmul");
  }
}

void gemm(const KernelContext &ctx, const TensorRef &lhs, const TensorRef &rhs, const TensorRef *bias,
          const TensorRef &out, bool transposeLhs, bool transposeRhs, GemmEpilogue epilogue) {
  DType t = lhs.dtype;
  if (rhs.dtype != t || out.dtype != t || (bias && bias->dtype != t))
    ctx.fail("operand and result element types differ");
  if (!isGemmType(t))
    ctx.fail(std::string("unsupported element type ") + dtypeName(t));
  GemmPlan plan = planGemm(lhs.shape, rhs.shape, out.shape, transposeLhs, transposeRhs);
  if (!plan.ok())
    ctx.fail(plan.error);
  if ((epilogue == GemmEpilogue::None) != (bias == nullptr))
    ctx.fail("a bias goes with a bias epilogue");
  if (bias && bias->numel() != plan.N)
    ctx.fail("bias must have " + std::to_string(plan.N) + " elements");
  if (plan.empty)
    return;
  if (plan.zeroFill) {
    if (epilogue != GemmEpilogue::None)
      ctx.fail("a GEMM epilogue needs a contraction dim > 0");
    cudaError_t status = cudaMemsetAsync(out.data, 0, out.bytes(), deviceOf(ctx).stream()); // +0.0 in every float type
    if (status != cudaSuccess)
      ctx.fail(std::string("cudaMemsetAsync failed: ") + cudaGetErrorString(status));
    return;
  }
  runPlan(ctx, plan, t, lhs.data, rhs.data, bias ? bias->data : nullptr, out.data, epilogue);
}

void matmulKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    ctx.fail("expects 2 inputs and 1 output");
  gemm(ctx, ctx.inputs[0], ctx.inputs[1], nullptr, ctx.outputs[0], ctx.attrs.transposeLhs, ctx.attrs.transposeRhs,
       GemmEpilogue::None);
}

} // namespace

void launchGemmWithEpilogue(const KernelContext &ctx, const TensorRef &lhs, const TensorRef &rhs,
                            const TensorRef *bias, const TensorRef &out, bool transposeLhs, bool transposeRhs,
                            GemmEpilogue epilogue) {
  gemm(ctx, lhs, rhs, bias, out, transposeLhs, transposeRhs, epilogue);
}

void launchPlannedGemm(const KernelContext &ctx, const GemmPlan &plan, DType t, const void *lhs, const void *rhs,
                       void *out) {
  if (!plan.ok())
    ctx.fail(plan.error);
  if (!isGemmType(t))
    ctx.fail(std::string("unsupported element type ") + dtypeName(t));
  if (plan.zeroFill) // the caller knows which elements a strided result has
    ctx.fail("a planned GEMM needs a contraction dim > 0");
  if (!plan.empty)
    runPlan(ctx, plan, t, lhs, rhs, nullptr, out, GemmEpilogue::None);
}

void registerCudaMatmulKernels(KernelRegistry &registry) {
  for (DType t : kFloatTypes)
    registry.add(OpKind::MatMul, DeviceKind::Cuda, t, matmulKernel);
}

} // namespace cpc::kernels::cuda
