//===- Executor.cpp -------------------------------------------------------===//
#include "runtime/Executor.h"
#include "kernels/Float16.h"
#include "runtime/Blocks.h"
#include "runtime/CollectiveKernels.h"
#include "runtime/Communicator.h"
#include "runtime/Trace.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace cpc {

namespace {
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// The bytes of a state whose every element starts at `value` (the loss scale).
std::vector<uint8_t> filledState(const TensorRef &shape, double value) {
  std::vector<uint8_t> bytes(shape.bytes());
  TensorRef t{bytes.data(), shape.dtype, shape.shape};
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
  return bytes;
}

} // namespace

/// Every block the executor allocated, returned to its allocator when the executor goes.
struct Executor::Memory {
  std::vector<std::pair<Allocator *, void *>> blocks;
  void *arena = nullptr;
  ~Memory() {
    for (auto &[allocator, ptr] : blocks)
      allocator->deallocate(ptr);
  }
};

void *Executor::allocateBuffer(const BufferDesc &b) {
  Allocator &allocator = device_->allocator(b.space);
  void *ptr = allocator.allocate(b.bytes());
  mem_->blocks.push_back({&allocator, ptr});
  return ptr;
}

void Executor::allocateArena(int64_t bytes) {
  // Shared, the collectives read and write the peers' buffers in place (MpiShared.h).
  if (options_.comm && plan_.worldSize > 1 && device_->kind() == DeviceKind::Cpu)
    mem_->arena = options_.comm->allocateSharedHost(bytes);
  if (!mem_->arena) {
    Allocator &allocator = device_->allocator(device_->tensorSpace());
    mem_->arena = allocator.allocate(bytes);
    mem_->blocks.push_back({&allocator, mem_->arena});
  }
}

void Executor::upload(void *dst, const void *src, size_t bytes) const {
  device_->copy(dst, device_->tensorSpace(), src, MemorySpace::Host, bytes);
}

Executor::Executor(const Plan &plan, ExecutorOptions options)
    : plan_(plan), options_(options), mem_(std::make_unique<Memory>()) {
  if (options.rank < 0 || options.rank >= plan.worldSize)
    throw RuntimeError("rank " + std::to_string(options.rank) + " is outside this plan's " +
                       std::to_string(plan.worldSize) + " ranks");
  device_ = options.device;
  if (!device_) {
    ownedDevice_ = makeDevice(plan.device, 0);
    device_ = ownedDevice_.get();
  }
  if (device_->kind() != plan.device)
    throw RuntimeError(std::string("this plan runs on ") + deviceKindName(plan.device) + ", not on " + device_->name());
  int64_t arenaBytes = plan.arenaBytesOfRank(options.rank);
  allocateArena(arenaBytes);
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
      views_[i].data = static_cast<uint8_t *>(mem_->arena) + b.offset;
      break;
    case BufferKind::Constant:
    case BufferKind::Parameter: {
      (b.kind == BufferKind::Constant ? memory_.constantBytes : memory_.parameterBytes) += b.bytes();
      // Kernels never write constants, nor parameters at inference: those run straight from a
      // plan held in memory. Training updates parameters in place, so they get memory of their own.
      if (!b.sharded() && !b.synthetic && plan.blobInMemory() && b.space == MemorySpace::Host &&
          (b.kind == BufferKind::Constant || plan.mode != PlanMode::Train)) {
        views_[i].data = const_cast<uint8_t *>(plan.blob.data()) + b.offset;
        memory_.inPlanBytes += b.bytes();
        break;
      }
      views_[i].data = allocateBuffer(b);
      if (b.space == MemorySpace::Host) {
        loadBlock(b, views_[i].data);
      } else { // through host memory, one parameter at a time
        std::vector<uint8_t> staged(b.bytes());
        loadBlock(b, staged.data());
        upload(views_[i].data, staged.data(), staged.size());
      }
      break;
    }
    case BufferKind::State: // zero-initialized by the allocator
      views_[i].data = allocateBuffer(b);
      memory_.stateBytes += b.bytes();
      if (b.init != 0) {
        std::vector<uint8_t> filled = filledState(views_[i], b.init);
        upload(views_[i].data, filled.data(), filled.size());
      }
      break;
    case BufferKind::Input:
      views_[i].data = allocateBuffer(b);
      memory_.inputBytes += b.bytes();
      break;
    }
  }
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    if (plan.buffers[i].aliasOf >= 0)
      views_[i].data = views_[plan.rootOf(i)].data;

  for (const RankProgram &desc : plan.programs)
    if (plan.runsOn(desc, options.rank))
      prepareProgram(desc);
  if (options.comm && plan.worldSize > 1)
    prepareCommunication();
  bound_.assign(plan.inputs.size(), false);
}

void Executor::prepareProgram(const RankProgram &desc) {
  const kernels::KernelRegistry &registry = kernelRegistry();
  const int64_t channels = std::max<int64_t>(plan_.pointToPointChannels(), 1);
  Program program{&desc, {}, {}, {}, {}, {}, {}, 0};
  // Sized once: a growing vector would hold up to twice the steps (the compiler counts them).
  program.contexts.reserve(desc.steps.size());
  program.kernels.reserve(desc.steps.size());
  program.collectives.reserve(desc.steps.size());
  for (size_t i = 0; i < desc.steps.size(); ++i) {
    const StepDesc &step = desc.steps[i];
    auto where = [&] { return "program " + desc.name + ", step " + std::to_string(i) + " (" + step.loc + ")"; };
    kernels::KernelContext ctx;
    ctx.op = step.op;
    for (int b : step.inputs)
      ctx.inputs.push_back(views_[b]);
    for (int b : step.outputs)
      ctx.outputs.push_back(views_[b]);
    try {
      ctx.setAttrs(step.attrs); // once: kernels read typed fields, never names
    } catch (const RuntimeError &e) {
      throw RuntimeError(where() + ": " + e.what());
    }
    ctx.threads = options_.threads;
    ctx.device = device_;
    ctx.comm = options_.comm;
    ctx.rank = options_.rank;
    ctx.meshShape = &plan_.meshShape;
    ctx.meshAxes = &plan_.meshAxes;
    ctx.microbatch = &microbatch_;
    ctx.channels = channels;
    CollectiveKernelFn collective = findCollectiveKernel(step.op);
    program.collectives.push_back(collective);
    program.communicates.push_back(communicates(step.op));
    kernels::KernelFn fn;
    if (!collective)
      fn = registry.find(step.op, device_->kind(), kernels::stepDType(ctx));
    if (!collective && !fn)
      throw RuntimeError(std::string("no ") + (device_->kind() == DeviceKind::Cuda ? "CUDA" : "CPU") + " kernel for " +
                         opName(step.op) + " on " + dtypeName(kernels::stepDType(ctx)) + " (" + where() + ")");
    program.contexts.push_back(std::move(ctx));
    program.kernels.push_back(fn);
  }
  program.waitsFor = collectiveWaits(program);
  programs_.push_back(std::move(program));
}

namespace {
/// The bytes a step's buffers cover, as sorted disjoint [begin, end) address ranges.
using Ranges = std::vector<std::pair<uintptr_t, uintptr_t>>;
Ranges rangesOf(const kernels::KernelContext &ctx) {
  Ranges ranges;
  for (const auto *list : {&ctx.inputs, &ctx.outputs})
    for (const TensorRef &t : *list)
      if (t.bytes() > 0)
        ranges.push_back({uintptr_t(t.data), uintptr_t(t.data) + t.bytes()});
  std::sort(ranges.begin(), ranges.end());
  Ranges merged;
  for (const auto &r : ranges)
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  return merged;
}
bool overlaps(const Ranges &a, const Ranges &sortedDisjoint) {
  for (const auto &[begin, end] : a) {
    auto next = std::lower_bound(sortedDisjoint.begin(), sortedDisjoint.end(), std::make_pair(end, uintptr_t(0)));
    if (next != sortedDisjoint.begin() && std::prev(next)->second > begin)
      return true;
  }
  return false;
}
} // namespace

std::vector<int64_t> Executor::collectiveWaits(const Program &program) {
  const size_t steps = program.contexts.size();
  std::vector<int64_t> waits(steps, -1);
  std::vector<std::pair<size_t, Ranges>> collectives; // steps that may be left in flight
  for (size_t i = 0; i < steps; ++i) {
    Ranges mine = rangesOf(program.contexts[i]);
    if (hasTrait(program.desc->steps[i].op, PlanTrait::PointToPoint)) {
      waits[i] = int64_t(i) - 1; // a transfer may wait for its peer: nothing of this rank's may lag
      continue;
    }
    for (auto it = collectives.rbegin(); it != collectives.rend(); ++it)
      if (overlaps(mine, it->second)) {
        waits[i] = int64_t(it->first);
        break;
      }
    if (program.collectives[i] && program.communicates[i])
      collectives.push_back({i, std::move(mine)});
  }
  return waits;
}

void Executor::settleCollectives(Program &program, int64_t until) {
  size_t step = 0;
  try {
    while (!inFlight_.empty()) {
      step = inFlight_.front().step;
      if (!inFlight_.front().work->test())
        break;
      inFlight_.pop_front();
    }
    while (!inFlight_.empty() && int64_t(inFlight_.front().step) <= until) {
      step = inFlight_.front().step;
      TraceRecorder *trace = options_.trace;
      double start = trace ? TraceRecorder::nowUs() : 0.0;
      auto began = std::chrono::steady_clock::now();
      inFlight_.front().work->wait();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (options_.profile) // a collective's time: posting it plus waiting for it
        program.stepSeconds[step] += seconds;
      if (trace) {
        std::string op = opName(program.desc->steps[step].op);
        trace->add(op.substr(op.rfind('.') + 1) + " wait", "comm", start, seconds * 1e6,
                   {{"loc", program.desc->steps[step].loc}, {"step", step}});
      }
      inFlight_.pop_front();
    }
  } catch (const RuntimeError &e) {
    inFlight_.clear();
    throw RuntimeError("program " + program.desc->name + ", step " + std::to_string(step) + " (" +
                       program.desc->steps[step].loc + "): " + e.what());
  }
}

void Executor::prepareCommunication() {
  // Every rank lists the same axis sets (from every program of the plan, in one sorted order):
  // a communicator that builds its groups collectively (NCCL) needs all ranks to agree.
  std::set<std::vector<std::string>> axisSets;
  std::set<int> peers;
  std::vector<int64_t> coords = meshCoordinates(options_.rank, plan_.meshShape);
  for (const RankProgram &program : plan_.programs)
    for (size_t i = 0; i < program.steps.size(); ++i) {
      const StepDesc &step = program.steps[i];
      if (!communicates(step.op))
        continue;
      kernels::OpAttrs attrs;
      try {
        attrs = kernels::decodeOpAttrs(step.op, step.attrs);
      } catch (const RuntimeError &e) {
        throw RuntimeError("program " + program.name + ", step " + std::to_string(i) + " (" + step.loc + "): " + e.what());
      }
      if (!hasTrait(step.op, PlanTrait::PointToPoint)) {
        axisSets.insert(attrs.meshAxes);
        continue;
      }
      if (!plan_.runsOn(program, options_.rank))
        continue;
      auto axis = std::find(plan_.meshAxes.begin(), plan_.meshAxes.end(), attrs.meshAxis);
      if (axis == plan_.meshAxes.end() || attrs.peer < 0 || attrs.peer >= plan_.meshShape[axis - plan_.meshAxes.begin()])
        continue; // the step fails with its message when it runs
      std::vector<int64_t> peer = coords;
      peer[axis - plan_.meshAxes.begin()] = attrs.peer;
      peers.insert((int)meshRank(peer, plan_.meshShape));
    }
  options_.comm->prepareGroups({axisSets.begin(), axisSets.end()}, plan_.meshShape, plan_.meshAxes);
  peers.erase(options_.rank);
  if (!peers.empty())
    options_.comm->preparePeers({peers.begin(), peers.end()});
}

Executor::~Executor() {
  if (device_)
    try {
      device_->synchronize(); // queued kernels may still use the memory about to be freed
    } catch (const RuntimeError &) {
    }
}

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
    upload(dst.data, tensor.data.data(), dst.bytes());
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
    const TensorRef &dst = views_[plan_.inputs[i].buffer];
    std::vector<uint8_t> bytes(dst.bytes());
    TensorRef t{bytes.data(), dst.dtype, dst.shape};
    uint64_t stream = seed ^ mix64(i + 1);
    for (int64_t k = 0; k < t.numel(); ++k) {
      double u = (mix64(stream + k) >> 11) * 0x1.0p-53; // uniform [0, 1)
      switch (t.dtype) {
      case DType::F32: t.as<float>()[k] = (float)u; break;
      case DType::F64: t.as<double>()[k] = u; break;
      default: break; // integers and bools stay zero: valid indices and labels
      }
    }
    upload(dst.data, bytes.data(), bytes.size());
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
  const int64_t programIndex = program - programs_.begin();
  // A collective step may leave its collective running (CollectiveKernelFn): it completes while
  // the next steps run, polled between them, and is waited for before the first step that
  // touches its buffers (waitsFor) or at the end of the program.
  auto runStep = [&](size_t i) {
    kernels::KernelContext &ctx = program->contexts[i];
    if (!program->collectives[i])
      return program->kernels[i](ctx);
    if (std::unique_ptr<Work> work = program->collectives[i](ctx))
      inFlight_.push_back({i, std::move(work)});
  };
  for (size_t i = 0; i < program->contexts.size(); ++i) {
    program->contexts[i].step = trainingStep_ >= 0 ? (uint64_t)trainingStep_ : program->runs;
    device_->setFaultSite(faultSite(programIndex, i));
    if (!inFlight_.empty())
      settleCollectives(*program, program->waitsFor[i]);
    try {
      if (!options_.profile && !trace) {
        runStep(i);
        continue;
      }
      double start = trace ? TraceRecorder::nowUs() : 0.0;
      auto began = std::chrono::steady_clock::now();
      runStep(i);
      if (device_->kind() != DeviceKind::Cpu)
        device_->synchronize(); // a step's time is its kernels' time, not the time to queue them
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (options_.profile)
        program->stepSeconds[i] += seconds;
      if (trace) {
        const StepDesc &step = program->desc->steps[i];
        std::string op = opName(step.op);
        trace->add(op.substr(op.rfind('.') + 1), program->communicates[i] ? "comm" : "compute", start,
                   seconds * 1e6, {{"loc", step.loc}, {"step", i}});
      }
    } catch (const RuntimeError &e) {
      inFlight_.clear();
      throw RuntimeError("program " + name + ", step " + std::to_string(i) + " (" + program->desc->steps[i].loc +
                         "): " + e.what());
    }
  }
  settleCollectives(*program, INT64_MAX);
  checkDeviceFaults();
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
      std::string key = opName(p.desc->steps[i].op);
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

std::vector<double> Executor::stepSeconds(const std::string &name) const {
  for (const Program &p : programs_)
    if (p.desc->name == name)
      return p.stepSeconds;
  return {};
}

void Executor::copyToHost(const TensorRef &tensor, void *dst) const {
  device_->copy(dst, MemorySpace::Host, tensor.data, device_->tensorSpace(), tensor.bytes());
  checkDeviceFaults(); // a copy that moved bytes waited for the work before it: its faults are in
}

void Executor::checkDeviceFaults() const {
  kernels::KernelFault fault = device_->takeFault();
  if (fault.kind == int32_t(kernels::FaultKind::None))
    return;
  // As the CPU kernel's failure reads once run() has named its step.
  std::string where = "a device kernel";
  auto [programIndex, step] = programAndStep(fault.site);
  if (programIndex < programs_.size() && step < programs_[programIndex].desc->steps.size()) {
    const StepDesc &s = programs_[programIndex].desc->steps[step];
    where = "program " + programs_[programIndex].desc->name + ", step " + std::to_string(step) + " (" + s.loc +
            "): " + opName(s.op);
  }
  throw RuntimeError(where + ": " + kernels::describeFault(fault));
}

HostTensor Executor::readOutput(const std::string &name, const std::string &program) const {
  TensorRef t = output(name, program);
  HostTensor host{t.dtype, t.shape, std::vector<uint8_t>(t.bytes())};
  copyToHost(t, host.data.data());
  return host;
}

double Executor::readScalar(const std::string &name, const std::string &program) const {
  TensorRef t = output(name, program);
  if (t.numel() != 1)
    throw RuntimeError("output '" + name + "' has " + std::to_string(t.numel()) + " elements, not one");
  uint8_t bytes[8] = {};
  copyToHost(t, bytes);
  switch (t.dtype) {
  case DType::F32: return *reinterpret_cast<float *>(bytes);
  case DType::F64: return *reinterpret_cast<double *>(bytes);
  case DType::F16:
  case DType::BF16: return load16(t.dtype, *reinterpret_cast<uint16_t *>(bytes));
  case DType::I64: return (double)*reinterpret_cast<int64_t *>(bytes);
  case DType::I32: return *reinterpret_cast<int32_t *>(bytes);
  default: throw RuntimeError("output '" + name + "' is not a number");
  }
}

TensorRef Executor::output(const std::string &name, const std::string &program) const {
  for (auto it = plan_.outputs.rbegin(); it != plan_.outputs.rend(); ++it)
    if (it->name == name && (program.empty() || it->program == program))
      return views_[it->buffer];
  throw RuntimeError("the plan has no output '" + name + "'");
}

namespace {
/// The whole stored value of synthetic parameter `b` (syntheticParameterValue per element of the
/// model's order, then permuted as stored): every layout of a model starts from the same values.
std::vector<uint8_t> syntheticValue(const BufferDesc &b) {
  std::vector<uint8_t> bytes(b.storedBytes());
  int64_t n = (int64_t)(bytes.size() / dtypeSize(b.dtype));
  const uint64_t stream = syntheticParameterStream(b.name);
  for (int64_t i = 0; i < n; ++i) {
    double v = syntheticParameterValue(stream, i);
    switch (b.dtype) {
    case DType::F32: reinterpret_cast<float *>(bytes.data())[i] = (float)v; break;
    case DType::F64: reinterpret_cast<double *>(bytes.data())[i] = v; break;
    case DType::F16:
    case DType::BF16: reinterpret_cast<uint16_t *>(bytes.data())[i] = store16(b.dtype, (float)v); break;
    default: break; // integer parameters stay zero
    }
  }
  if (!b.permuted())
    return bytes;
  std::vector<uint8_t> stored(bytes.size());
  permuteElements(bytes.data(), stored.data(), b.storedView, b.storedPerm, dtypeSize(b.dtype), false);
  return stored;
}
} // namespace

void Executor::loadBlock(const BufferDesc &b, void *dst) const {
  if (b.synthetic) {
    std::vector<uint8_t> whole = syntheticValue(b);
    if (!b.sharded())
      std::memcpy(dst, whole.data(), whole.size());
    else
      copyBlock(whole.data(), b.splitView(), dst, b.shape, blockStarts(plan_, options_.rank, b.shardDims, b.shape),
                dtypeSize(b.dtype), true);
    return;
  }
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
  const BufferDesc *desc = &plan_.buffers[variableIndex(name)];
  HostTensor whole;
  whole.dtype = local.dtype;
  if (!desc->sharded()) {
    whole.shape = local.shape;
    whole.data.resize(local.bytes());
    copyToHost(local, whole.data.data());
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
  // Gathered in the device's memory (the communicator moves tensor memory), then read back.
  constexpr int kGatherSlot = Device::kScratchSlots - 1; // the collectives use the others
  void *gathered = device_->scratch(kGatherSlot, local.bytes() * group.size());
  options_.comm->allGather(local.data, gathered, local.numel(), local.dtype, group);
  std::vector<uint8_t> blocks(local.bytes() * group.size());
  device_->copy(blocks.data(), MemorySpace::Host, gathered, device_->tensorSpace(), blocks.size());
  checkDeviceFaults();
  whole.shape = desc->globalShape;
  whole.data.resize(desc->storedBytes());
  std::vector<int64_t> view = desc->splitView();
  for (size_t k = 0; k < group.size(); ++k)
    copyBlock(whole.data.data(), view, blocks.data() + k * local.bytes(), desc->shape,
              blockStarts(plan_, group[k], desc->shardDims, desc->shape), dtypeSize(local.dtype), false);
  return inModelOrder(*desc, std::move(whole));
}

void Executor::setVariable(const std::string &name, const HostTensor &whole) {
  TensorRef local = variable(name);
  const BufferDesc *desc = &plan_.buffers[variableIndex(name)];
  std::vector<int64_t> shape = desc->sharded() ? desc->globalShape : desc->shape;
  if (whole.dtype != desc->dtype || whole.shape != shape || whole.data.size() != desc->storedBytes())
    throw RuntimeError("'" + name + "': the value has type " + dtypeName(whole.dtype) + " and shape " +
                       shapeString(whole.shape) + ", the plan's variable " + dtypeName(desc->dtype) + " and " +
                       shapeString(shape));
  const std::vector<uint8_t> *stored = &whole.data;
  std::vector<uint8_t> permuted;
  if (desc->permuted()) { // the model's order back to the plan's stored order
    permuted.resize(whole.data.size());
    permuteElements(whole.data.data(), permuted.data(), desc->storedView, desc->storedPerm, dtypeSize(desc->dtype),
                    false);
    stored = &permuted;
  }
  if (!desc->sharded()) {
    upload(local.data, stored->data(), stored->size());
    return;
  }
  std::vector<uint8_t> block(local.bytes());
  copyBlock(const_cast<uint8_t *>(stored->data()), desc->splitView(), block.data(), desc->shape,
            blockStarts(plan_, options_.rank, desc->shardDims, desc->shape), dtypeSize(desc->dtype), true);
  upload(local.data, block.data(), block.size());
}

HostTensor Executor::inModelOrder(const BufferDesc &desc, HostTensor whole) {
  if (!desc.permuted())
    return whole;
  std::vector<uint8_t> model(whole.data.size());
  permuteElements(whole.data.data(), model.data(), desc.storedView, desc.storedPerm, dtypeSize(whole.dtype), true);
  whole.data = std::move(model);
  return whole;
}

size_t Executor::variableIndex(const std::string &name) const {
  for (size_t i = 0; i < plan_.buffers.size(); ++i) {
    const BufferDesc &b = plan_.buffers[i];
    if ((b.kind == BufferKind::Parameter || b.kind == BufferKind::State) && b.aliasOf < 0 && b.name == name)
      return i;
  }
  throw RuntimeError("the plan has no parameter or state '" + name + "'");
}

TensorRef Executor::variable(const std::string &name) const { return views_[variableIndex(name)]; }

} // namespace cpc
