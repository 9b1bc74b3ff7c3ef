//===- ModelState.h - per-rank model-state bytes of a training plan -------===//
//
// What ZeRO is about: the bytes each rank holds for parameters, gradients and optimizer states,
// read off the plan, next to the formula of the plan's ZeRO stage (fp32 AdamW: stage 0 16Ψ,
// 1 8Ψ+8Ψ/N, 2 4Ψ+12Ψ/N, 3 16Ψ/N) for the parameters ZeRO shards, plus 16 bytes per element
// of those it keeps whole (sizes that do not divide by N). A mixed-precision plan also shows
// DeepSpeed's mixed-precision formula next to what cpc holds (f32 master weights as the
// parameters, 16-bit copies cast once per step).
//
#ifndef CPC_RUNTIME_MODELSTATE_H
#define CPC_RUNTIME_MODELSTATE_H

#include "runtime/Plan.h"

#include <nlohmann/json.hpp>

namespace cpc {

struct ModelStateBytes {
  int zeroStage = 0;
  int64_t ranks = 1;             // data-parallel ranks
  int64_t trainableElements = 0; // Ψ: elements of all trainable parameters (global)
  int64_t shardableElements = 0; // of which ZeRO can split (element count divides by ranks)
  int64_t parameters = 0;        // trainable parameter bytes held by a rank
  int64_t frozenParameters = 0;  // not updated: not a model state of the optimizer
  int64_t gradients = 0;         // bytes of the gradients the updates read (a rank's share)
  int64_t optimizerStates = 0;   // AdamW moments
  int64_t accumulators = 0;      // gradient-accumulation buffers (only with accumulation)
  // Mixed precision: the parameters above are the f32 master weights (split over dp from
  // ZeRO-1 on where every read is through the copy); each step casts them to 16-bit copies once
  // (arena memory, live through forward and backward; gathered whole at ZeRO-1/2).
  std::string precision = "fp32";
  int64_t lowPrecisionCopies = 0; // bytes of those copies
  // The parameters read only through their 16-bit copy (not those an op reads in f32, such as a
  // norm's scale, whose masters stay whole): their elements, what a rank holds for them (master,
  // copy, gradient, moments), and DeepSpeed's mixed-precision formula over them.
  int64_t sixteenBitElements = 0;
  int64_t sixteenBitShardable = 0; // of which ZeRO split the update (16 B each of the others)
  int64_t sixteenBitBytes = 0;
  int64_t sixteenBitFormula() const;
  int64_t total() const { return parameters + gradients + optimizerStates; }
  /// What DeepSpeed's mixed-precision formula counts: the total with the 16-bit copies.
  int64_t mixedPrecisionTotal() const { return total() + lowPrecisionCopies; }
  /// The ZeRO formula for this stage over the shardable elements, plus 16 B per other element.
  int64_t formula() const;
  /// DeepSpeed's mixed-precision formula (16-bit parameters and gradients, f32 master weights
  /// and moments, K = 12): 2Ψ+2Ψ+12Ψ; 4Ψ+12Ψ/N; 2Ψ+14Ψ/N; 16Ψ/N.
  int64_t mixedPrecisionFormula() const;
  nlohmann::json toJson() const;
  std::string summary() const; // one line
};

/// Model-state bytes of rank `rank` (every rank holds the same amount in an SPMD plan).
ModelStateBytes modelStateBytes(const Plan &plan, int rank = 0);

} // namespace cpc

#endif
