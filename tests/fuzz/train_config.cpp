//===- train_config.cpp - fuzz the JSON training config --------------------===//
//
// Bytes -> CFG.json -> TrainRecipe::loadFile, then what `cpc compile --config` does with it
// (tools/cpc/Compile.cpp): a --set override, validate() against a microbatch, the learning-rate
// schedule, and the recipe's JSON form, which the plan stores and the runtime reads back with
// fromJson; the two must describe the same schedule.
//
#include "runtime/TrainRecipe.h"
#include "tests/fuzz/FuzzUtil.h"

#include <algorithm>
#include <cmath>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = cpc::fuzz::tempPath("config.json");
  cpc::fuzz::writeFile(path, data, size);
  cpc::TrainRecipe recipe;
  try {
    recipe.loadFile(path);
    recipe.apply({{"NUM_EPOCHS", 2}}, "--set NUM_EPOCHS");
    const int64_t microbatch = 2;
    if (recipe.totalBatchSize == 0) // as cpc compile: the model's batch times the accumulation
      recipe.totalBatchSize = microbatch * recipe.accumulation;
    recipe.validate(microbatch, path);
  } catch (const std::runtime_error &) {
    return 0;
  }
  cpc::TrainRecipe back = cpc::TrainRecipe::fromJson(recipe.toJson());
  const int64_t big = int64_t(1) << 30; // steps past the schedule's end, without overflow
  const int64_t end = recipe.numEpochs < big && recipe.stepsPerEpoch < big ? recipe.numEpochs * recipe.stepsPerEpoch : big;
  for (int64_t step : {int64_t(0), int64_t(1), std::min(recipe.stepsPerEpoch, big), end}) {
    double a = recipe.lrAt(step), b = back.lrAt(step);
    if (!(a == b || (std::isnan(a) && std::isnan(b))))
      cpc::fuzz::finding("the recipe's JSON form gives another learning rate at step " + std::to_string(step));
  }
  return 0;
}
