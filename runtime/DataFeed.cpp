//===- DataFeed.cpp -------------------------------------------------------===//
#include "runtime/DataFeed.h"
#include "runtime/TensorIO.h"
#include "runtime/data/Loader.h"
#include "runtime/data/Random.h"

#include <cstring>
#include <sys/stat.h>

namespace cpc {

namespace {

/// The names of the plan's batch inputs the trainer binds (user data, not runtime scalars or
/// pipeline hand-overs), each once, in plan order.
std::vector<std::string> batchInputs(const Plan &plan, const Trainer &trainer) {
  std::vector<std::string> names;
  for (const NamedBuffer &in : plan.inputs) {
    if (in.isRuntime() || in.isTransfer() || std::find(names.begin(), names.end(), in.name) != names.end())
      continue;
    try {
      trainer.batchInputBuffer(in.name);
      names.push_back(in.name);
    } catch (const RuntimeError &) { // an input of another phase's program
    }
  }
  return names;
}

/// Whether a program `rank` runs reads input `name` (a pipeline's stages read different ones).
bool rankReads(const Plan &plan, int rank, const std::string &name) {
  for (const NamedBuffer &in : plan.inputs)
    if (in.name == name)
      for (const RankProgram &p : plan.programs)
        if (p.name == in.program && plan.runsOn(p, rank))
          return true;
  return false;
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// Rows `rows` of `all` (dim 0), copied into one tensor per range.
std::vector<HostTensor> splitRows(const uint8_t *all, size_t rowBytes, const std::vector<std::pair<int64_t, int64_t>> &rows,
                                  const BufferDesc &local) {
  std::vector<HostTensor> slices;
  size_t offset = 0;
  for (const auto &[begin, end] : rows) {
    HostTensor t{local.dtype, local.shape, std::vector<uint8_t>(size_t(end - begin) * rowBytes)};
    std::memcpy(t.data.data(), all + offset, t.data.size());
    offset += t.data.size();
    slices.push_back(std::move(t));
  }
  return slices;
}

} // namespace

DataFeed::DataFeed(const Plan &plan, Trainer &trainer, int rank, const DataOptions &options,
                   const std::set<std::string> &bound)
    : plan_(plan), trainer_(trainer), options_(options) {
  globalBatch_ = trainer.recipe().totalBatchSize;
  std::vector<std::string> inputs = batchInputs(plan, trainer);
  std::string names;
  for (const std::string &n : inputs)
    names += (names.empty() ? "'" : ", '") + n + "'";
  auto matching = [&](auto &&accepts) {
    for (const std::string &n : inputs)
      if (!bound.count(n) && accepts(trainer.batchInputBuffer(n)))
        return n;
    return std::string();
  };
  std::unique_ptr<data::ImageFolder> folder;
  if (isDirectory(options.path)) {
    folder = std::make_unique<data::ImageFolder>(options.path);
    input_ = matching([](const BufferDesc &b) {
      return b.dtype == DType::F32 && b.shape.size() == 4 && b.shape[1] == 3 && b.shape[2] == b.shape[3];
    });
    if (input_.empty())
      throw RuntimeError(options.path + ": the plan has no image input [B, 3, S, S] to read an image folder into (its "
                                        "inputs: " + names + ")");
    imageSize_ = trainer.batchInputBuffer(input_).shape[2];
    size_ = (int64_t)folder->size();
    classes_ = (int64_t)folder->classes().size();
  } else if (options.path.size() > 4 && options.path.compare(options.path.size() - 4, 4, ".npy") == 0) {
    samples_ = readTensorFile(options.path);
    if (!openTokens(names, inputs, bound)) { // not a token stream: N samples of an input's shape
      std::vector<int64_t> sample(samples_.shape.begin() + (samples_.shape.empty() ? 0 : 1), samples_.shape.end());
      input_ = matching([&](const BufferDesc &b) {
        return b.dtype == samples_.dtype && !b.shape.empty() &&
               std::vector<int64_t>(b.shape.begin() + 1, b.shape.end()) == sample;
      });
      if (samples_.shape.empty() || input_.empty())
        throw RuntimeError(options.path + ": no input of the plan takes samples of " + dtypeName(samples_.dtype) +
                           shapeString(sample) + " (its inputs: " + names + ")");
      size_ = samples_.shape[0];
    }
  } else {
    throw RuntimeError(options.path + ": --data expects an image folder (DIR/CLASS/IMAGE.jpg|.png) or a .npy file");
  }
  if (size_ < globalBatch_)
    throw RuntimeError(options.path + ": " + std::to_string(size_) + " samples, fewer than one global batch of " +
                       std::to_string(globalBatch_));
  if (!folder) // the epoch's order, drawn once per epoch (the image loader keeps its own)
    sampler_ = std::make_unique<data::GlobalSampler>(size_, globalBatch_, options.seed);
  rows_ = trainer.batchRows(input_);
  reads_ = rankReads(plan, rank, input_);
  readsTargets_ = !targets_.empty() && rankReads(plan, rank, targets_);
  if (folder && reads_) {
    data::LoaderOptions loader;
    loader.globalBatch = globalBatch_;
    loader.seed = options.seed;
    loader.threads = options.threads;
    loader.reducedDecode = options.reducedDecode;
    loader.prefetchSteps = options.prefetchSteps;
    loader.augment.size = (int)imageSize_;
    images_ = std::make_unique<data::ImageLoader>(*folder, loader);
  }
  for (const std::string &n : inputs)
    if (n != input_ && n != targets_ && !bound.count(n) && trainer.batchInputBuffer(n).dtype == DType::F32 &&
        rankReads(plan, rank, n))
      noise_.push_back(n);
}

DataFeed::~DataFeed() = default;

void DataFeed::bind(int64_t step) {
  lastWait_ = 0;
  const BufferDesc &local = trainer_.batchInputBuffer(input_);
  size_t rowBytes = local.bytes() / std::max<int64_t>(local.shape[0], 1);
  if (reads_ && images_) {
    if (next_ != step)
      images_->startAt(step, rows_);
    data::Batch batch = images_->next();
    lastWait_ = batch.waitSeconds;
    trainer_.setMicrobatchSlices(input_, splitRows(reinterpret_cast<const uint8_t *>(batch.images.data()), rowBytes,
                                                   rows_, local));
  } else if (sequence_ > 0) {
    bindTokens(step);
  } else if (reads_) {
    std::vector<uint8_t> rows;
    for (const auto &[begin, end] : rows_)
      for (int64_t index : sampler_->rows(step, begin, end))
        rows.insert(rows.end(), samples_.data.begin() + index * rowBytes, samples_.data.begin() + (index + 1) * rowBytes);
    trainer_.setMicrobatchSlices(input_, splitRows(rows.data(), rowBytes, rows_, local));
  }
  bindNoise(step);
  next_ = step + 1;
}

bool DataFeed::openTokens(const std::string &names, const std::vector<std::string> &inputs,
                          const std::set<std::string> &bound) {
  if (samples_.shape.size() != 1 || (samples_.dtype != DType::I64 && samples_.dtype != DType::I32))
    return false;
  std::vector<std::string> tokenInputs; // [B, T] of the stream's type, in plan order
  for (const std::string &n : inputs) {
    const BufferDesc &b = trainer_.batchInputBuffer(n);
    if (!bound.count(n) && b.dtype == samples_.dtype && b.shape.size() == 2)
      tokenInputs.push_back(n);
  }
  if (tokenInputs.empty())
    throw RuntimeError(options_.path + ": a token stream, but no input of the plan takes " + dtypeName(samples_.dtype) +
                       " tokens [B, T] (its inputs: " + names + ")");
  input_ = tokenInputs[0];
  const BufferDesc &tokens = trainer_.batchInputBuffer(input_);
  if (tokenInputs.size() > 1 && trainer_.batchInputBuffer(tokenInputs[1]).shape == tokens.shape)
    targets_ = tokenInputs[1];
  sequence_ = tokens.shape[1];
  size_ = (samples_.shape[0] - 1) / sequence_; // sample i: tokens [i*T, i*T + T], the last for the targets
  return true;
}

void DataFeed::bindTokens(int64_t step) {
  size_t element = dtypeSize(samples_.dtype), rowBytes = sequence_ * element;
  std::vector<uint8_t> tokens, targets;
  for (const auto &[begin, end] : rows_)
    for (int64_t index : sampler_->rows(step, begin, end)) {
      const uint8_t *start = samples_.data.data() + index * rowBytes;
      tokens.insert(tokens.end(), start, start + rowBytes);
      targets.insert(targets.end(), start + element, start + element + rowBytes);
    }
  if (reads_)
    trainer_.setMicrobatchSlices(input_, splitRows(tokens.data(), rowBytes, rows_, trainer_.batchInputBuffer(input_)));
  if (readsTargets_) // a pipeline's last stage, where the loss is
    trainer_.setMicrobatchSlices(targets_,
                                 splitRows(targets.data(), rowBytes, rows_, trainer_.batchInputBuffer(targets_)));
}

void DataFeed::bindNoise(int64_t step) {
  for (size_t k = 0; k < noise_.size(); ++k) {
    const BufferDesc &local = trainer_.batchInputBuffer(noise_[k]);
    int64_t perRow = local.shape.empty() || local.shape[0] == 0 ? 0 : numElements(local.shape) / local.shape[0];
    std::vector<HostTensor> slices;
    for (const auto &[begin, end] : trainer_.batchRows(noise_[k])) {
      HostTensor t{DType::F32, local.shape, std::vector<uint8_t>(local.bytes())};
      float *out = reinterpret_cast<float *>(t.data.data());
      for (int64_t row = begin; row < end; ++row) { // keyed by the row of the global batch: any layout
        data::CounterRng rng(data::mix64(options_.seed + k), step, row, data::RngStream::Noise);
        for (int64_t i = 0; i < perRow; ++i)
          *out++ = (float)rng.uniform();
      }
      slices.push_back(std::move(t));
    }
    trainer_.setMicrobatchSlices(noise_[k], std::move(slices));
  }
}

nlohmann::json DataFeed::position(int64_t step) const {
  return {{"path", options_.path},       {"samples", size_},
          {"epoch", epochOf(step)},      {"steps_per_epoch", stepsPerEpoch()},
          {"seed", (int64_t)options_.seed}};
}

std::string DataFeed::differsFrom(const nlohmann::json &saved) const {
  if (saved.value("samples", (int64_t)-1) == size_ && saved.value("seed", (int64_t)-1) == (int64_t)options_.seed)
    return "";
  return "the checkpoint's run read " + saved.dump() + ", this one reads " + options_.path + " (" +
         std::to_string(size_) + " samples, seed " + std::to_string(options_.seed) +
         "): its batches differ from an uninterrupted run's";
}

std::vector<std::string> DataFeed::boundInputs() const {
  std::vector<std::string> names = noise_;
  names.push_back(input_);
  if (!targets_.empty())
    names.push_back(targets_);
  return names;
}

double DataFeed::imagesPerThreadSecond() const {
  if (!images_)
    return 0;
  data::LoaderStats stats = images_->stats();
  return stats.busySeconds > 0 ? stats.imagesDecoded / stats.busySeconds : 0;
}

void DataFeed::prime(int64_t step) {
  bind(step);
  if (reads_ && images_)
    images_->waitForPrefetch();
}

std::string DataFeed::describe() const {
  std::string what = samples_.data.empty()
                         ? std::to_string(size_) + " images in " + std::to_string(classes_) + " classes -> '" + input_ +
                               "' (" + std::to_string(imageSize_) + "x" + std::to_string(imageSize_) +
                               ", MAE augmentation, " + std::to_string(options_.threads) + " decoding threads per rank" +
                               (options_.reducedDecode ? ", JPEGs decoded reduced where the crop allows)" : ")")
                         : std::to_string(size_) + " samples -> '" + input_ + "'" +
                               (targets_.empty() ? "" : " and, shifted by one token, '" + targets_ + "'");
  std::string noise;
  for (const std::string &n : noise_)
    noise += (noise.empty() ? ", U[0,1) per step for '" : "', '") + n;
  return "data: " + options_.path + ": " + what + noise + (noise.empty() ? "" : "'") + "; " +
         std::to_string(stepsPerEpoch()) + " steps per epoch of " + std::to_string(globalBatch_) + " (seed " +
         std::to_string(options_.seed) + ")";
}

} // namespace cpc
