//===- plan_reader.cpp - fuzz the plan reader -----------------------------===//
//
// Bytes -> PLAN.bin -> readPlan (in memory, and with the tensors left in the file as cpc-run reads
// it) -> what `cpc inspect` and `cpc-run` derive from a plan that loaded: its metadata, bytes per
// buffer kind, model-state bytes per rank, the training recipe, every parameter's initial value
// read from the blob, the no-hang schedule check, and the executor (arena, parameter and state
// memory, kernel resolution) for single-rank plans of modest size.
//
// A plan carries a checksum over everything after its 64-byte header, which random mutations
// never keep; so unless the input's first byte after the magic asks for the raw bytes, the
// harness rewrites the header's file size, blob size and checksum to match the body, and the
// mutations reach the CBOR metadata and the validation behind it. Set CPC_FUZZ_PLAN_RUN=1 to
// also run each program once on synthetic inputs (kernels then execute fuzzed plans).
//
#include "runtime/Communicator.h"
#include "runtime/Executor.h"
#include "runtime/ModelState.h"
#include "runtime/Plan.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/TrainRecipe.h"
#include "tests/fuzz/FuzzUtil.h"

#include <algorithm>
#include <vector>

namespace {

constexpr size_t kHeaderSize = 64;
// Offsets of the header fields (runtime/Plan.cpp, struct Header).
constexpr size_t kBlobOffsetAt = 24, kBlobSizeAt = 32, kChecksumAt = 40, kFileSizeAt = 48;

uint64_t load64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void store64(uint8_t *p, uint64_t v) { std::memcpy(p, &v, 8); }

void exercise(const cpc::Plan &plan) {
  (void)plan.metadata().dump();
  for (auto kind : {cpc::BufferKind::Arena, cpc::BufferKind::Parameter, cpc::BufferKind::State,
                    cpc::BufferKind::Constant, cpc::BufferKind::Input})
    (void)plan.bytesOfKind(kind);
  if (plan.mode == cpc::PlanMode::Train) {
    for (int rank = 0; rank < std::min(plan.worldSize, 8); ++rank)
      (void)cpc::modelStateBytes(plan, rank).toJson();
    // What the Trainer reads back (runtime/Trainer.cpp).
    if (plan.training.is_object() && plan.training.contains("recipe")) {
      try {
        cpc::TrainRecipe recipe = cpc::TrainRecipe::fromJson(plan.training.at("recipe"));
        for (int64_t step : {int64_t(0), int64_t(1), int64_t(1000)})
          (void)recipe.lrAt(step);
      } catch (const std::runtime_error &) {
      }
    }
  }
  // The no-hang check cpc inspect --schedule runs (a fuzzed plan may fail it, never crash it).
  if (plan.worldSize <= 64) {
    try {
      (void)cpc::checkPlanSchedule(plan);
    } catch (const cpc::RuntimeError &) {
    }
  }
  if (plan.worldSize != 1)
    return;
  int64_t total = 0;
  for (const auto &p : plan.programs)
    total += p.arenaBytes;
  for (auto kind : {cpc::BufferKind::Parameter, cpc::BufferKind::State, cpc::BufferKind::Constant,
                    cpc::BufferKind::Input})
    total += plan.bytesOfKind(kind);
  if (total < 0 || total > (int64_t(256) << 20))
    return;
  auto comm = cpc::makeSingleRankCommunicator();
  cpc::Executor executor(plan, cpc::ExecutorOptions{0, 1, false, comm.get()});
  static const bool run = std::getenv("CPC_FUZZ_PLAN_RUN") != nullptr;
  if (run) {
    executor.bindSyntheticInputs();
    for (const auto &p : plan.programs)
      if (p.rank == 0)
        executor.run(p.name);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = cpc::fuzz::tempPath("plan.bin");
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= kHeaderSize && !(size > 8 && data[8] == 0xff)) {
    uint64_t blobOffset = load64(&bytes[kBlobOffsetAt]);
    if (blobOffset <= size)
      store64(&bytes[kBlobSizeAt], size - blobOffset);
    store64(&bytes[kFileSizeAt], size);
    store64(&bytes[kChecksumAt], cpc::planChecksum(bytes.data() + kHeaderSize, size - kHeaderSize));
  }
  cpc::fuzz::writeFile(path, bytes.data(), bytes.size());
  for (auto mode : {cpc::PlanBlob::InMemory, cpc::PlanBlob::InFile}) {
    try {
      cpc::Plan plan = cpc::readPlan(path, mode);
      std::vector<uint8_t> value;
      for (const auto &b : plan.buffers)
        if ((b.kind == cpc::BufferKind::Parameter || b.kind == cpc::BufferKind::Constant) && b.aliasOf < 0 &&
            b.offset >= 0) {
          size_t n = cpc::numElements(b.sharded() ? b.globalShape : b.shape) * cpc::dtypeSize(b.dtype);
          if (n > (size_t(64) << 20))
            continue;
          value.resize(n);
          plan.readBlob(b.offset, n, value.data());
        }
      if (mode == cpc::PlanBlob::InMemory)
        exercise(plan);
    } catch (const std::runtime_error &) {
    }
  }
  return 0;
}
