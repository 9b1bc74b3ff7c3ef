//===- TrainRecipe.h - the training recipe: JSON config + flags -----------===//
//
// Colossal-AI's config keys (TOTAL_BATCH_SIZE, LR, WEIGHT_DECAY, NUM_EPOCHS, WARMUP_EPOCHS,
// parallel, fp16, gradient_accumulation, NUM_MICRO_BATCHES, clip_grad_norm) plus cpc's own (BETAS, EPS, MIN_LR,
// lr_schedule, STEPS_PER_EPOCH, frozen, no_weight_decay, precision). LR is the base rate per 256 samples:
// the rate used is LR * TOTAL_BATCH_SIZE / 256, as in MAE.
//
#ifndef CPC_RUNTIME_TRAINRECIPE_H
#define CPC_RUNTIME_TRAINRECIPE_H

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace cpc {

/// A bad config file or flag: one line naming the file and key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TrainRecipe {
  int64_t totalBatchSize = 0; // 0: the model's batch times gradient_accumulation
  double baseLr = 1.5e-4;     // per 256 samples
  double minLr = 0.0;
  double weightDecay = 0.05;
  int64_t numEpochs = 1;
  double warmupEpochs = 0;
  int64_t stepsPerEpoch = 1;
  std::string lrSchedule = "constant"; // "constant" | "cosine"
  int64_t accumulation = 1;
  int64_t tensorParallel = 1; // parallel.tensor.size
  // parallel.tensor.mode: "1d" (Megatron), "2d" (Optimus), "2.5d" (Tesseract, with
  // parallel.tensor.depth) or "3d"; empty when the config does not say (or says null, Colossal's
  // None: the default, which --tp-mode may set).
  std::string tensorMode;
  int64_t tensorDepth = 0; // parallel.tensor.depth (0: not given)
  int64_t pipelineStages = 1; // parallel.pipeline
  // NUM_MICRO_BATCHES (Colossal's pipeline microbatches): cpc compile folds it into
  // `accumulation` (microbatches per update = gradient_accumulation x NUM_MICRO_BATCHES).
  int64_t microBatches = 1;
  // parallel.tensor.shard: manual splits as REGEX=SPEC (the --shard syntax), applied in order
  // before the command line's --shard rules (which therefore win).
  std::vector<std::string> shardRules;
  // Mixed precision: "fp32", "bf16" or "fp16" (the cpc key `precision`, or Colossal's
  // fp16.mode: "torch" is fp16 with torch's GradScaler, "naive" fp16 with Colossal's scaler).
  // fp16 scales the loss dynamically (fp16.initial_scale, growth_factor, backoff_factor,
  // growth_interval, hysteresis).
  std::string precision = "fp32";
  double initialScale = 65536.0, growthFactor = 2.0, backoffFactor = 0.5;
  int64_t growthInterval = 2000, hysteresis = 1;
  double clipGradNorm = 0.0;
  double beta1 = 0.9, beta2 = 0.95, epsilon = 1e-8;
  std::vector<std::string> frozen;
  std::vector<std::string> noWeightDecay;
  /// Weight decay on 1-D parameters and *.bias too, as torch.optim.AdamW(model.parameters()) does
  /// (false: MAE's and timm's groups, which leave them alone).
  bool decayNormsAndBiases = false;
  /// `seed`: the seed of every random op the import makes (Dropout's masks, RandomUniform); each
  /// op draws its own stream of it (docs/random.md).
  int64_t seed = 0;

  /// A Python config's top-level keys cpc does not use (its model's and dataset's: MODEL,
  /// NORM_PIX_LOSS, ...): the caller lists them in one line. A JSON config refuses them instead.
  std::vector<std::string> unusedKeys;

  /// Reads `path` over the current values: JSON, or a Colossal-AI `config.py` (PATH.py, read as
  /// is: runtime/PyConfig.h); throws ConfigError naming the file and key.
  void loadFile(const std::string &path);
  /// Applies one JSON object of config keys; `origin` names it in errors. Unknown keys fail,
  /// or with `collectUnknown` go to unusedKeys.
  void apply(const nlohmann::json &config, const std::string &origin, bool collectUnknown = false);
  /// The `fp16` object: Colossal's mode and the loss scaler's keys.
  void applyFp16(const nlohmann::json &v, const std::string &origin);
  /// Checks values that depend on each other (and on the model's microbatch size).
  void validate(int64_t microbatch, const std::string &origin) const;

  double learningRate() const { return baseLr * totalBatchSize / 256.0; }
  /// The learning rate of optimizer step `step` (0-based): linear warmup, then half-cycle cosine
  /// down to MIN_LR over the remaining epochs, per iteration as MAE does; or constant.
  double lrAt(int64_t step) const;
  nlohmann::json toJson() const;
  static TrainRecipe fromJson(const nlohmann::json &j);
};

} // namespace cpc

#endif
