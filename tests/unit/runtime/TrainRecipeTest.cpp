//===- TrainRecipeTest.cpp - the config's mixed-precision keys ------------===//
#include "runtime/TrainRecipe.h"

#include <gtest/gtest.h>

using namespace cpc;

namespace {

TrainRecipe parse(const char *text) {
  TrainRecipe r;
  r.apply(nlohmann::json::parse(text), "cfg.json");
  return r;
}

std::string errorOf(const char *text) {
  try {
    parse(text);
  } catch (const ConfigError &e) {
    return e.what();
  }
  return "";
}

// Tests that Colossal's fp16 modes map to cpc's precisions with their scaler's defaults (torch's
// GradScaler; Colossal's DynamicGradScaler for "naive"), whatever order the keys come in.
TEST(TrainRecipe, Fp16ModesAndScalerDefaults) {
  TrainRecipe fp32 = parse(R"({"fp16": {"mode": null}})");
  EXPECT_EQ(fp32.precision, "fp32");
  TrainRecipe torch = parse(R"({"fp16": {"mode": "torch"}})");
  EXPECT_EQ(torch.precision, "fp16");
  EXPECT_EQ(torch.initialScale, 65536);
  EXPECT_EQ(torch.growthInterval, 2000);
  EXPECT_EQ(torch.hysteresis, 1);
  // The keys after "mode" in sorted order and before it: both override the mode's defaults.
  TrainRecipe naive = parse(R"({"fp16": {"growth_interval": 7, "mode": "naive", "initial_scale": 1024}})");
  EXPECT_EQ(naive.precision, "fp16");
  EXPECT_EQ(naive.growthInterval, 7);
  EXPECT_EQ(naive.hysteresis, 2);
  EXPECT_EQ(naive.initialScale, 1024);
  EXPECT_EQ(parse(R"({"precision": "bf16"})").precision, "bf16");
}

// Tests that the plan's copy of the recipe keeps the precision and the scaler.
TEST(TrainRecipe, PrecisionRoundTripsThroughTheJson) {
  TrainRecipe r = parse(R"({"TOTAL_BATCH_SIZE": 8, "fp16": {"mode": "naive", "backoff_factor": 0.25, "growth_factor": 4}})");
  TrainRecipe back = TrainRecipe::fromJson(r.toJson());
  EXPECT_EQ(back.precision, "fp16");
  EXPECT_EQ(back.backoffFactor, 0.25);
  EXPECT_EQ(back.growthFactor, 4);
  EXPECT_EQ(back.hysteresis, 2);
  EXPECT_EQ(back.growthInterval, 1000);
}

// Tests that bad mixed-precision keys name the file and key.
TEST(TrainRecipe, BadMixedPrecisionKeysNameTheKey) {
  EXPECT_NE(errorOf(R"({"fp16": {"mode": "apex"}})").find("cfg.json: key 'fp16.mode': apex AMP"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": {"mode": "O2"}})").find("key 'fp16.mode'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": {"backoff_factor": 1}})").find("key 'fp16.backoff_factor'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": {"growth_factor": 0.5}})").find("key 'fp16.growth_factor'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": {"initial_scale": 0}})").find("key 'fp16.initial_scale'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": {"hysteresis": 0}})").find("key 'fp16.hysteresis'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": {"scale": 2}})").find("key 'fp16.scale': unknown key"), std::string::npos);
  EXPECT_NE(errorOf(R"({"fp16": "torch"})").find("key 'fp16'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"precision": "fp8"})").find("key 'precision'"), std::string::npos);
}

} // namespace
