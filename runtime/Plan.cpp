//===- Plan.cpp - plan (de)serialization and validation -------------------===//
// Over 800 lines: the plan format's reader, writer and validation share its layout constants and
// checks; readPlan and writePlan are each other's mirror.
#include "runtime/Plan.h"
#include "kernels/OpAttrs.h"
#include "support/CheckedSize.h"

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <fstream>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cpc {

namespace {
constexpr char kMagic[8] = {'C', 'P', 'C', 'P', 'L', 'A', 'N', '\0'};
constexpr size_t kHeaderSize = 64;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t headerSize;
  uint64_t metadataSize;
  uint64_t blobOffset;
  uint64_t blobSize;
  uint64_t checksum;
  uint64_t fileSize;
  uint64_t reserved;
};
static_assert(sizeof(Header) == kHeaderSize, "plan header must be 64 bytes");

size_t alignUp(size_t v) { return (v + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment; }

BufferKind parseKind(const std::string &s) {
  for (BufferKind k : {BufferKind::Arena, BufferKind::Parameter, BufferKind::State, BufferKind::Constant,
                       BufferKind::Input})
    if (s == bufferKindName(k))
      return k;
  throw RuntimeError("unknown buffer kind '" + s + "'");
}
} // namespace

const char *bufferKindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Arena: return "arena";
  case BufferKind::Parameter: return "parameter";
  case BufferKind::State: return "state";
  case BufferKind::Constant: return "constant";
  case BufferKind::Input: return "input";
  }
  return "?";
}

namespace {
constexpr const char *kPlanModeNames[] = {"train", "infer"}; // by PlanMode's value
} // namespace

const char *planModeName(PlanMode mode) { return kPlanModeNames[static_cast<size_t>(mode)]; }

std::optional<PlanMode> findPlanMode(std::string_view name) {
  for (size_t i = 0; i < std::size(kPlanModeNames); ++i)
    if (name == kPlanModeNames[i])
      return static_cast<PlanMode>(i);
  return std::nullopt;
}

namespace {
// Each role's names by value: "" (None), the dialect's names, then "?" where parseRole stops.
const char *const kVariableRoleNames[] = {"",
#define CPC_ENUM_StateRole(role, name) name,
#include "dialects/cpc/CpcOpTable.h.inc"
                                          "?"};
const char *const kRuntimeInputNames[] = {"",
#define CPC_ENUM_RuntimeInput(input, name) name,
#include "dialects/cpc/CpcOpTable.h.inc"
                                          "?"};
const char *const kProgramPhaseNames[] = {"",
#define CPC_ENUM_Phase(phase, name) name,
#include "dialects/cpc/CpcOpTable.h.inc"
                                          "?"};

template <size_t N> const char *nameAt(const char *const (&names)[N], size_t index) {
  return index < N ? names[index] : names[N - 1];
}
} // namespace

const char *roleName(VariableRole role) { return nameAt(kVariableRoleNames, size_t(role)); }
const char *roleName(RuntimeInputKind input) { return nameAt(kRuntimeInputNames, size_t(input)); }
const char *roleName(ProgramPhase phase) { return nameAt(kProgramPhaseNames, size_t(phase)); }

template <typename Role> Role parseRole(const std::string &name) {
  for (int i = 0; std::string(roleName(Role(i))) != "?"; ++i) // each enum's names end in "?"
    if (name == roleName(Role(i)))
      return Role(i);
  throw RuntimeError("unknown role '" + name + "'");
}
template VariableRole parseRole<VariableRole>(const std::string &);
template RuntimeInputKind parseRole<RuntimeInputKind>(const std::string &);
template ProgramPhase parseRole<ProgramPhase>(const std::string &);

std::string Plan::programOfPhase(ProgramPhase phase) const {
  for (const auto &p : programs)
    if (p.phase == phase)
      return p.name;
  return "";
}

namespace {
/// Streaming form of planChecksum: all chunks but the last must be multiples of 8 bytes.
uint64_t checksumUpdate(uint64_t h, const uint8_t *data, size_t size) {
  size_t words = size / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 8 * i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (size_t i = words * 8; i < size; ++i)
    h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}
uint64_t checksumInit(size_t totalSize) { return 0xcbf29ce484222325ull ^ totalSize; }
} // namespace

uint64_t planChecksum(const uint8_t *data, size_t size) {
  return checksumUpdate(checksumInit(size), data, size);
}

int Plan::rootOf(int buffer) const {
  int b = buffer;
  for (size_t hops = 0; buffers.at(b).aliasOf >= 0; ++hops) {
    if (hops > buffers.size())
      throw RuntimeError("invalid plan: alias cycle at buffer " + std::to_string(buffer));
    b = buffers[b].aliasOf;
  }
  return b;
}

bool Plan::runsOn(const RankProgram &p, int rank) const {
  if (p.rank != -1 && p.rank != rank)
    return false;
  if (p.coordinates.empty())
    return true;
  std::vector<int64_t> coords = meshCoordinates(rank, meshShape);
  for (const auto &[axis, coordinate] : p.coordinates) {
    auto it = std::find(meshAxes.begin(), meshAxes.end(), axis);
    if (it == meshAxes.end() || coords[it - meshAxes.begin()] != coordinate)
      return false;
  }
  return true;
}

int64_t Plan::pointToPointChannels() const {
  int64_t channels = 0;
  for (const RankProgram &p : programs)
    for (const StepDesc &s : p.steps)
      if (hasTrait(s.op, PlanTrait::PointToPoint))
        channels = std::max(channels, kernels::decodeOpAttrs(s.op, s.attrs).channel + 1); // validated: decodes
  for (const auto *list : {&inputs, &outputs})
    for (const NamedBuffer &n : *list)
      channels = std::max(channels, n.transfer + 1);
  return channels;
}

std::vector<bool> Plan::buffersOfRank(int rank) const {
  std::vector<bool> used(buffers.size(), false);
  std::vector<std::string> names;
  for (const RankProgram &p : programs)
    if (runsOn(p, rank)) {
      names.push_back(p.name);
      for (const StepDesc &s : p.steps)
        for (const auto *list : {&s.inputs, &s.outputs})
          for (int b : *list)
            used[rootOf(b)] = true;
    }
  for (const auto *list : {&inputs, &outputs})
    for (const NamedBuffer &n : *list)
      if (std::find(names.begin(), names.end(), n.program) != names.end())
        used[rootOf(n.buffer)] = true;
  return used;
}

int64_t Plan::arenaBytesOfRank(int rank) const {
  int64_t bytes = 0;
  for (const auto &p : programs)
    if (runsOn(p, rank))
      bytes = std::max(bytes, p.arenaBytes);
  return bytes;
}

bool Plan::hasSyntheticParameters() const {
  return std::any_of(buffers.begin(), buffers.end(), [](const BufferDesc &b) { return b.synthetic; });
}

int64_t Plan::bytesOfKind(BufferKind kind) const {
  int64_t total = 0;
  for (const auto &b : buffers)
    if (b.kind == kind && b.aliasOf < 0)
      total += b.bytes();
  return total;
}

nlohmann::json Plan::metadata() const {
  using nlohmann::json;
  json j;
  j["version"] = version;
  j["mode"] = planModeName(mode);
  j["source"] = source;
  j["world_size"] = worldSize;
  j["device"] = deviceKindName(device);
  j["mesh"] = {{"shape", meshShape}, {"axes", meshAxes}};
  j["predicted_peak_bytes"] = predictedPeakBytes;
  j["training"] = training;
  j["inference"] = inference;
  json bufs = json::array();
  for (const auto &b : buffers) {
    json d = {{"name", b.name},     {"dtype", dtypeName(b.dtype)}, {"shape", b.shape},
              {"kind", bufferKindName(b.kind)}, {"offset", b.offset}, {"alias_of", b.aliasOf},
              {"trainable", b.trainable}, {"role", roleName(b.role)}, {"space", memorySpaceName(b.space)}};
    if (b.kind == BufferKind::State)
      d["init"] = b.init;
    if (b.synthetic)
      d["synthetic"] = true;
    if (b.sharded()) {
      d["global_shape"] = b.globalShape;
      d["shard_dims"] = b.shardDims;
    }
    if (b.permuted()) {
      d["stored_view"] = b.storedView;
      d["stored_perm"] = b.storedPerm;
    }
    bufs.push_back(std::move(d));
  }
  j["buffers"] = bufs;
  auto named = [](const std::vector<NamedBuffer> &v) {
    json a = json::array();
    for (const auto &n : v) {
      a.push_back({{"name", n.name}, {"buffer", n.buffer}, {"program", n.program}, {"runtime", roleName(n.runtime)}});
      if (n.isTransfer())
        a.back()["transfer"] = n.transfer;
    }
    return a;
  };
  j["inputs"] = named(inputs);
  j["outputs"] = named(outputs);
  json progs = json::array();
  for (const auto &p : programs) {
    json steps = json::array();
    for (const auto &s : p.steps) {
      json step = {{"op", opName(s.op)}, {"in", s.inputs}, {"out", s.outputs}, {"attrs", s.attrs}, {"loc", s.loc}};
      if (s.cost != CostClass::Memory || s.flops) // most steps move bytes: the defaults stay out
        step.update({{"cost", costClassName(s.cost)}, {"flops", s.flops}});
      if (!s.gemm.empty())
        step["gemm"] = s.gemm;
      if (s.bytes)
        step["bytes"] = s.bytes;
      steps.push_back(step);
    }
    json where = json::object();
    for (const auto &[axis, coordinate] : p.coordinates)
      where[axis] = coordinate;
    progs.push_back({{"rank", p.rank}, {"where", where}, {"name", p.name}, {"phase", roleName(p.phase)},
                     {"arena_bytes", p.arenaBytes}, {"steps", steps}});
    if (p.chunk >= 0)
      progs.back()["chunk"] = p.chunk;
  }
  j["programs"] = progs;
  return j;
}

std::vector<int64_t> meshCoordinates(int64_t rank, const std::vector<int64_t> &shape) {
  std::vector<int64_t> c(shape.size());
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    c[d] = rank % shape[d];
    rank /= shape[d];
  }
  return c;
}

int64_t meshRank(const std::vector<int64_t> &coords, const std::vector<int64_t> &shape) {
  int64_t rank = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    rank = rank * shape[d] + coords[d];
  return rank;
}

std::pair<int64_t, int64_t> meshShardIndex(int64_t rank, const std::vector<int64_t> &shape,
                                           const std::vector<std::string> &names,
                                           const std::vector<std::string> &axes) {
  std::vector<bool> along = meshDimsAlong(names, axes);
  std::vector<int64_t> c = meshCoordinates(rank, shape);
  int64_t index = 0, parts = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (along[d]) {
      index = index * shape[d] + c[d];
      parts *= shape[d];
    }
  return {index, parts};
}

std::vector<bool> meshDimsAlong(const std::vector<std::string> &names, const std::vector<std::string> &axes) {
  std::vector<bool> along(names.size(), false);
  for (const std::string &axis : axes) {
    auto it = std::find(names.begin(), names.end(), axis);
    if (it == names.end())
      throw RuntimeError("the mesh has no axis '" + axis + "'");
    along[it - names.begin()] = true;
  }
  return along;
}

std::vector<int> meshGroup(int rank, const std::vector<int64_t> &shape, const std::vector<bool> &along) {
  // The coordinates along `along` counted through like an odometer (the last dim fastest), the
  // others kept: ascending ranks, without visiting the whole world (plans of 512 ranks ask this
  // per step and rank).
  std::vector<int64_t> c = meshCoordinates(rank, shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (along[d])
      c[d] = 0;
  std::vector<int> group;
  for (;;) {
    group.push_back((int)meshRank(c, shape));
    int64_t d = (int64_t)shape.size() - 1;
    for (; d >= 0; --d) {
      if (!along[d])
        continue;
      if (++c[d] < shape[d])
        break;
      c[d] = 0;
    }
    if (d < 0)
      return group;
  }
}

std::vector<int64_t> BufferDesc::splitView() const {
  if (shape.size() == 1 && globalShape.size() != 1)
    return {numElements(globalShape)};
  return globalShape;
}

int64_t Plan::shardIndex(int rank, const std::vector<std::string> &axes) const {
  return meshShardIndex(rank, meshShape, meshAxes, axes).first;
}

std::vector<std::string> Plan::batchAxes() const {
  const nlohmann::json &run = runMetadata();
  if (!run.is_object())
    return {};
  return run.value("batch_axes", std::vector<std::string>{});
}

std::vector<std::string> Plan::zeroAxes() const {
  std::vector<std::string> axes = batchAxes();
  if (std::find(axes.begin(), axes.end(), "dp") == axes.end())
    return {};
  return {"dp"};
}

int64_t Plan::batchBlocks() const {
  std::vector<std::string> axes = batchAxes();
  return axes.empty() ? 1 : meshShardIndex(0, meshShape, meshAxes, axes).second;
}

uint64_t syntheticParameterStream(const std::string &name) {
  uint64_t h = 1469598103934665603ull; // FNV-1a of the name
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

double syntheticUniform(uint64_t stream, int64_t index) {
  uint64_t x = stream + 0x9e3779b97f4a7c15ull * uint64_t(index + 1); // splitmix64 of the index
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (x >> 11) * 0x1.0p-53; // [0, 1)
}

double syntheticParameterValue(uint64_t stream, int64_t index) {
  return (2 * syntheticUniform(stream, index) - 1) * 0.02 * 1.7320508075688772; // standard deviation 0.02
}

std::vector<int> Plan::shardGroup(int rank, const std::vector<std::string> &axes) const {
  return meshGroup(rank, meshShape, meshDimsAlong(meshAxes, axes));
}

namespace {
/// The largest world a plan may name: far above any job, small enough that loops over ranks
/// while validating stay quick.
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;

void failPlan(const std::string &message) { throw RuntimeError("invalid plan: " + message); }

/// The kind of the op a step of `program` names; a name this runtime's dialect lacks (a plan
/// from another compiler version) fails here, naming the step, before anything runs.
OpKind stepOpKind(const nlohmann::json &name, const RankProgram &program, const nlohmann::json &step) {
  std::string op = name.get<std::string>();
  if (std::optional<OpKind> kind = findOpKind(op))
    return *kind;
  throw RuntimeError("step " + std::to_string(program.steps.size()) + " of program " + program.name + " (" +
                     step.value("loc", std::string()) + ") runs '" + op + "', which is no op this runtime knows");
}

/// Checks that buffer `b`'s shapes describe tensors cpc supports (so that bytes() and
/// storedBytes() cannot overflow) and that its blob data, if any, lies inside the blob.
void validateBufferSizes(const Plan &plan, const BufferDesc &b, size_t index) {
  std::string what = "buffer " + std::to_string(index) + " ('" + b.name + "')";
  if (!checkedTensorBytes(b.shape, dtypeSize(b.dtype)))
    failPlan(what + ": " + tensorSizeProblem(b.shape, dtypeSize(b.dtype)));
  if (b.sharded() && !checkedTensorBytes(b.globalShape, dtypeSize(b.dtype)))
    failPlan(what + ": global " + tensorSizeProblem(b.globalShape, dtypeSize(b.dtype)));
  if (b.aliasOf < -1 || b.aliasOf >= (int)plan.buffers.size() || b.aliasOf == (int)index)
    failPlan(what + " aliases an invalid buffer");
  if (!std::isfinite(b.init) || (b.init != 0 && b.kind != BufferKind::State))
    failPlan(what + " has an invalid initial value");
  if (b.synthetic && (b.kind != BufferKind::Parameter || b.aliasOf >= 0 || b.offset != 0))
    failPlan(what + " is synthetic but is not a parameter's own buffer");
  if (b.synthetic || b.aliasOf >= 0 || (b.kind != BufferKind::Parameter && b.kind != BufferKind::Constant))
    return;
  auto end = checkedAdd(b.offset, (int64_t)b.storedBytes());
  if (b.offset < 0 || b.offset % kPlanAlignment || !end || (uint64_t)*end > plan.blobSize())
    failPlan(what + " lies outside the data blob");
}

void validateShardedBuffer(const Plan &plan, const BufferDesc &b) {
  std::string what = "buffer '" + b.name + "'";
  if (b.kind != BufferKind::Parameter && b.kind != BufferKind::State)
    failPlan(what + " is sharded but is not a parameter or state");
  if (b.shardDims.size() != b.shape.size() || (b.shape.size() != 1 && b.shape.size() != b.globalShape.size()))
    failPlan(what + ": its shard dims, block and global shape do not match");
  std::vector<int64_t> view = b.splitView();
  std::vector<bool> used(plan.meshAxes.size(), false);
  for (size_t d = 0; d < view.size(); ++d) {
    int64_t parts = 1;
    for (const std::string &axis : b.shardDims[d]) {
      auto it = std::find(plan.meshAxes.begin(), plan.meshAxes.end(), axis);
      if (it == plan.meshAxes.end())
        failPlan(what + " is sharded over '" + axis + "', which the mesh lacks");
      if (used[it - plan.meshAxes.begin()])
        failPlan(what + " is sharded twice over '" + axis + "'");
      used[it - plan.meshAxes.begin()] = true;
      parts *= plan.meshShape[it - plan.meshAxes.begin()]; // <= world size: cannot overflow
    }
    if (checkedMul(b.shape[d], parts) != view[d])
      failPlan(what + " is not a 1/" + std::to_string(parts) + " block of its global shape along dim " +
               std::to_string(d));
  }
}

void validatePermutedBuffer(const BufferDesc &b) {
  std::string what = "buffer '" + b.name + "'";
  if ((b.kind != BufferKind::Parameter && b.kind != BufferKind::State) || b.storedView.size() != b.storedPerm.size() ||
      b.storedView.size() > 16)
    failPlan(what + ": a stored order needs a parameter or state and one permuted dim per view dim");
  std::vector<bool> seen(b.storedPerm.size(), false);
  for (int64_t p : b.storedPerm) {
    if (p < 0 || p >= (int64_t)seen.size() || seen[p])
      failPlan(what + ": stored_perm is not a permutation");
    seen[p] = true;
  }
  auto elements = checkedNumElements(b.storedView);
  if (!elements || *elements != numElements(b.sharded() ? b.globalShape : b.shape))
    failPlan(what + ": stored_view does not hold the variable's elements");
}

void validateMesh(const Plan &plan) {
  if (plan.worldSize < 1 || plan.worldSize > kMaxWorldSize)
    failPlan("world size " + std::to_string(plan.worldSize));
  int64_t meshRanks = 1;
  for (int64_t d : plan.meshShape) {
    if (d < 1 || d > kMaxWorldSize)
      failPlan("mesh dim " + std::to_string(d));
    meshRanks *= d; // each factor <= 2^20 and the product checked below before it can grow past 2^40
    if (meshRanks > kMaxWorldSize)
      failPlan("the mesh does not match the world size");
  }
  if (plan.meshShape.size() != plan.meshAxes.size() || (!plan.meshShape.empty() && meshRanks != plan.worldSize))
    failPlan("the mesh does not match the world size");
  for (const auto &p : plan.programs)
    if (p.rank < -1 || p.rank >= plan.worldSize)
      failPlan("a program belongs to rank " + std::to_string(p.rank) + " of " + std::to_string(plan.worldSize));
  std::vector<bool> covered(plan.worldSize, false);
  bool everyRank = false;
  for (const auto &p : plan.programs)
    p.rank == -1 ? (void)(everyRank = true) : (void)(covered[p.rank] = true);
  for (int r = 0; r < plan.worldSize && !everyRank; ++r)
    if (!covered[r])
      failPlan("rank " + std::to_string(r) + " has no program");
}
} // namespace

void Plan::validate() const {
  validateMesh(*this);
  for (size_t i = 0; i < buffers.size(); ++i)
    validateBufferSizes(*this, buffers[i], i);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferDesc &b = buffers[i];
    if (b.bytes() > buffers[rootOf(i)].bytes())
      failPlan("buffer " + std::to_string(i) + " is larger than the memory it aliases");
    if (b.sharded() && b.aliasOf < 0)
      validateShardedBuffer(*this, b);
    if (b.permuted())
      validatePermutedBuffer(b);
    // One memory space per plan for now: the device's (a CPU plan's buffers are host memory).
    MemorySpace expected = device == DeviceKind::Cpu ? MemorySpace::Host : MemorySpace::Device;
    if (b.space != expected)
      failPlan("buffer '" + b.name + "' is in " + memorySpaceName(b.space) + " memory, but a " +
               deviceKindName(device) + " plan keeps its tensors in " + memorySpaceName(expected) + " memory");
  }
  int64_t arena = 0; // programs of a rank share one arena, as large as the largest of them
  for (const auto &p : programs) {
    if (p.arenaBytes < 0)
      failPlan("program '" + p.name + "' has a negative arena size");
    for (const auto &[axis, coordinate] : p.coordinates) {
      auto it = std::find(meshAxes.begin(), meshAxes.end(), axis);
      if (it == meshAxes.end() || coordinate < 0 || coordinate >= meshShape[it - meshAxes.begin()])
        failPlan("program '" + p.name + "' runs at " + axis + " = " + std::to_string(coordinate) +
                 ", which is not a coordinate of the mesh");
    }
    arena = std::max(arena, p.arenaBytes);
  }
  for (const auto &b : buffers) {
    if (b.kind != BufferKind::Arena || b.aliasOf >= 0)
      continue;
    auto end = checkedAdd(b.offset, (int64_t)b.bytes());
    if (b.offset < 0 || !end || *end > arena)
      failPlan("arena buffer '" + b.name + "' lies outside the arena");
  }
  for (const auto &p : programs) {
    for (const auto &s : p.steps)
      for (const auto *list : {&s.inputs, &s.outputs})
        for (int b : *list)
          if (b < 0 || b >= (int)buffers.size())
            failPlan("step " + std::string(opName(s.op)) + " uses buffer " + std::to_string(b) + " of " + std::to_string(buffers.size()));
  }
  for (const auto *list : {&inputs, &outputs})
    for (const auto &n : *list) {
      if (n.buffer < 0 || n.buffer >= (int)buffers.size())
        failPlan("input/output '" + n.name + "' has no buffer");
      if (n.transfer >= kChannelsPerTag)
        failPlan("input/output '" + n.name + "' has a hand-over channel out of range");
    }
  for (const auto &p : programs)
    for (const auto &s : p.steps) { // every step's attributes decode by its op's rules
      kernels::OpAttrs attrs;
      try {
        attrs = kernels::decodeOpAttrs(s.op, s.attrs);
      } catch (const RuntimeError &e) {
        failPlan("step " + std::string(opName(s.op)) + " at " + s.loc + ": " + e.what());
      }
      if (hasTrait(s.op, PlanTrait::PointToPoint) && (attrs.channel < 0 || attrs.channel >= kChannelsPerTag))
        failPlan("step " + std::string(opName(s.op)) + " at " + s.loc + " has no channel in [0, " + std::to_string(kChannelsPerTag) + ")");
    }
}

namespace {

/// Writes the body of a plan file in chunks of a multiple of 8 bytes (so the word-wise checksum
/// comes out as over one array) and sums it on the way.
class ChecksummedWriter {
public:
  ChecksummedWriter(std::ofstream &out, uint64_t sum) : out_(out), sum_(sum) { chunk_.reserve(kChunk); }
  void append(const uint8_t *data, size_t bytes) {
    while (bytes > 0) {
      size_t n = std::min(bytes, kChunk - chunk_.size());
      chunk_.insert(chunk_.end(), data, data + n);
      data += n, bytes -= n;
      if (chunk_.size() == kChunk)
        flush();
    }
  }
  void zeros(size_t bytes) {
    static const uint8_t kZeros[4096] = {};
    for (size_t n; bytes > 0; bytes -= n)
      append(kZeros, n = std::min(bytes, sizeof kZeros));
  }
  uint64_t finish() {
    flush();
    return sum_;
  }

private:
  static constexpr size_t kChunk = size_t(8) << 20;
  void flush() {
    sum_ = checksumUpdate(sum_, chunk_.data(), chunk_.size());
    out_.write(reinterpret_cast<const char *>(chunk_.data()), chunk_.size());
    chunk_.clear();
  }
  std::ofstream &out_;
  uint64_t sum_;
  std::vector<uint8_t> chunk_;
};

/// The pieces of `plan`'s blob, made one at a time (one piece's memory at once).
void streamPieces(const Plan &plan, ChecksummedWriter &writer) {
  std::vector<uint8_t> piece;
  size_t at = 0;
  for (const BlobPiece &p : plan.blobPieces) {
    writer.zeros(p.offset - at);
    piece.resize(p.bytes);
    p.fill(piece.data());
    writer.append(piece.data(), p.bytes);
    at = p.offset + p.bytes;
  }
  writer.zeros(plan.blobPiecesSize - at);
}

} // namespace

void writePlan(const Plan &plan, const std::string &path) {
  if (!plan.blobFile.empty())
    throw RuntimeError(path + ": cannot write a plan whose data was left in " + plan.blobFile);
  std::vector<uint8_t> head = nlohmann::json::to_cbor(plan.metadata());
  size_t metadataSize = head.size();
  size_t blobOffset = alignUp(kHeaderSize + head.size());
  head.resize(blobOffset - kHeaderSize, 0); // metadata + padding: a multiple of 8 bytes
  size_t bodySize = head.size() + plan.blobSize();
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = plan.version;
  h.headerSize = kHeaderSize;
  h.metadataSize = metadataSize;
  h.blobOffset = blobOffset;
  h.blobSize = plan.blobSize();
  h.fileSize = kHeaderSize + bodySize;
  // Written beside the target and renamed over it: a failed write never leaves a partial plan.
  std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out)
    throw RuntimeError(path + ": cannot write the plan: " + std::strerror(errno));
  auto removeTemporary = [&] {
    out.close();
    std::remove(temporary.c_str());
  };
  try {
    out.write(reinterpret_cast<const char *>(&h), sizeof(h)); // its checksum is filled in below
    out.write(reinterpret_cast<const char *>(head.data()), head.size());
    uint64_t sum = checksumUpdate(checksumInit(bodySize), head.data(), head.size());
    if (plan.blobFromPieces) {
      ChecksummedWriter writer(out, sum);
      streamPieces(plan, writer);
      h.checksum = writer.finish();
    } else {
      h.checksum = checksumUpdate(sum, plan.blob.data(), plan.blob.size());
      out.write(reinterpret_cast<const char *>(plan.blob.data()), plan.blob.size());
    }
    out.seekp(0);
    out.write(reinterpret_cast<const char *>(&h), sizeof(h));
  } catch (...) { // a piece that cannot be made (the model's data unreadable) leaves no file
    removeTemporary();
    throw;
  }
  out.close();
  if (!out || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw RuntimeError(path + ": writing the plan failed: " + reason);
  }
}

void Plan::readPieces(size_t offset, size_t bytes, uint8_t *dst) const {
  std::memset(dst, 0, bytes);
  auto first = std::upper_bound(blobPieces.begin(), blobPieces.end(), offset,
                                [](size_t at, const BlobPiece &p) { return at < p.offset + p.bytes; });
  std::vector<uint8_t> staged;
  for (auto p = first; p != blobPieces.end() && p->offset < offset + bytes; ++p) {
    if (p->offset >= offset && p->offset + p->bytes <= offset + bytes) { // wholly inside: made in place
      p->fill(dst + (p->offset - offset));
      continue;
    }
    staged.resize(p->bytes);
    p->fill(staged.data());
    size_t begin = std::max(offset, p->offset), end = std::min(offset + bytes, p->offset + p->bytes);
    std::memcpy(dst + (begin - offset), staged.data() + (begin - p->offset), end - begin);
  }
}

void Plan::readBlob(size_t offset, size_t bytes, void *dst) const {
  if (offset > blobSize() || bytes > blobSize() - offset)
    throw RuntimeError("plan data [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                       ") lies outside the blob");
  if (blobFromPieces)
    return readPieces(offset, bytes, static_cast<uint8_t *>(dst));
  if (blobInMemory()) {
    std::memcpy(dst, blob.data() + offset, bytes);
    return;
  }
  int fd = ::open(blobFile.c_str(), O_RDONLY);
  if (fd < 0)
    throw RuntimeError(blobFile + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || (uint64_t)st.st_size != blobFileOffset + blobFileSize ||
      (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != blobFileMtimeNs) {
    ::close(fd);
    throw RuntimeError(blobFile + ": the plan changed on disk after it was read and verified");
  }
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd, static_cast<char *>(dst) + done, bytes - done, blobFileOffset + offset + done);
    if (n <= 0) {
      ::close(fd);
      throw RuntimeError(blobFile + ": cannot read the plan's data (" + (n < 0 ? std::strerror(errno) : "truncated") +
                         ")");
    }
    done += n;
  }
  ::close(fd);
}

// Over 80 lines: the file's sections checked in order against the bytes read so far (header, checksum,
// metadata, buffers, blob), each refusal naming the file; one reader keeps the offsets in one place.
Plan readPlan(const std::string &path, PlanBlob blobMode) {
  auto fail = [&](const std::string &m) -> RuntimeError { return RuntimeError(path + ": " + m); };
  std::ifstream in(path, std::ios::binary);
  struct stat st;
  if (!in || stat(path.c_str(), &st) != 0)
    throw fail(std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    throw fail("is a directory, not a plan");
  size_t size = st.st_size;
  Header h{};
  if (size < kHeaderSize || !in.read(reinterpret_cast<char *>(&h), sizeof(h)))
    throw fail("not a cpc plan (truncated: " + std::to_string(size) + " bytes)");
  if (std::memcmp(h.magic, kMagic, 8) != 0)
    throw fail("not a cpc plan (bad magic)");
  if (h.version != kPlanVersion)
    throw fail("plan format version " + std::to_string(h.version) + ", but this cpc reads version " +
               std::to_string(kPlanVersion) + "; recompile the model");
  if (h.fileSize != size)
    throw fail("truncated or damaged plan: header says " + std::to_string(h.fileSize) + " bytes, file has " +
               std::to_string(size));
  if (h.headerSize != kHeaderSize || h.blobOffset % kPlanAlignment || h.blobOffset < kHeaderSize ||
      h.blobOffset > size || h.blobSize != size - h.blobOffset || h.metadataSize > h.blobOffset - kHeaderSize)
    throw fail("corrupted plan (inconsistent header)");
  std::vector<uint8_t> head(h.blobOffset - kHeaderSize);
  Plan plan;
  if (!in.read(reinterpret_cast<char *>(head.data()), head.size()))
    throw fail("cannot read the plan");
  uint64_t sum = checksumUpdate(checksumInit(size - kHeaderSize), head.data(), head.size());
  if (blobMode == PlanBlob::InMemory) {
    plan.blob.resize(h.blobSize);
    if (!in.read(reinterpret_cast<char *>(plan.blob.data()), plan.blob.size()))
      throw fail("cannot read the plan");
    sum = checksumUpdate(sum, plan.blob.data(), plan.blob.size());
  } else { // verify the tensors by streaming them through a small buffer
    std::vector<uint8_t> chunk(8 << 20);
    for (uint64_t done = 0; done < h.blobSize;) {
      size_t n = std::min<uint64_t>(chunk.size(), h.blobSize - done);
      if (!in.read(reinterpret_cast<char *>(chunk.data()), n))
        throw fail("cannot read the plan");
      sum = checksumUpdate(sum, chunk.data(), n);
      done += n;
    }
    char *absolute = ::realpath(path.c_str(), nullptr);
    plan.blobFile = absolute ? absolute : path;
    std::free(absolute);
    plan.blobFileOffset = h.blobOffset;
    plan.blobFileSize = h.blobSize;
    plan.blobFileMtimeNs = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  }
  if (sum != h.checksum)
    throw fail("corrupted plan (checksum mismatch)");

  try {
    using nlohmann::json;
    json j = json::from_cbor(head.begin(), head.begin() + h.metadataSize);
    (void)j.dump(); // CBOR does not check that strings are UTF-8; everything that prints them does
    plan.version = j.at("version");
    std::optional<PlanMode> mode = findPlanMode(j.at("mode").get<std::string>());
    if (!mode)
      throw RuntimeError("unknown mode '" + j.at("mode").get<std::string>() + "' (expected train or infer)");
    plan.mode = *mode;
    plan.source = j.at("source");
    plan.worldSize = j.at("world_size");
    auto device = parseDeviceKind(j.at("device").get<std::string>());
    if (!device)
      throw RuntimeError("unknown device '" + j.at("device").get<std::string>() + "' (expected cpu or cuda)");
    plan.device = *device;
    plan.meshShape = j.at("mesh").at("shape").get<std::vector<int64_t>>();
    plan.meshAxes = j.at("mesh").at("axes").get<std::vector<std::string>>();
    plan.predictedPeakBytes = j.at("predicted_peak_bytes");
    plan.training = j.at("training");
    plan.inference = j.at("inference");
    for (const auto &b : j.at("buffers")) {
      BufferDesc d;
      d.name = b.at("name");
      auto dt = parseDType(b.at("dtype"));
      if (!dt)
        throw RuntimeError("unknown dtype " + b.at("dtype").get<std::string>());
      d.dtype = *dt;
      d.shape = b.at("shape").get<std::vector<int64_t>>();
      d.kind = parseKind(b.at("kind"));
      d.offset = b.at("offset");
      d.aliasOf = b.at("alias_of");
      d.trainable = b.at("trainable");
      d.role = parseRole<VariableRole>(b.at("role"));
      auto space = parseMemorySpace(b.at("space").get<std::string>());
      if (!space)
        throw RuntimeError("buffer '" + d.name + "' has unknown memory space '" + b.at("space").get<std::string>() + "'");
      d.space = *space;
      if (d.kind == BufferKind::State)
        d.init = b.at("init");
      d.synthetic = b.value("synthetic", false);
      if (b.contains("shard_dims")) {
        d.globalShape = b.at("global_shape").get<std::vector<int64_t>>();
        d.shardDims = b.at("shard_dims").get<std::vector<std::vector<std::string>>>();
      }
      if (b.contains("stored_perm")) {
        d.storedView = b.at("stored_view").get<std::vector<int64_t>>();
        d.storedPerm = b.at("stored_perm").get<std::vector<int64_t>>();
      }
      plan.buffers.push_back(std::move(d));
    }
    for (const char *key : {"inputs", "outputs"})
      for (const auto &n : j.at(key))
        (std::string(key) == "inputs" ? plan.inputs : plan.outputs)
            .push_back({n.at("name"), n.at("buffer"), n.at("program"), parseRole<RuntimeInputKind>(n.at("runtime")),
                        n.value("transfer", (int64_t)-1)});
    for (const auto &p : j.at("programs")) {
      RankProgram prog;
      prog.rank = p.at("rank");
      for (const auto &[axis, coordinate] : p.at("where").items())
        prog.coordinates.push_back({axis, coordinate.get<int64_t>()});
      prog.name = p.at("name");
      prog.phase = parseRole<ProgramPhase>(p.at("phase"));
      prog.chunk = p.value("chunk", (int64_t)-1);
      prog.arenaBytes = p.at("arena_bytes");
      for (const auto &s : p.at("steps")) {
        prog.steps.push_back({stepOpKind(s.at("op"), prog, s), s.at("in").get<std::vector<int>>(), s.at("out").get<std::vector<int>>(),
                              s.at("attrs"), s.at("loc")});
        std::optional<CostClass> cost = findCostClass(s.value("cost", "memory"));
        if (!cost || s.value("flops", (int64_t)0) < 0)
          throw RuntimeError("step " + std::to_string(prog.steps.size() - 1) + " of " + prog.name +
                             " has a bad cost class or FLOP count");
        prog.steps.back().cost = *cost;
        prog.steps.back().flops = s.value("flops", (int64_t)0);
        prog.steps.back().gemm = s.value("gemm", std::vector<int64_t>{});
        prog.steps.back().bytes = s.value("bytes", (int64_t)0);
        if (prog.steps.back().bytes < 0)
          throw RuntimeError("step " + std::to_string(prog.steps.size() - 1) + " of " + prog.name + " moves < 0 bytes");
        if (!prog.steps.back().gemm.empty() && prog.steps.back().gemm.size() != 4)
          throw RuntimeError("step " + std::to_string(prog.steps.size() - 1) + " of " + prog.name +
                             ": gemm must be [batch, m, n, k]");
      }
      plan.programs.push_back(std::move(prog));
    }
  } catch (const RuntimeError &e) {
    throw fail(std::string("corrupted plan metadata: ") + e.what());
  } catch (const std::exception &e) {
    throw fail(std::string("corrupted plan metadata: ") + e.what());
  }
  try {
    plan.validate();
  } catch (const RuntimeError &e) {
    throw fail(e.what());
  }
  return plan;
}

} // namespace cpc
