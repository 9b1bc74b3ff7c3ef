//===- Linalg.cu - the linear-algebra family: conv2d (cuDNN) and matmul ----===//
//
// cpc.conv2d, cpc.conv2d_grad_input and cpc.conv2d_grad_weight through cuDNN's legacy
// convolution API; cpc.matmul is Matmul.cu's (cuBLASLt). ConvPlan.h (host-tested) decides the
// shapes cuDNN sees: asymmetric, negative or truncated padding goes through an explicitly
// zero-padded copy of the input (or of the input gradient, cropped afterwards). Forward's bias
// is written into the result first and cuDNN adds the convolution to it (beta = 1), so a 16-bit
// result is rounded once. Descriptors and the chosen algorithm are kept per (GPU, op, shape,
// type). f32 runs without TF32 (CUDNN_FMA_MATH: cuDNN's default math allows TF32 on Ampere and
// later) unless CPC_ALLOW_TF32=1; f16/bf16 accumulate in f32 on tensor cores.
//
#include "kernels/cuda/ConvPlan.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/Matmul.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace cpc::kernels::cuda {
namespace {

// Scratch slots of the padded copy and of cuDNN's workspace (distinct: both live at once).
constexpr int kPaddedSlot = 2, kWorkspaceSlot = 3;
// Algorithms that want more workspace than this are passed over (FFT variants can ask for GBs).
constexpr size_t kMaxWorkspace = size_t(512) << 20;

void checkDnn(const KernelContext &ctx, cudnnStatus_t status, const char *what) {
  if (status != CUDNN_STATUS_SUCCESS)
    ctx.fail(std::string(what) + " failed: " + cudnnGetErrorString(status));
}
void checkRuntime(const KernelContext &ctx, cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    ctx.fail(std::string(what) + " failed: " + cudaGetErrorString(status));
}

//===----------------------------------------------------------------------===//
// Small kernels: they move elements, so they run on unsigned words of the element's size.
//===----------------------------------------------------------------------===//

template <typename Word>
__global__ void windowCopyKernel(Word *dst, const Word *src, int64_t n, int64_t dstH, int64_t dstW, int64_t srcH,
                                 int64_t srcW, int64_t offH, int64_t offW) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t s = windowSource(i, dstH, dstW, srcH, srcW, offH, offW);
    dst[i] = s < 0 ? Word(0) : src[s]; // all-zero bits are +0.0 in every float type
  }
}

template <typename Word>
__global__ void biasFillKernel(Word *dst, const Word *bias, int64_t n, int64_t positions, int64_t channels) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = bias[biasChannel(i, positions, channels)];
}

template <typename F> void byWordSize(const KernelContext &ctx, DType t, F &&f) {
  switch (dtypeSize(t)) {
  case 2: return f(uint16_t{});
  case 4: return f(uint32_t{});
  case 8: return f(uint64_t{});
  default: ctx.fail(std::string("unsupported element type ") + dtypeName(t));
  }
}

/// dst[planes, dstH, dstW] = src[planes, y + offH, x + offW] (zero outside src).
void windowCopy(const KernelContext &ctx, DType t, void *dst, const void *src, int64_t planes, int64_t dstH,
                int64_t dstW, int64_t srcH, int64_t srcW, int64_t offH, int64_t offW) {
  CudaDevice &device = deviceOf(ctx);
  int64_t n = planes * dstH * dstW;
  LaunchConfig cfg = elementwiseLaunch(n, device.multiprocessors());
  byWordSize(ctx, t, [&](auto word) {
    using Word = decltype(word);
    windowCopyKernel<Word><<<(unsigned)cfg.blocks, cfg.threads, 0, device.stream()>>>(
        static_cast<Word *>(dst), static_cast<const Word *>(src), n, dstH, dstW, srcH, srcW, offH, offW);
  });
  checkLaunch(ctx);
}

void biasFill(const KernelContext &ctx, const TensorRef &out, const TensorRef &bias, int64_t positions) {
  CudaDevice &device = deviceOf(ctx);
  int64_t n = out.numel();
  LaunchConfig cfg = elementwiseLaunch(n, device.multiprocessors());
  byWordSize(ctx, out.dtype, [&](auto word) {
    using Word = decltype(word);
    biasFillKernel<Word><<<(unsigned)cfg.blocks, cfg.threads, 0, device.stream()>>>(
        static_cast<Word *>(out.data), static_cast<const Word *>(bias.data), n, positions, bias.numel());
  });
  checkLaunch(ctx);
}

//===----------------------------------------------------------------------===//
// cuDNN descriptors and algorithm choice
//===----------------------------------------------------------------------===//

cudnnDataType_t dnnTypeOf(DType t) {
  switch (t) {
  case DType::F64: return CUDNN_DATA_DOUBLE;
  case DType::F16: return CUDNN_DATA_HALF;
  case DType::BF16: return CUDNN_DATA_BFLOAT16;
  default: return CUDNN_DATA_FLOAT;
  }
}

/// One convolution ready to run: descriptors (x as cuDNN sees it), the algorithm and its
/// workspace.
struct DnnConv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0; // the op's algorithm enum
  size_t workspace = 0;
  DnnConv() = default;
  DnnConv(const DnnConv &) = delete;
  DnnConv &operator=(const DnnConv &) = delete;
  ~DnnConv() { // host memory only
    if (x)
      cudnnDestroyTensorDescriptor(x);
    if (y)
      cudnnDestroyTensorDescriptor(y);
    if (w)
      cudnnDestroyFilterDescriptor(w);
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
  }
};

/// The math an algorithm may run with: f32 strictly FMA unless TF32 is allowed.
bool strictF32(DType t) { return t == DType::F32 && !tf32Allowed(); }

/// FFT and Winograd transforms lose a few bits: f32 (without TF32) and f64 keep to the direct,
/// implicit-GEMM and GEMM algorithms, which sum products as the CPU does (within 1e-5 in f32).
bool transformed(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/// Picks the first of cuDNN's ranked algorithms that succeeded, fits kMaxWorkspace and runs with
/// an allowed math type, deterministic ones first (training runs repeat). Sets the descriptor's
/// math type to the algorithm's and returns its workspace; `workspaceOf` asks cuDNN for it.
template <typename Perf, typename WorkspaceOf>
bool chooseAlgorithm(const std::vector<Perf> &ranked, DType t, cudnnConvolutionDescriptor_t conv,
                     WorkspaceOf &&workspaceOf, int *algo, size_t *workspace) {
  bool exact = strictF32(t) || t == DType::F64;
  for (bool deterministicOnly : {true, false})
    for (const Perf &p : ranked) {
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace || (exact && transformed(p.algo)))
        continue;
      if (deterministicOnly && p.determinism != CUDNN_DETERMINISTIC)
        continue;
      cudnnMathType_t math = p.mathType;
      if (strictF32(t)) {
        if (math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
          continue;
        math = CUDNN_FMA_MATH;
      }
      if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS)
        continue;
      size_t bytes = 0;
      if (workspaceOf(p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspace)
        continue; // e.g. no FMA-only kernel for this algorithm
      *algo = (int)p.algo;
      *workspace = bytes;
      return true;
    }
  return false;
}

// Over 80 lines: cuDNN's descriptors, the algorithm search and its workspace must be made and checked
// in this order, each call with its own refusal.
std::shared_ptr<const DnnConv> makeConv(const KernelContext &ctx, CudaDevice &device, ConvOp op, const ConvPlan &p,
                                        DType t) {
  auto c = std::make_shared<DnnConv>();
  cudnnDataType_t type = dnnTypeOf(t);
  checkDnn(ctx, cudnnCreateTensorDescriptor(&c->x), "cudnnCreateTensorDescriptor");
  checkDnn(ctx, cudnnCreateTensorDescriptor(&c->y), "cudnnCreateTensorDescriptor");
  checkDnn(ctx, cudnnCreateFilterDescriptor(&c->w), "cudnnCreateFilterDescriptor");
  checkDnn(ctx, cudnnCreateConvolutionDescriptor(&c->conv), "cudnnCreateConvolutionDescriptor");
  checkDnn(ctx,
           cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, type, (int)p.N, (int)p.C, (int)p.cudnnH, (int)p.cudnnW),
           "cudnnSetTensor4dDescriptor");
  checkDnn(ctx, cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, type, (int)p.N, (int)p.O, (int)p.OH, (int)p.OW),
           "cudnnSetTensor4dDescriptor");
  checkDnn(ctx,
           cudnnSetFilter4dDescriptor(c->w, type, CUDNN_TENSOR_NCHW, (int)p.O, (int)p.groupChannels(), (int)p.KH,
                                      (int)p.KW),
           "cudnnSetFilter4dDescriptor");
  checkDnn(ctx,
           cudnnSetConvolution2dDescriptor(c->conv, (int)p.cudnnPadH, (int)p.cudnnPadW, (int)p.strideH, (int)p.strideW,
                                           (int)p.dilationH, (int)p.dilationW, CUDNN_CROSS_CORRELATION,
                                           t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
           "cudnnSetConvolution2dDescriptor");
  checkDnn(ctx, cudnnSetConvolutionGroupCount(c->conv, (int)p.G), "cudnnSetConvolutionGroupCount");
  // The ranking below lists algorithms per math type; this one is what the query starts from.
  cudnnMathType_t math = strictF32(t) ? CUDNN_FMA_MATH : t == DType::F16 || t == DType::BF16 ? CUDNN_TENSOR_OP_MATH
                                                                                               : CUDNN_DEFAULT_MATH;
  checkDnn(ctx, cudnnSetConvolutionMathType(c->conv, math), "cudnnSetConvolutionMathType");
  // The plan's extent must be cuDNN's: a mismatch would be a planning bug, not a user error.
  int n = 0, ch = 0, oh = 0, ow = 0;
  checkDnn(ctx, cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->w, &n, &ch, &oh, &ow),
           "cudnnGetConvolution2dForwardOutputDim");
  if (n != p.N || ch != p.O || oh != p.OH || ow != p.OW)
    ctx.fail("cuDNN's output " + shapeString({n, ch, oh, ow}) + " differs from the planned " +
             shapeString(p.outputShape()));

  cudnnHandle_t h = device.dnn();
  int count = 0, found = 0;
  bool chosen = false;
  if (op == ConvOp::Forward) {
    checkDnn(ctx, cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count),
             "cudnnGetConvolutionForwardAlgorithmMaxCount");
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(count);
    checkDnn(ctx, cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv, c->y, count, &found, ranked.data()),
             "cudnnGetConvolutionForwardAlgorithm_v7");
    ranked.resize(found);
    chosen = chooseAlgorithm(ranked, t, c->conv,
                             [&](cudnnConvolutionFwdAlgo_t a, size_t *bytes) {
                               return cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y, a, bytes);
                             },
                             &c->algo, &c->workspace);
  } else if (op == ConvOp::GradInput) {
    checkDnn(ctx, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count),
             "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(count);
    checkDnn(ctx,
             cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w, c->y, c->conv, c->x, count, &found, ranked.data()),
             "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    ranked.resize(found);
    chosen = chooseAlgorithm(ranked, t, c->conv,
                             [&](cudnnConvolutionBwdDataAlgo_t a, size_t *bytes) {
                               return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w, c->y, c->conv, c->x, a,
                                                                                   bytes);
                             },
                             &c->algo, &c->workspace);
  } else {
    checkDnn(ctx, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count),
             "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(count);
    checkDnn(ctx,
             cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->x, c->y, c->conv, c->w, count, &found, ranked.data()),
             "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    ranked.resize(found);
    chosen = chooseAlgorithm(ranked, t, c->conv,
                             [&](cudnnConvolutionBwdFilterAlgo_t a, size_t *bytes) {
                               return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x, c->y, c->conv, c->w, a,
                                                                                     bytes);
                             },
                             &c->algo, &c->workspace);
  }
  if (!chosen)
    ctx.fail("cuDNN has no usable algorithm for input " + shapeString(p.cudnnInputShape()) + ", weight " +
             shapeString(p.weightShape()) + " (" + dtypeName(t) +
             (strictF32(t) ? ", without TF32: CPC_ALLOW_TF32=1 allows it)" : ")"));
  return c;
}

/// Made convolutions; shared so that one in use outlives the cache's clearing.
class ConvCache {
public:
  std::shared_ptr<const DnnConv> get(const KernelContext &ctx, CudaDevice &device, ConvOp op, const ConvPlan &p,
                                     DType t) {
    std::vector<int64_t> key = {device.index(), (int64_t)op, (int64_t)t, tf32Allowed(), p.N, p.C, p.cudnnH, p.cudnnW,
                                p.O, p.KH, p.KW, p.OH, p.OW, p.G, p.strideH, p.strideW, p.dilationH, p.dilationW,
                                p.cudnnPadH, p.cudnnPadW};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end())
      return it->second;
    if (entries_.size() >= kMaxEntries)
      entries_.clear(); // cuDNN keeps nothing of a descriptor once a call has been queued
    return entries_.emplace(std::move(key), makeConv(ctx, device, op, p, t)).first->second;
  }

private:
  static constexpr size_t kMaxEntries = 1024;
  std::mutex mutex_;
  std::map<std::vector<int64_t>, std::shared_ptr<const DnnConv>> entries_;
};

ConvCache &convCache() {
  static ConvCache cache;
  return cache;
}

//===----------------------------------------------------------------------===//
// The kernels
//===----------------------------------------------------------------------===//

/// alpha = 1 and beta in the scale type cuDNN wants for `t` (double for f64, float otherwise).
struct Scales {
  float alpha32 = 1, beta32 = 0;
  double alpha64 = 1, beta64 = 0;
  const void *alpha, *beta;
  Scales(DType t, double beta) : beta32((float)beta), beta64(beta) {
    alpha = t == DType::F64 ? (const void *)&alpha64 : &alpha32;
    this->beta = t == DType::F64 ? (const void *)&beta64 : &beta32;
  }
};

void checkTypes(const KernelContext &ctx) {
  DType t = ctx.inputs[0].dtype;
  for (const TensorRef &in : ctx.inputs)
    if (in.dtype != t)
      ctx.fail("operand element types differ");
  if (ctx.outputs[0].dtype != t)
    ctx.fail("result element type differs from the operands");
}

ConvPlan planOf(const KernelContext &ctx, ConvOp op, const std::vector<int64_t> &x, const std::vector<int64_t> &w,
                const std::vector<int64_t> &y, int64_t biasElements = -1) {
  const OpAttrs &a = ctx.attrs;
  ConvPlan p = planConv(op, x, w, y, a.strides, a.padding, a.dilations, a.groups, biasElements);
  if (!p.ok())
    ctx.fail(p.error);
  return p;
}

/// x as cuDNN reads it: x itself, or its zero-padded copy in scratch.
const void *cudnnInput(const KernelContext &ctx, CudaDevice &device, const ConvPlan &p, const TensorRef &x) {
  if (!p.prePad)
    return x.data;
  void *padded = device.scratch(kPaddedSlot, numElements(p.cudnnInputShape()) * dtypeSize(x.dtype));
  windowCopy(ctx, x.dtype, padded, x.data, p.N * p.C, p.cudnnH, p.cudnnW, p.H, p.W, -p.padTop, -p.padLeft);
  return padded;
}

void *workspaceFor(CudaDevice &device, const DnnConv &c) {
  return c.workspace ? device.scratch(kWorkspaceSlot, c.workspace) : nullptr;
}

void conv2dKernel(KernelContext &ctx) {
  if (ctx.inputs.size() < 2 || ctx.inputs.size() > 3 || ctx.outputs.size() != 1)
    ctx.fail("expects input, weight, optional bias and 1 output");
  checkTypes(ctx);
  const TensorRef &x = ctx.inputs[0], &w = ctx.inputs[1], &y = ctx.outputs[0];
  const TensorRef *bias = ctx.inputs.size() > 2 ? &ctx.inputs[2] : nullptr;
  ConvPlan p = planOf(ctx, ConvOp::Forward, x.shape, w.shape, y.shape, bias ? bias->numel() : -1);
  if (p.empty)
    return;
  CudaDevice &device = deviceOf(ctx);
  if (bias)
    biasFill(ctx, y, *bias, p.OH * p.OW); // cuDNN adds the convolution to it (beta = 1)
  if (p.zeroResult) {
    if (!bias)
      checkRuntime(ctx, cudaMemsetAsync(y.data, 0, y.bytes(), device.stream()), "cudaMemsetAsync");
    return;
  }
  const void *in = cudnnInput(ctx, device, p, x);
  std::shared_ptr<const DnnConv> held = convCache().get(ctx, device, ConvOp::Forward, p, x.dtype);
  const DnnConv &c = *held;
  Scales s(x.dtype, bias ? 1.0 : 0.0);
  checkDnn(ctx,
           cudnnConvolutionForward(device.dnn(), s.alpha, c.x, in, c.w, w.data, c.conv,
                                   (cudnnConvolutionFwdAlgo_t)c.algo, workspaceFor(device, c), c.workspace, s.beta,
                                   c.y, y.data),
           "cudnnConvolutionForward");
}

// (dy, w) -> dx.
void conv2dGradInputKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    ctx.fail("expects 2 inputs and 1 output");
  checkTypes(ctx);
  const TensorRef &dy = ctx.inputs[0], &w = ctx.inputs[1], &dx = ctx.outputs[0];
  ConvPlan p = planOf(ctx, ConvOp::GradInput, dx.shape, w.shape, dy.shape);
  if (p.empty)
    return;
  CudaDevice &device = deviceOf(ctx);
  if (p.zeroResult)
    return checkRuntime(ctx, cudaMemsetAsync(dx.data, 0, dx.bytes(), device.stream()), "cudaMemsetAsync");
  void *target = p.prePad ? device.scratch(kPaddedSlot, numElements(p.cudnnInputShape()) * dtypeSize(dx.dtype))
                          : dx.data;
  std::shared_ptr<const DnnConv> held = convCache().get(ctx, device, ConvOp::GradInput, p, dx.dtype);
  const DnnConv &c = *held;
  Scales s(dx.dtype, 0.0);
  checkDnn(ctx,
           cudnnConvolutionBackwardData(device.dnn(), s.alpha, c.w, w.data, c.y, dy.data, c.conv,
                                        (cudnnConvolutionBwdDataAlgo_t)c.algo, workspaceFor(device, c), c.workspace,
                                        s.beta, c.x, target),
           "cudnnConvolutionBackwardData");
  if (p.prePad) // the padded positions' gradient is dropped; negative padding's rows get zero
    windowCopy(ctx, dx.dtype, dx.data, target, p.N * p.C, p.H, p.W, p.cudnnH, p.cudnnW, p.padTop, p.padLeft);
}

// (x, dy) -> dw.
void conv2dGradWeightKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    ctx.fail("expects 2 inputs and 1 output");
  checkTypes(ctx);
  const TensorRef &x = ctx.inputs[0], &dy = ctx.inputs[1], &dw = ctx.outputs[0];
  ConvPlan p = planOf(ctx, ConvOp::GradWeight, x.shape, dw.shape, dy.shape);
  if (p.empty)
    return;
  CudaDevice &device = deviceOf(ctx);
  if (p.zeroResult)
    return checkRuntime(ctx, cudaMemsetAsync(dw.data, 0, dw.bytes(), device.stream()), "cudaMemsetAsync");
  const void *in = cudnnInput(ctx, device, p, x);
  std::shared_ptr<const DnnConv> held = convCache().get(ctx, device, ConvOp::GradWeight, p, x.dtype);
  const DnnConv &c = *held;
  Scales s(x.dtype, 0.0);
  checkDnn(ctx,
           cudnnConvolutionBackwardFilter(device.dnn(), s.alpha, c.x, in, c.y, dy.data, c.conv,
                                          (cudnnConvolutionBwdFilterAlgo_t)c.algo, workspaceFor(device, c),
                                          c.workspace, s.beta, c.w, dw.data),
           "cudnnConvolutionBackwardFilter");
}

} // namespace
} // namespace cpc::kernels::cuda

namespace cpc::kernels {

void registerCudaLinalgKernels(KernelRegistry &registry) {
  cuda::registerCudaMatmulKernels(registry);
  for (DType t : cuda::kFloatTypes) { // cuDNN's legacy API takes all four (f64 without tensor cores)
    registry.add(OpKind::Conv2D, DeviceKind::Cuda, t, cuda::conv2dKernel);
    registry.add(OpKind::Conv2DGradInput, DeviceKind::Cuda, t, cuda::conv2dGradInputKernel);
    registry.add(OpKind::Conv2DGradWeight, DeviceKind::Cuda, t, cuda::conv2dGradWeightKernel);
  }
}

} // namespace cpc::kernels
