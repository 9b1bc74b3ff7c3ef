//===- OpAttrs.h - a plan step's attributes, decoded once into typed fields ===//
//
// A plan stores each step's op attributes as JSON under their ODS names. The executor decodes
// them once, when it loads the plan, into an OpAttrs; kernels (CPU and CUDA alike) read its
// fields instead of looking names up on every call. A name that two ops use with different types
// ("axis": an int for softmax, a mesh axis name for send; "low": pad's ints, random_uniform's
// float) lands in the field of its JSON type. Discardable annotations (names with a dot, such as
// "cpc.shardings") are the compiler's, not the kernels', and are skipped; any other unknown name
// is an error, so that a plan from a newer compiler fails clearly instead of running wrong.
//
#ifndef CPC_KERNELS_OPATTRS_H
#define CPC_KERNELS_OPATTRS_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace cpc::kernels {

/// The activation a fused GEMM applies after its bias (attribute "activation").
enum class Activation : uint8_t { None, Gelu };
/// GELU's form (attribute "approximate").
enum class GeluApproximation : uint8_t { None, Tanh };
/// scatter_nd's combination of updates with the data (attribute "reduction").
enum class ScatterReduction : uint8_t { None, Add, Mul, Max, Min };
/// Where attention's heads lie (attribute "layout"): "bhnd" q [..., N, D] (heads among the batch
/// dims), "bnhd" q [..., N, H, D] (each token's heads side by side).
enum class AttentionLayout : uint8_t { HeadMajor, TokenMajor };
/// all_reduce's combination (attribute "kind"): the dialect's ReductionKind (CpcAttrs.td),
/// generated; the communicator's ReduceOp has the same order.
enum class CollectiveReduction : uint8_t {
#define CPC_ENUM_ReductionKind(reduction, name) reduction,
#include "dialects/cpc/CpcOpTable.h.inc"
};

struct OpAttrs {
  // Integer attributes, with the ODS defaults where the op has one.
  int64_t axis = 0;            // softmax, layer_norm, concat, gather, topk, argsort, ...
  int64_t k = 0;               // topk
  int64_t groups = 1;          // conv2d and its gradients
  int64_t dimSize = -1;        // gather_grad: the gathered dim's size (-1: unset)
  int64_t seed = 0;            // random_uniform
  int64_t root = 0;            // broadcast_from, reduce_to: the root's position in the group
  int64_t peer = -1;           // send, recv: the peer's coordinate along `axisName`
  int64_t channel = 0;         // send, recv
  int64_t dim = 0;             // all_gather, reduce_scatter: the gathered / scattered dim
  int64_t splitDim = 0, concatDim = 0; // all_to_all
  // Integer lists.
  std::vector<int64_t> axes;   // reductions
  std::vector<int64_t> strides, padding, dilations; // conv2d, slice (strides)
  std::vector<int64_t> starts, limits;              // slice
  std::vector<int64_t> permutation;                 // transpose
  std::vector<int64_t> lowPadding, highPadding, interior; // pad ("low", "high", "interior")
  // Floats.
  double epsilon = 0;          // layer_norm, adamw
  double beta1 = 0, beta2 = 0, weightDecay = 0; // adamw
  std::vector<double> weightDecays; // multi_tensor_adamw: one per tensor
  double value = 0;            // pad
  double low = 0, high = 1;    // random_uniform
  double scale = 1;            // attention, attention_grad: the scores' factor
  // Flags.
  bool transposeLhs = false, transposeRhs = false; // matmul
  bool keepdims = false;       // reductions
  bool largest = true, sorted = true; // topk
  bool descending = false;     // argsort
  // Enumerations.
  GeluApproximation approximate = GeluApproximation::None;
  Activation activation = Activation::None; // matmul_bias
  ScatterReduction reduction = ScatterReduction::None;
  AttentionLayout attentionLayout = AttentionLayout::HeadMajor; // attention, attention_grad ("layout")
  CollectiveReduction kind = CollectiveReduction::Sum;
  // Mesh names.
  std::string mesh;                    // collectives: the mesh symbol
  std::vector<std::string> meshAxes;   // collectives: "axes" as names
  std::string axisName;                // send, recv: "axis" as a name
  std::vector<std::string> blockAxes;  // gather (and its gradient) over a block of the indexed dim
  nlohmann::json sharding;             // shard_slice: the target sharding (read by its kernel's setup)

  /// Which of the optional attributes the step has (those whose absence means something).
  bool hasValue = false, hasDimSize = false, hasBlockAxes = false;
};

/// Decodes a step's attributes; throws RuntimeError naming the attribute on an unknown name or
/// a value of the wrong type.
OpAttrs decodeOpAttrs(const nlohmann::json &attrs);

} // namespace cpc::kernels

#endif
