//===- TrainRecipe.cpp ----------------------------------------------------===//
#include "runtime/TrainRecipe.h"
#include "runtime/PyConfig.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sys/stat.h>

namespace cpc {

namespace {
[[noreturn]] void fail(const std::string &origin, const std::string &key, const std::string &message) {
  throw ConfigError(origin + ": " + (key.empty() ? "" : "key '" + key + "': ") + message);
}

double number(const nlohmann::json &v, const std::string &origin, const std::string &key) {
  if (!v.is_number())
    fail(origin, key, "expected a number, got " + v.dump());
  double d = v.get<double>();
  if (!std::isfinite(d))
    fail(origin, key, "expected a finite number, got " + v.dump());
  return d;
}

/// Integer keys (batch sizes, epochs, steps, accumulation) are counts of at most 2^31 - 1, as in
/// PyTorch and Colossal-AI; the range is checked on the JSON number before any conversion.
constexpr int64_t kMaxConfigInteger = (int64_t(1) << 31) - 1;

int64_t integer(const nlohmann::json &v, const std::string &origin, const std::string &key, int64_t min) {
  auto outOfRange = [&] {
    fail(origin, key, "must be between " + std::to_string(min) + " and " + std::to_string(kMaxConfigInteger) +
                          ", got " + v.dump());
  };
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > (uint64_t)kMaxConfigInteger)
      outOfRange();
  } else if (v.is_number_integer()) {
    if (v.get<int64_t>() < min || v.get<int64_t>() > kMaxConfigInteger)
      outOfRange();
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
    if (!(v.get<double>() >= (double)min && v.get<double>() <= (double)kMaxConfigInteger))
      outOfRange();
    return (int64_t)v.get<double>();
  } else {
    fail(origin, key, "expected an integer, got " + v.dump());
  }
  int64_t i = v.get<int64_t>();
  if (i < min)
    outOfRange();
  return i;
}

std::vector<std::string> regexList(const nlohmann::json &v, const std::string &origin, const std::string &key) {
  if (!v.is_array())
    fail(origin, key, "expected a list of regular expressions");
  std::vector<std::string> out;
  for (const auto &e : v) {
    if (!e.is_string())
      fail(origin, key, "expected strings, got " + e.dump());
    try {
      std::regex re(e.get<std::string>());
    } catch (const std::regex_error &) {
      fail(origin, key, "'" + e.get<std::string>() + "' is not a valid regular expression");
    }
    out.push_back(e);
  }
  return out;
}

std::string formatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

std::string libraryMessage(const nlohmann::json::exception &e) {
  std::string what = e.what(); // "[json.exception.parse_error.101] parse error at ...": drop the tag
  size_t tag = what.find("] ");
  return tag == std::string::npos ? what : what.substr(tag + 2);
}
/// parallel.tensor.shard: {"REGEX": "SPEC", ...} (a shardformer-style policy; applied in key
/// order) or ["REGEX=SPEC", ...] (in list order), SPEC as --shard writes it ("tp,-").
std::vector<std::string> shardRuleList(const nlohmann::json &v, const std::string &origin) {
  const std::string key = "parallel.tensor.shard";
  std::vector<std::string> rules;
  auto check = [&](const std::string &regex, const nlohmann::json &spec) {
    if (regex.empty() || !spec.is_string() || spec.get<std::string>().empty())
      fail(origin, key, "expected {\"REGEX\": \"SPEC\"} or [\"REGEX=SPEC\"] with SPEC like \"tp,-\"");
    rules.push_back(regex + "=" + spec.get<std::string>());
  };
  if (v.is_object()) {
    for (const auto &[regex, spec] : v.items())
      check(regex, spec);
  } else if (v.is_array()) {
    for (const nlohmann::json &entry : v) {
      std::string text = entry.is_string() ? entry.get<std::string>() : "";
      size_t eq = text.rfind('=');
      if (eq == std::string::npos)
        fail(origin, key, "expected \"REGEX=SPEC\" entries, got " + entry.dump());
      check(text.substr(0, eq), text.substr(eq + 1));
    }
  } else {
    fail(origin, key, "expected {\"REGEX\": \"SPEC\"} or [\"REGEX=SPEC\"]");
  }
  return rules;
}

} // namespace

void TrainRecipe::loadFile(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw ConfigError(path + ": cannot open the config file: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    throw ConfigError(path + ": is a directory, not a config file");
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".py") == 0) {
    apply(readPyConfig(path), path, /*collectUnknown=*/true);
    return;
  }
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path + ": cannot open the config file: " + std::strerror(errno));
  nlohmann::json config;
  std::string lastKey; // the key whose value the parser was reading when it failed
  auto track = [&](int, nlohmann::json::parse_event_t event, nlohmann::json &parsed) {
    if (event == nlohmann::json::parse_event_t::key)
      lastKey = parsed.get<std::string>();
    return true;
  };
  try {
    config = nlohmann::json::parse(in, track, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception &e) {
    throw ConfigError(path + ": not valid JSON" + (lastKey.empty() ? "" : " at key '" + lastKey + "'") + " (" +
                      libraryMessage(e) + ")");
  }
  apply(config, path);
}

// Over 80 lines: one case per config key, each a line or two, in the order the README lists them.
void TrainRecipe::apply(const nlohmann::json &config, const std::string &origin, bool collectUnknown) {
  if (!config.is_object())
    fail(origin, "", "the config must be a JSON object");
  for (const auto &[key, v] : config.items()) {
    if (key == "TOTAL_BATCH_SIZE") {
      totalBatchSize = integer(v, origin, key, 1);
    } else if (key == "LR") {
      baseLr = number(v, origin, key);
      if (!(baseLr > 0))
        fail(origin, key, "must be > 0");
    } else if (key == "MIN_LR") {
      minLr = number(v, origin, key);
      if (minLr < 0)
        fail(origin, key, "must be >= 0");
    } else if (key == "WEIGHT_DECAY") {
      weightDecay = number(v, origin, key);
      if (weightDecay < 0)
        fail(origin, key, "must be >= 0");
    } else if (key == "NUM_EPOCHS") {
      numEpochs = integer(v, origin, key, 1);
    } else if (key == "WARMUP_EPOCHS") {
      warmupEpochs = number(v, origin, key);
      if (warmupEpochs < 0)
        fail(origin, key, "must be >= 0");
    } else if (key == "STEPS_PER_EPOCH") {
      stepsPerEpoch = integer(v, origin, key, 1);
    } else if (key == "lr_schedule") {
      if (!v.is_string() || (v != "cosine" && v != "constant"))
        fail(origin, key, "must be \"cosine\" or \"constant\"");
      lrSchedule = v;
    } else if (key == "gradient_accumulation") {
      accumulation = integer(v, origin, key, 1);
    } else if (key == "NUM_MICRO_BATCHES") {
      microBatches = integer(v, origin, key, 1);
    } else if (key == "clip_grad_norm") {
      clipGradNorm = number(v, origin, key);
      if (clipGradNorm < 0)
        fail(origin, key, "must be >= 0 (0 turns clipping off)");
    } else if (key == "BETAS") {
      if (!v.is_array() || v.size() != 2)
        fail(origin, key, "expected [beta1, beta2]");
      beta1 = number(v[0], origin, key);
      beta2 = number(v[1], origin, key);
      if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1)
        fail(origin, key, "betas must be in [0, 1)");
    } else if (key == "EPS") {
      epsilon = number(v, origin, key);
      if (!(epsilon > 0))
        fail(origin, key, "must be > 0");
    } else if (key == "frozen") {
      frozen = regexList(v, origin, key);
    } else if (key == "no_weight_decay") {
      noWeightDecay = regexList(v, origin, key);
    } else if (key == "decay_norms_and_biases") {
      if (!v.is_boolean())
        fail(origin, key, "expected true or false");
      decayNormsAndBiases = v.get<bool>();
    } else if (key == "seed") {
      seed = integer(v, origin, key, 0);
    } else if (key == "parallel") {
      if (!v.is_object())
        fail(origin, key, "expected an object like {\"pipeline\": 1, \"tensor\": {\"mode\": null, \"size\": 1}}");
      for (const auto &[pk, pv] : v.items()) {
        if (pk == "pipeline") {
          pipelineStages = integer(pv, origin, "parallel.pipeline", 1);
        } else if (pk == "tensor") {
          if (!pv.is_object())
            fail(origin, "parallel.tensor", "expected {\"mode\": ..., \"size\": ...}");
          for (const auto &[tk, tv] : pv.items()) {
            if (tk == "size") {
              tensorParallel = integer(tv, origin, "parallel.tensor.size", 1);
            } else if (tk == "shard") {
              shardRules = shardRuleList(tv, origin);
            } else if (tk == "mode") {
              if (!tv.is_null() && tv != "1d" && tv != "2d" && tv != "2.5d" && tv != "3d")
                fail(origin, "parallel.tensor.mode",
                     "expected null, \"1d\", \"2d\", \"2.5d\" or \"3d\", got " + tv.dump());
              tensorMode = tv.is_null() ? "" : tv.get<std::string>(); // null: the default (1d), as Colossal's None
            } else if (tk == "depth") {
              tensorDepth = integer(tv, origin, "parallel.tensor.depth", 1);
            } else {
              fail(origin, "parallel.tensor." + tk, "unknown key");
            }
          }
        } else {
          fail(origin, "parallel." + pk, "unknown key");
        }
      }
    } else if (key == "fp16") {
      applyFp16(v, origin);
    } else if (key == "precision") {
      if (v != "fp32" && v != "bf16" && v != "fp16")
        fail(origin, key, "expected \"fp32\", \"bf16\" or \"fp16\", got " + v.dump());
      precision = v;
    } else if (collectUnknown) {
      unusedKeys.push_back(key);
    } else {
      fail(origin, key, "unknown key");
    }
  }
}

void TrainRecipe::applyFp16(const nlohmann::json &v, const std::string &origin) {
  if (!v.is_object())
    fail(origin, "fp16", "expected an object like {\"mode\": \"torch\"}");
  if (v.contains("mode")) { // first: the mode sets the scaler's defaults the other keys override
    const nlohmann::json &mode = v["mode"];
    if (mode.is_null() || mode == "None" || mode == "fp32") {
      precision = "fp32";
    } else if (mode == "torch" || mode == "AMP_TYPE.TORCH") { // torch.cuda.amp.GradScaler
      precision = "fp16";
      growthInterval = 2000;
      hysteresis = 1;
    } else if (mode == "naive" || mode == "AMP_TYPE.NAIVE") { // Colossal's DynamicGradScaler
      precision = "fp16";
      growthInterval = 1000;
      hysteresis = 2;
    } else if (mode == "apex" || mode == "AMP_TYPE.APEX") {
      fail(origin, "fp16.mode", "apex AMP is not available (use \"torch\" or \"naive\": fp16 with f32 master "
                                "weights and dynamic loss scaling, or the key precision = \"bf16\")");
    } else {
      fail(origin, "fp16.mode", "expected null, \"torch\" or \"naive\", got " + mode.dump());
    }
  }
  for (const auto &[k, fv] : v.items()) {
    std::string key = "fp16." + k;
    if (k == "mode") {
    } else if (k == "initial_scale" || k == "init_scale") {
      initialScale = number(fv, origin, key);
      if (!(initialScale >= 1 && initialScale <= 1e30))
        fail(origin, key, "must be between 1 and 1e30, got " + fv.dump());
    } else if (k == "growth_factor") {
      growthFactor = number(fv, origin, key);
      if (!(growthFactor >= 1 && growthFactor <= 1024))
        fail(origin, key, "must be between 1 and 1024, got " + fv.dump());
    } else if (k == "backoff_factor") {
      backoffFactor = number(fv, origin, key);
      if (!(backoffFactor > 0 && backoffFactor < 1))
        fail(origin, key, "must lie strictly between 0 and 1, got " + fv.dump());
    } else if (k == "growth_interval") {
      growthInterval = integer(fv, origin, key, 1);
    } else if (k == "hysteresis") {
      hysteresis = integer(fv, origin, key, 1);
    } else {
      fail(origin, key, "unknown key");
    }
  }
}

void TrainRecipe::validate(int64_t microbatch, const std::string &origin) const {
  if (minLr > learningRate())
    fail(origin, "MIN_LR", formatNumber(minLr) + " exceeds the peak learning rate LR * TOTAL_BATCH_SIZE / 256 = " +
                               formatNumber(learningRate()));
  if (warmupEpochs > numEpochs)
    fail(origin, "WARMUP_EPOCHS", "exceeds NUM_EPOCHS");
  if (totalBatchSize % accumulation)
    fail(origin, "gradient_accumulation", std::to_string(accumulation) + " does not divide TOTAL_BATCH_SIZE " +
                                              std::to_string(totalBatchSize));
  if (microbatch > 0 && totalBatchSize / accumulation != microbatch)
    fail(origin, "TOTAL_BATCH_SIZE", std::to_string(totalBatchSize) + " / gradient_accumulation " +
                                         std::to_string(accumulation) + " = " +
                                         std::to_string(totalBatchSize / accumulation) +
                                         " samples per microbatch, but the model's batch is " +
                                         std::to_string(microbatch) + " (export it with that batch)");
}

double TrainRecipe::lrAt(int64_t step) const {
  double lr = learningRate();
  if (lrSchedule == "constant")
    return lr;
  double epoch = (double)step / stepsPerEpoch;
  if (epoch < warmupEpochs)
    return lr * epoch / warmupEpochs;
  double span = numEpochs - warmupEpochs;
  double progress = span > 0 ? (epoch - warmupEpochs) / span : 1.0;
  return minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

nlohmann::json TrainRecipe::toJson() const {
  return {{"TOTAL_BATCH_SIZE", totalBatchSize}, {"LR", baseLr}, {"MIN_LR", minLr}, {"WEIGHT_DECAY", weightDecay},
          {"NUM_EPOCHS", numEpochs}, {"WARMUP_EPOCHS", warmupEpochs}, {"STEPS_PER_EPOCH", stepsPerEpoch},
          {"lr_schedule", lrSchedule}, {"gradient_accumulation", accumulation}, {"clip_grad_norm", clipGradNorm},
          {"BETAS", {beta1, beta2}}, {"EPS", epsilon}, {"frozen", frozen}, {"no_weight_decay", noWeightDecay},
          {"decay_norms_and_biases", decayNormsAndBiases}, {"seed", seed},
          {"precision", precision},
          {"fp16", {{"initial_scale", initialScale}, {"growth_factor", growthFactor}, {"backoff_factor", backoffFactor},
                    {"growth_interval", growthInterval}, {"hysteresis", hysteresis}}}};
}

TrainRecipe TrainRecipe::fromJson(const nlohmann::json &j) {
  TrainRecipe r;
  r.apply(j, "plan");
  return r;
}

} // namespace cpc
