//===- Plan.h - the execution plan: what cpc compile writes, cpc-run runs --===//
//
// A plan is a set of per-rank programs (linear schedules of kernel steps over buffers) plus the
// buffers' static memory layout and the initial values of parameters and constants. A rank may
// have several named programs (an inference plan has "main"; a training plan has the step's
// phases); they run one after another, share the persistent buffers (parameters, optimizer state)
// and reuse one arena.
//
// File layout (little endian):
//   [0, 64)      header: magic "CPCPLAN\0", u32 version, u32 header size, u64 metadata size,
//                u64 blob offset, u64 blob size, u64 checksum, u64 file size, 8 reserved bytes
//   [64, ...)    metadata: nlohmann::json as CBOR
//   blob offset  raw tensors, each 64-byte aligned (blob offset is 64-byte aligned too)
// The checksum covers every byte after the header.
//
#ifndef CPC_RUNTIME_PLAN_H
#define CPC_RUNTIME_PLAN_H

#include "kernels/OpKind.h"
#include "kernels/Tensor.h"
#include "runtime/CostProfile.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cpc {

// 2: sharded parameters (global_shape, shard_axes) and all_gather's dim; a reader of version 1
// would silently ignore both. 3: roles of state buffers, runtime inputs and programs. 4: sharded
// variables split per dim (shard_dims) for tensor parallelism, parameters in another element order
// (stored_view, stored_perm), all_to_all, all_reduce's kind.
// 5: programs scoped to mesh coordinates ("where"). 6: pipelines: forward/backward phases,
// a program's model chunk, hand-over inputs and outputs ("transfer"), the schedule in the
// training metadata. 7: mixed precision: loss-scaler state roles, a state's initial value
// ("init"), the training metadata's precision and loss scaling. 8: the device a plan runs on
// ("device": cpu or cuda) and each buffer's memory space ("space": host or device). 9:
// parameters without an initial value in the blob ("synthetic": the runtime makes them). 10:
// inference plans across ranks: the "inference" metadata (microbatches, batch axes, the forward
// pipeline schedule), programs of phase infer; each step's cost class and FLOPs.
constexpr uint32_t kPlanVersion = 10;
constexpr size_t kPlanAlignment = 64;

/// Collectives run through fixed scratch memory whatever the message size (so that the predicted
/// peak holds): ring steps move chunks of at most kCollectiveChunkBytes through two such buffers.
/// A bucket of several tensors is reduced where its members lie (no packing buffer).
constexpr int64_t kCollectiveChunkBytes = 1 << 20;

/// Point-to-point messages are tagged by channel and microbatch (a pipeline sends the same
/// channel once per microbatch; the tag keeps them apart whatever order the ranks run in):
/// microbatch * (the plan's channels) + channel, which must stay within the MPI's tag bound
/// (checked when a run starts; MPI promises only 32767).
constexpr int64_t kChannelsPerTag = 1 << 16; // channels a plan may use
constexpr int64_t kMaxMicrobatches = 1 << 14;
inline int64_t pointToPointTag(int64_t channel, int64_t microbatch, int64_t channels) {
  return microbatch * channels + channel;
}

/// Arena: temporaries of one program; Parameter: initialized from the blob, persistent;
/// State: persistent, every element starting at `init` (zero for optimizer moments and gradient
/// accumulators; the initial scale for the loss scale);
/// Constant: read-only blob data; Input: bound by the runtime before a program runs.
enum class BufferKind { Arena, Parameter, State, Constant, Input };
const char *bufferKindName(BufferKind kind);

// Roles: None, then the cases of the dialect's StateRole, RuntimeInput and Phase enums
// (CpcAttrs.td) in their order and under their names, generated from the op table (cpc-tblgen).
// The runtime reads these, never a buffer's or program's name.
/// What a state buffer holds.
enum class VariableRole : uint8_t {
  None,
#define CPC_ENUM_StateRole(role, name) role,
#include "dialects/cpc/CpcOpTable.h.inc"
};
/// An input the runtime computes each step instead of reading user data.
enum class RuntimeInputKind : uint8_t {
  None,
#define CPC_ENUM_RuntimeInput(input, name) input,
#include "dialects/cpc/CpcOpTable.h.inc"
};
/// Which part of a training step a program is (None: inference).
enum class ProgramPhase : uint8_t {
  None,
#define CPC_ENUM_Phase(phase, name) phase,
#include "dialects/cpc/CpcOpTable.h.inc"
};
/// The plan's role for the dialect's `role` (one of StateRole, RuntimeInput, Phase): the same
/// case, after None.
template <typename PlanRole, typename DialectRole> PlanRole planRole(DialectRole role) {
  return PlanRole(1 + static_cast<int>(role));
}
const char *roleName(VariableRole role);
const char *roleName(RuntimeInputKind input);
const char *roleName(ProgramPhase phase);
/// Parses a name written by roleName ("" is None); throws RuntimeError on anything else.
template <typename Role> Role parseRole(const std::string &name);

struct BufferDesc {
  std::string name;             // value name: graph input/param name, or the op location
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  BufferKind kind = BufferKind::Arena;
  int64_t offset = 0;           // arena offset (Arena) or blob offset (Parameter, Constant)
  int aliasOf = -1;             // a view of another buffer's memory (reshape, in-place)
  bool trainable = false;       // parameters only
  VariableRole role = VariableRole::None; // state buffers
  double init = 0;              // state buffers: the value every element starts with
  bool synthetic = false;       // parameters only: no data in the blob; the runtime fills the value
                                // with deterministic pseudo-random numbers (syntheticParameterValue)
  MemorySpace space = MemorySpace::Host; // where the runtime allocates it (Device on a GPU plan)
  // A sharded variable: `shape` is one rank's block of the value of `globalShape`, whose dims are
  // split over the mesh axes in `shardDims` (one list per dim of `shape`, major to minor). Tensor
  // parallelism splits the global dims themselves (`shape` has the global rank); ZeRO-3 splits
  // the flattened value (`shape` is 1-D, one list). A parameter's blob holds the whole initial
  // value; each rank loads its block.
  std::vector<int64_t> globalShape;
  std::vector<std::vector<std::string>> shardDims;
  // A variable kept in another element order than the model's (its VariableOp's stored_view and
  // stored_perm; a parameter's moments and accumulator follow the parameter's):
  // stored = transpose(reshape(model value, storedView), storedPerm).
  std::vector<int64_t> storedView;
  std::vector<int64_t> storedPerm;

  size_t bytes() const { return numElements(shape) * dtypeSize(dtype); }
  bool sharded() const { return !shardDims.empty(); }
  bool permuted() const { return !storedPerm.empty(); }
  /// The global value viewed with `shape`'s rank: globalShape, or flattened for a 1-D block.
  std::vector<int64_t> splitView() const;
  /// Bytes of its data in the blob (the whole value of a sharded parameter).
  size_t storedBytes() const { return sharded() ? numElements(globalShape) * dtypeSize(dtype) : bytes(); }
};

/// Element `index` (in the model's order) of synthetic parameter `name`, whose stream is
/// syntheticParameterStream(name): uniform with the standard deviation 0.02 of a transformer's
/// initializers, the same on every rank and run.
uint64_t syntheticParameterStream(const std::string &name);
double syntheticParameterValue(uint64_t stream, int64_t index);
/// Element `index` of stream `stream`, uniform in [0, 1) (what syntheticParameterValue scales).
double syntheticUniform(uint64_t stream, int64_t index);

struct StepDesc {
  OpKind op{};                  // the op the step runs (a plan file holds its name)
  std::vector<int> inputs;
  std::vector<int> outputs;
  nlohmann::json attrs = nlohmann::json::object();
  std::string loc;              // the ONNX node it came from, for messages
  // What the step costs (CostProfile): the throughput that prices it, and its FLOPs (gemm and
  // attention; the others are priced by the bytes of their operands and results).
  CostClass cost = CostClass::Memory;
  int64_t flops = 0;
  int64_t bytes = 0;         // what it reads and writes (a slice reads its result's worth)
  std::vector<int64_t> gemm; // a GEMM's [batch, m, n, k] (matmuls, convolutions), priced by shape
};

struct NamedBuffer {
  std::string name;
  int buffer = -1;
  std::string program = "main"; // which program reads (input) or produces (output) it
  RuntimeInputKind runtime = RuntimeInputKind::None; // computed by the runtime (lr, step), not user data
  // A pipeline hand-over (>= 0): the output of an earlier program of the rank that the runtime
  // keeps per microbatch and binds to the input of a later one with the same channel.
  int64_t transfer = -1;
  bool isRuntime() const { return runtime != RuntimeInputKind::None; }
  bool isTransfer() const { return transfer >= 0; }
};

struct RankProgram {
  int rank = 0; // -1: every rank runs it (SPMD), or those at `coordinates`
  // Only the ranks at these mesh coordinates run it (e.g. {"pp", 1}: the ranks of one pipeline
  // stage, a dp x tp sub-mesh); empty: no restriction.
  std::vector<std::pair<std::string, int64_t>> coordinates;
  std::string name = "main";
  ProgramPhase phase = ProgramPhase::None;
  int64_t chunk = -1; // the model chunk of a pipeline's forward or backward program
  int64_t arenaBytes = 0;
  std::vector<StepDesc> steps;
};

/// A piece of a plan's blob made on demand, e.g. a parameter's initial value read from the model:
/// a compile streams such pieces into the plan file instead of holding every weight twice.
struct BlobPiece {
  size_t offset = 0, bytes = 0;
  std::function<void(uint8_t *dst)> fill; // writes exactly `bytes` bytes at dst
};

/// What a plan runs: the training step (and its optimizer) or the forward pass alone. Plans
/// store its name ("train", "infer").
enum class PlanMode : uint8_t { Train, Infer };
const char *planModeName(PlanMode mode);
/// The mode named `name`, or nullopt for a name that is neither.
std::optional<PlanMode> findPlanMode(std::string_view name);

struct Plan {
  uint32_t version = kPlanVersion;
  PlanMode mode = PlanMode::Infer;
  std::string source;           // the model it was compiled from
  int worldSize = 1;
  DeviceKind device = DeviceKind::Cpu; // what every rank runs on (one GPU per rank for cuda)
  std::vector<int64_t> meshShape;     // the device mesh (empty: one rank)
  std::vector<std::string> meshAxes;  // its axis names, e.g. {"dp"}
  std::vector<BufferDesc> buffers;
  std::vector<NamedBuffer> inputs;
  std::vector<NamedBuffer> outputs;
  std::vector<RankProgram> programs;
  std::vector<uint8_t> blob;
  // A plan read with PlanBlob::InFile leaves `blob` empty: its tensors stay in the file, from
  // byte `blobFileOffset` of `blobFile` on, and readBlob copies them out (so that a rank holds
  // only the parameters it keeps, not a second copy of every initial value).
  std::string blobFile;          // absolute path
  uint64_t blobFileOffset = 0;
  uint64_t blobFileSize = 0;
  int64_t blobFileMtimeNs = 0;   // readBlob refuses a file changed since readPlan verified it

  // A plan just built keeps its blob as pieces (ascending, disjoint; the gaps are zeros) of
  // `blobPiecesSize` bytes in all: writePlan streams them, readBlob makes the ones it reads.
  bool blobFromPieces = false;
  std::vector<BlobPiece> blobPieces;
  size_t blobPiecesSize = 0;

  bool blobInMemory() const { return blobFile.empty() && !blobFromPieces; }
  size_t blobSize() const { return blobFromPieces ? blobPiecesSize : blobInMemory() ? blob.size() : blobFileSize; }
  /// Copies `bytes` of the blob from `offset` to `dst`; throws RuntimeError naming the file.
  void readBlob(size_t offset, size_t bytes, void *dst) const;
  void readPieces(size_t offset, size_t bytes, uint8_t *dst) const;
  int64_t predictedPeakBytes = 0;
  nlohmann::json training = nlohmann::json::object(); // the recipe the runtime drives (train mode)
  // How the runtime drives an inference plan: "microbatch" (the model's batch), "microbatches",
  // "batch_axes", "data_parallel", "tensor_parallel" and, with pipeline stages, "pipeline".
  nlohmann::json inference = nlohmann::json::object();
  /// The metadata of the plan's mode: `training` or `inference`.
  const nlohmann::json &runMetadata() const { return mode == PlanMode::Train ? training : inference; }
  nlohmann::json &runMetadata() { return mode == PlanMode::Train ? training : inference; }

  /// Index of `rank` among the ranks that differ from it only along `axes` (row-major over the
  /// mesh): which block of a value split over those axes the rank holds.
  int64_t shardIndex(int rank, const std::vector<std::string> &axes) const;
  /// The world ranks that differ from `rank` only along `axes`, in shardIndex order.
  std::vector<int> shardGroup(int rank, const std::vector<std::string> &axes) const;
  /// The mesh axes that split the batch (data parallelism; ZeRO shards over them too): the
  /// training (or inference) metadata's "batch_axes".
  std::vector<std::string> batchAxes() const;
  /// The axes ZeRO shards model states over: dp (2D / 2.5D tensor parallelism also split the
  /// batch over tp_dep and tp_row, but those split weights as tensor parallelism does).
  std::vector<std::string> zeroAxes() const;
  /// How many blocks the batch axes cut the global batch into (1 without them).
  int64_t batchBlocks() const;
  /// The name of the program of `phase`, or "" when the plan has none.
  std::string programOfPhase(ProgramPhase phase) const;
  /// Whether `rank` runs program `p`: it is named (or the program is for every rank) and sits at
  /// the program's mesh coordinates.
  bool runsOn(const RankProgram &p, int rank) const;
  /// One more than the largest point-to-point channel or hand-over of the plan (0: none).
  int64_t pointToPointChannels() const;
  /// Which buffers (roots) the programs `rank` runs use: what the rank allocates (a pipeline
  /// stage holds only its own parameters and states).
  std::vector<bool> buffersOfRank(int rank) const;
  /// The arena one rank needs: the largest of its programs' arenas (they run one at a time).
  int64_t arenaBytesOfRank(int rank) const;
  /// Follows aliasOf to the buffer that owns the memory.
  int rootOf(int buffer) const;
  int64_t bytesOfKind(BufferKind kind) const;
  /// Whether the plan was compiled without weights (cpc compile --synthetic-weights).
  bool hasSyntheticParameters() const;
  /// Everything but the blob, as written into the file.
  nlohmann::json metadata() const;
  /// Checks internal consistency (indices, offsets, sizes); throws RuntimeError.
  void validate() const;
};

/// Rank `rank`'s groups over the sets of mesh axes a program's collectives name, each found once
/// (Plan::shardGroup), for the passes over a program's steps rank by rank.
class RankGroups {
public:
  RankGroups(const Plan &plan, int rank) : plan_(plan), rank_(rank) {}
  const std::vector<int> &over(const std::vector<std::string> &axes) {
    auto [it, added] = groups_.try_emplace(axes);
    if (added)
      it->second = plan_.meshShape.empty() ? std::vector<int>{0} : plan_.shardGroup(rank_, axes);
    return it->second;
  }

private:
  const Plan &plan_;
  int rank_;
  std::map<std::vector<std::string>, std::vector<int>> groups_;
};

/// Coordinates of `rank` on a row-major mesh of `shape`.
std::vector<int64_t> meshCoordinates(int64_t rank, const std::vector<int64_t> &shape);
/// The rank at `coords` of a row-major mesh of `shape` (the inverse of meshCoordinates).
int64_t meshRank(const std::vector<int64_t> &coords, const std::vector<int64_t> &shape);
/// Index of `rank` among the ranks that differ from it only along `axes` (mesh order), and how
/// many such ranks there are: which block of a value split over `axes` it holds, of how many.
std::pair<int64_t, int64_t> meshShardIndex(int64_t rank, const std::vector<int64_t> &shape,
                                           const std::vector<std::string> &names,
                                           const std::vector<std::string> &axes);
/// Which dims of a mesh with axis names `names` the axes `axes` are; throws on an unknown axis.
std::vector<bool> meshDimsAlong(const std::vector<std::string> &names, const std::vector<std::string> &axes);
/// The ranks that differ from `rank` only along the mesh dims marked in `along`, ascending (the
/// block order of the collectives).
std::vector<int> meshGroup(int rank, const std::vector<int64_t> &shape, const std::vector<bool> &along);

/// Writes `plan` to `path`; throws RuntimeError.
void writePlan(const Plan &plan, const std::string &path);
/// Where readPlan puts the tensors: in memory (Plan::blob) or left in the file (verified by
/// the checksum while streaming, read on demand with Plan::readBlob).
enum class PlanBlob { InMemory, InFile };
/// Reads and validates a plan; throws RuntimeError with a one-line message naming the file.
Plan readPlan(const std::string &path, PlanBlob blob = PlanBlob::InMemory);
/// The checksum used in plan files (64-bit, word-wise mixing; detects corruption, not attacks).
uint64_t planChecksum(const uint8_t *data, size_t size);

} // namespace cpc

#endif
