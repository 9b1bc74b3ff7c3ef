//===- Executor.cpp -------------------------------------------------------===//
#include "runtime/Executor.h"
#include "kernels/Float16.h"
#include "runtime/Blocks.h"
#include "runtime/CollectiveKernels.h"
#include "runtime/Communicator.h"
#include "runtime/Trace.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

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
/// Every element of a state that does not start at zero (the loss scale) set to `value`.
void fillState(const TensorRef &t, double value) {
  int64_t n = t.numel();
  switch (t.dtype) {
  case DType::F32: std::fill_n(t.as<float>(), n, (float)value); break;
  case DType::F64: std::fill_n(t.as<double>(), n, value); break;
  case DType::F16:
  case DType::BF16: std::fill_n(t.as<uint16_t>(), n, store16(t.dtype, (float)value)); break;
  case DType::I64: std::fill_n(t.as<int64_t>(), n, (int64_t)value); break;
  case DType::I32: std::fill_n(t.as<int32_t>(), n, (int32_t)value); break;
  default: throw RuntimeError("a state of element type " + std::string(dtypeName(t.dtype)) + " cannot start at " +
                              std::to_string(value));
  }
}

} // namespace

struct Executor::Memory {
  std::unique_ptr<AlignedBuffer> arena;
  std::vector<std::unique_ptr<AlignedBuffer>> owned; // parameters, inputs
};

Executor::Executor(const Plan &plan, ExecutorOptions options)
    : plan_(plan), options_(options), mem_(std::make_unique<Memory>()) {
  if (options.rank < 0 || options.rank >= plan.worldSize)
    throw RuntimeError("rank " + std::to_string(options.rank) + " is outside this plan's " +
                       std::to_string(plan.worldSize) + " ranks");
  int64_t arenaBytes = plan.arenaBytesOfRank(options.rank);
  mem_->arena = std::make_unique<AlignedBuffer>(arenaBytes);
  memory_.arenaBytes = arenaBytes;

  // Memory of every root buffer this rank's programs use (a pipeline stage holds only its own
  // parameters and states), then views (aliases) on top.
  std::vector<bool> used = buffersOfRank(plan, options.rank);
  views_.resize(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDesc &b = plan.buffers[i];
    views_[i] = TensorRef{nullptr, b.dtype, b.shape};
    if (b.aliasOf >= 0 || !used[i])
      continue;
    switch (b.kind) {
    case BufferKind::Arena:
      views_[i].data = static_cast<uint8_t *>(mem_->arena->ptr) + b.offset;
      break;
    case BufferKind::Constant:
    case BufferKind::Parameter: {
      (b.kind == BufferKind::Constant ? memory_.constantBytes : memory_.parameterBytes) += b.bytes();
      // Kernels never write constants, nor parameters at inference: those run straight from a
      // plan held in memory. Training updates parameters in place, so they get memory of their own.
      if (!b.sharded() && plan.blobInMemory() && (b.kind == BufferKind::Constant || plan.mode != "train")) {
        views_[i].data = const_cast<uint8_t *>(plan.blob.data()) + b.offset;
        memory_.inPlanBytes += b.bytes();
        break;
      }
      mem_->owned.push_back(std::make_unique<AlignedBuffer>(b.bytes()));
      views_[i].data = mem_->owned.back()->ptr;
      loadBlock(b, views_[i].data);
      break;
    }
    case BufferKind::State: // zero-initialized by AlignedBuffer
      mem_->owned.push_back(std::make_unique<AlignedBuffer>(b.bytes()));
      views_[i].data = mem_->owned.back()->ptr;
      memory_.stateBytes += b.bytes();
      if (b.init != 0)
        fillState(views_[i], b.init);
      break;
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
  const int64_t channels = std::max<int64_t>(plan.pointToPointChannels(), 1);
  for (const RankProgram &desc : plan.programs) {
    if (!plan.runsOn(desc, options.rank))
      continue;
    Program program{&desc, {}, {}, {}, {}, 0};
    for (const StepDesc &step : desc.steps) {
      kernels::KernelFn fn = findCollectiveKernel(step.op);
      program.communicates.push_back(fn && step.op != "cpc.shard_slice");
      if (!fn)
        fn = registry.find(step.op);
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
      ctx.comm = options.comm;
      ctx.rank = options.rank;
      ctx.meshShape = &plan.meshShape;
      ctx.meshAxes = &plan.meshAxes;
      ctx.microbatch = &microbatch_;
      ctx.channels = channels;
      program.contexts.push_back(std::move(ctx));
      program.kernels.push_back(fn);
    }
    programs_.push_back(std::move(program));
  }
  bound_.assign(plan.inputs.size(), false);
}

Executor::~Executor() = default;

std::vector<bool> Executor::buffersOfRank(const Plan &plan, int rank) { return plan.buffersOfRank(rank); }

bool Executor::runsHere(const NamedBuffer &n) const { return hasProgram(n.program); }

void Executor::bindInput(const std::string &name, const HostTensor &tensor) {
  bool found = false;
  for (size_t i = 0; i < plan_.inputs.size(); ++i) {
    if (plan_.inputs[i].name != name)
      continue;
    found = true;
    if (!runsHere(plan_.inputs[i])) // another rank's (pipeline stage's) program
      continue;
    const TensorRef &dst = views_[plan_.inputs[i].buffer];
    if (tensor.dtype != dst.dtype || tensor.shape != dst.shape)
      throw RuntimeError("input '" + name + "' expects " + dtypeName(dst.dtype) + shapeString(dst.shape) +
                         ", got " + dtypeName(tensor.dtype) + shapeString(tensor.shape));
    std::memcpy(dst.data, tensor.data.data(), dst.bytes());
    bound_[i] = true;
  }
  if (found)
    return;
  std::string names;
  for (const auto &in : plan_.inputs)
    names += (names.empty() ? "" : ", ") + in.name;
  throw RuntimeError("the plan has no input '" + name + "' (inputs: " + names + ")");
}

void Executor::bindSyntheticInputs(uint64_t seed) {
  for (size_t i = 0; i < plan_.inputs.size(); ++i) {
    if (bound_[i] || plan_.inputs[i].isRuntime() || plan_.inputs[i].isTransfer() || !runsHere(plan_.inputs[i]))
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
    if (!bound_[i] && !plan_.inputs[i].isRuntime() && !plan_.inputs[i].isTransfer() && runsHere(plan_.inputs[i]))
      names.push_back(plan_.inputs[i].name);
  return names;
}

bool Executor::hasProgram(const std::string &name) const {
  return std::any_of(programs_.begin(), programs_.end(), [&](const Program &p) { return p.desc->name == name; });
}

void Executor::run(const std::string &name) {
  auto program = std::find_if(programs_.begin(), programs_.end(), [&](const Program &p) { return p.desc->name == name; });
  if (program == programs_.end())
    throw RuntimeError("the plan has no program '" + name + "' for rank " + std::to_string(options_.rank));
  for (size_t i = 0; i < plan_.inputs.size(); ++i)
    if (!bound_[i] && plan_.inputs[i].program == name)
      throw RuntimeError("input '" + plan_.inputs[i].name + "' is not bound (pass --input " + plan_.inputs[i].name +
                         "=FILE)");
  if (options_.profile)
    program->stepSeconds.resize(program->contexts.size(), 0.0);
  TraceRecorder *trace = options_.trace;
  double programStart = trace ? TraceRecorder::nowUs() : 0.0;
  for (size_t i = 0; i < program->contexts.size(); ++i) {
    program->contexts[i].step = program->runs;
    try {
      if (!options_.profile && !trace) {
        program->kernels[i](program->contexts[i]);
        continue;
      }
      double start = trace ? TraceRecorder::nowUs() : 0.0;
      auto began = std::chrono::steady_clock::now();
      program->kernels[i](program->contexts[i]);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (options_.profile)
        program->stepSeconds[i] += seconds;
      if (trace) {
        const StepDesc &step = program->desc->steps[i];
        trace->add(step.op.substr(step.op.rfind('.') + 1), program->communicates[i] ? "comm" : "compute", start,
                   seconds * 1e6, {{"loc", step.loc}, {"step", i}});
      }
    } catch (const RuntimeError &e) {
      throw RuntimeError("program " + name + ", step " + std::to_string(i) + " (" + program->desc->steps[i].loc +
                         "): " + e.what());
    }
  }
  if (trace) { // a pipeline's programs run once per microbatch: the event names it
    bool perMicrobatch = program->desc->phase == ProgramPhase::Forward || program->desc->phase == ProgramPhase::Backward;
    trace->add(perMicrobatch ? name + " mb " + std::to_string(microbatch_) : name + " " + std::to_string(program->runs),
               "program", programStart, TraceRecorder::nowUs() - programStart,
               {{"run", program->runs}, {"microbatch", microbatch_}});
  }
  ++program->runs;
}

std::vector<std::pair<std::string, double>> Executor::profile(bool byShape) const {
  std::map<std::string, double> byOp;
  for (const Program &p : programs_)
    for (size_t i = 0; i < p.stepSeconds.size(); ++i) {
      std::string key = p.desc->steps[i].op;
      if (byShape) {
        for (const TensorRef &t : p.contexts[i].inputs)
          key += " " + shapeString(t.shape);
        for (const char *flag : {"transpose_lhs", "transpose_rhs"})
          if (p.desc->steps[i].attrs.value(flag, false))
            key += std::string(" ") + flag;
      }
      byOp[key] += p.stepSeconds[i];
    }
  std::vector<std::pair<std::string, double>> out(byOp.begin(), byOp.end());
  std::sort(out.begin(), out.end(), [](auto &a, auto &b) { return a.second > b.second; });
  return out;
}

TensorRef Executor::output(const std::string &name, const std::string &program) const {
  for (auto it = plan_.outputs.rbegin(); it != plan_.outputs.rend(); ++it)
    if (it->name == name && (program.empty() || it->program == program))
      return views_[it->buffer];
  throw RuntimeError("the plan has no output '" + name + "'");
}

void Executor::loadBlock(const BufferDesc &b, void *dst) const {
  if (!b.sharded()) {
    plan_.readBlob(b.offset, b.bytes(), dst);
    return;
  }
  // A sharded parameter: this rank's block of the whole value in the blob. When only the
  // leading dim is split the block is one contiguous range; otherwise it is cut out of the whole.
  std::vector<int64_t> view = b.splitView();
  std::vector<int64_t> starts = blockStarts(plan_, options_.rank, b.shardDims, b.shape);
  bool contiguous = true;
  for (size_t d = 1; d < b.shape.size(); ++d)
    contiguous = contiguous && b.shape[d] == view[d];
  if (contiguous) {
    size_t rowBytes = b.shape.empty() || b.shape[0] == 0 ? 0 : b.bytes() / b.shape[0];
    plan_.readBlob(b.offset + (starts.empty() ? 0 : starts[0] * rowBytes), b.bytes(), dst);
    return;
  }
  std::vector<uint8_t> whole(b.storedBytes());
  plan_.readBlob(b.offset, whole.size(), whole.data());
  copyBlock(whole.data(), view, dst, b.shape, starts, dtypeSize(b.dtype), true);
}

HostTensor Executor::wholeVariable(const std::string &name) const {
  TensorRef local = variable(name);
  const BufferDesc *desc = nullptr;
  for (const BufferDesc &b : plan_.buffers)
    if (b.name == name && b.aliasOf < 0 && (b.kind == BufferKind::Parameter || b.kind == BufferKind::State))
      desc = &b;
  HostTensor whole;
  whole.dtype = local.dtype;
  if (!desc->sharded()) {
    whole.shape = local.shape;
    whole.data.assign(static_cast<const uint8_t *>(local.data), static_cast<const uint8_t *>(local.data) + local.bytes());
    return inModelOrder(*desc, std::move(whole));
  }
  if (!options_.comm)
    throw RuntimeError("gathering the sharded parameter '" + name + "' needs a communicator");
  // Every member of the group of ranks that hold the other blocks sends its block; each block
  // goes back to where its rank's coordinates put it.
  std::vector<std::string> axes;
  for (const auto &dim : desc->shardDims)
    axes.insert(axes.end(), dim.begin(), dim.end());
  std::vector<int> group = plan_.shardGroup(options_.rank, axes);
  std::vector<uint8_t> blocks(local.bytes() * group.size());
  options_.comm->allGather(local.data, blocks.data(), local.numel(), local.dtype, group);
  whole.shape = desc->globalShape;
  whole.data.resize(desc->storedBytes());
  std::vector<int64_t> view = desc->splitView();
  for (size_t k = 0; k < group.size(); ++k)
    copyBlock(whole.data.data(), view, blocks.data() + k * local.bytes(), desc->shape,
              blockStarts(plan_, group[k], desc->shardDims, desc->shape), dtypeSize(local.dtype), false);
  return inModelOrder(*desc, std::move(whole));
}

HostTensor Executor::inModelOrder(const BufferDesc &desc, HostTensor whole) {
  if (!desc.permuted())
    return whole;
  std::vector<uint8_t> model(whole.data.size());
  permuteElements(whole.data.data(), model.data(), desc.storedView, desc.storedPerm, dtypeSize(whole.dtype), true);
  whole.data = std::move(model);
  return whole;
}

TensorRef Executor::variable(const std::string &name) const {
  for (size_t i = 0; i < plan_.buffers.size(); ++i) {
    const BufferDesc &b = plan_.buffers[i];
    if ((b.kind == BufferKind::Parameter || b.kind == BufferKind::State) && b.aliasOf < 0 && b.name == name)
      return views_[i];
  }
  throw RuntimeError("the plan has no parameter or state '" + name + "'");
}

} // namespace cpc
