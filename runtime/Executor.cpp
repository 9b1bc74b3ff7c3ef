//===- Executor.cpp -------------------------------------------------------===//
#include "runtime/Executor.h"

#include <cstdlib>
#include <cstring>

namespace cpc {

namespace {
/// 64-byte aligned, zero-initialized memory.
struct AlignedBuffer {
  void *ptr = nullptr;
  explicit AlignedBuffer(size_t bytes) {
    size_t size = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    ptr = std::aligned_alloc(64, size);
    if (!ptr)
      throw RuntimeError("out of memory allocating " + std::to_string(size) + " bytes");
    std::memset(ptr, 0, size);
  }
  ~AlignedBuffer() { std::free(ptr); }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
};

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
} // namespace

struct Executor::Memory {
  std::unique_ptr<AlignedBuffer> arena;
  std::vector<std::unique_ptr<AlignedBuffer>> owned; // parameters, inputs
};

Executor::Executor(const Plan &plan, ExecutorOptions options)
    : plan_(plan), options_(options), mem_(std::make_unique<Memory>()) {
  if (options.rank < 0 || options.rank >= (int)plan.programs.size())
    throw RuntimeError("rank " + std::to_string(options.rank) + " has no program in this plan");
  const RankProgram &program = plan.programs[options.rank];
  mem_->arena = std::make_unique<AlignedBuffer>(program.arenaBytes);
  memory_.arenaBytes = program.arenaBytes;

  // Memory of every root buffer, then views (aliases) on top.
  views_.resize(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDesc &b = plan.buffers[i];
    views_[i] = TensorRef{nullptr, b.dtype, b.shape};
    if (b.aliasOf >= 0)
      continue;
    switch (b.kind) {
    case BufferKind::Arena:
      views_[i].data = static_cast<uint8_t *>(mem_->arena->ptr) + b.offset;
      break;
    case BufferKind::Constant:
      // Read-only: kernels never write constants, so they run straight from the plan's blob.
      views_[i].data = const_cast<uint8_t *>(plan.blob.data()) + b.offset;
      memory_.constantBytes += b.bytes();
      break;
    case BufferKind::Parameter: {
      // Parameters are owned: training updates them in place.
      mem_->owned.push_back(std::make_unique<AlignedBuffer>(b.bytes()));
      views_[i].data = mem_->owned.back()->ptr;
      std::memcpy(views_[i].data, plan.blob.data() + b.offset, b.bytes());
      memory_.parameterBytes += b.bytes();
      break;
    }
    case BufferKind::Input:
      mem_->owned.push_back(std::make_unique<AlignedBuffer>(b.bytes()));
      views_[i].data = mem_->owned.back()->ptr;
      memory_.inputBytes += b.bytes();
      break;
    }
  }
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    if (plan.buffers[i].aliasOf >= 0)
      views_[i].data = views_[plan.rootOf(i)].data;

  const kernels::KernelRegistry &registry = kernels::KernelRegistry::cpu();
  for (const StepDesc &step : program.steps) {
    kernels::KernelFn fn = registry.find(step.op);
    if (!fn)
      throw RuntimeError("no CPU kernel for " + step.op + " (step at " + step.loc + ")");
    kernels::KernelContext ctx;
    ctx.op = step.op;
    for (int b : step.inputs)
      ctx.inputs.push_back(views_[b]);
    for (int b : step.outputs)
      ctx.outputs.push_back(views_[b]);
    ctx.attrs = &step.attrs;
    ctx.threads = options.threads;
    contexts_.push_back(std::move(ctx));
    kernels_.push_back(fn);
  }
  bound_.assign(plan.inputs.size(), false);
}

Executor::~Executor() = default;

void Executor::bindInput(const std::string &name, const HostTensor &tensor) {
  for (size_t i = 0; i < plan_.inputs.size(); ++i) {
    if (plan_.inputs[i].name != name)
      continue;
    const TensorRef &dst = views_[plan_.inputs[i].buffer];
    if (tensor.dtype != dst.dtype || tensor.shape != dst.shape)
      throw RuntimeError("input '" + name + "' expects " + dtypeName(dst.dtype) + shapeString(dst.shape) +
                         ", got " + dtypeName(tensor.dtype) + shapeString(tensor.shape));
    std::memcpy(dst.data, tensor.data.data(), dst.bytes());
    bound_[i] = true;
    return;
  }
  std::string names;
  for (const auto &in : plan_.inputs)
    names += (names.empty() ? "" : ", ") + in.name;
  throw RuntimeError("the plan has no input '" + name + "' (inputs: " + names + ")");
}

void Executor::bindSyntheticInputs(uint64_t seed) {
  for (size_t i = 0; i < plan_.inputs.size(); ++i) {
    if (bound_[i])
      continue;
    const TensorRef &t = views_[plan_.inputs[i].buffer];
    uint64_t stream = seed ^ mix64(i + 1);
    for (int64_t k = 0; k < t.numel(); ++k) {
      double u = (mix64(stream + k) >> 11) * 0x1.0p-53; // uniform [0, 1)
      switch (t.dtype) {
      case DType::F32: t.as<float>()[k] = (float)u; break;
      case DType::F64: t.as<double>()[k] = u; break;
      default: break; // integers and bools stay zero: valid indices and labels
      }
    }
    bound_[i] = true;
  }
}

std::vector<std::string> Executor::unboundInputs() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < plan_.inputs.size(); ++i)
    if (!bound_[i])
      names.push_back(plan_.inputs[i].name);
  return names;
}

void Executor::run() {
  auto missing = unboundInputs();
  if (!missing.empty())
    throw RuntimeError("input '" + missing.front() + "' is not bound (pass --input " + missing.front() + "=FILE)");
  const RankProgram &program = plan_.programs[options_.rank];
  for (size_t i = 0; i < contexts_.size(); ++i) {
    contexts_[i].step = runs_;
    try {
      kernels_[i](contexts_[i]);
    } catch (const RuntimeError &e) {
      throw RuntimeError("step " + std::to_string(i) + " (" + program.steps[i].loc + "): " + e.what());
    }
  }
  ++runs_;
}

TensorRef Executor::output(const std::string &name) const {
  for (const auto &out : plan_.outputs)
    if (out.name == name)
      return views_[out.buffer];
  throw RuntimeError("the plan has no output '" + name + "'");
}

} // namespace cpc
