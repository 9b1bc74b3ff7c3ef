//===- Calibrate.cpp ------------------------------------------------------===//
#include "runtime/Calibrate.h"
#include "kernels/Kernel.h"
#include "runtime/Executor.h"
#include "runtime/Traffic.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <fstream>
#include <map>
#include <cmath>
#include <cstring>
#include <thread>
#include <unistd.h>

namespace cpc {

namespace {

using Clock = std::chrono::steady_clock;

/// The seconds the sample plans' timed runs may take together, past one warm-up run each.
constexpr double kSampleSeconds = 20;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Seconds per call of `fn`: one warm-up call, then calls until `target` seconds have passed.
double timePerCall(const std::function<void()> &fn, double target) {
  fn();
  int64_t calls = 0;
  auto start = Clock::now();
  do {
    fn();
    ++calls;
  } while (secondsSince(start) < target);
  return secondsSince(start) / calls;
}

/// seconds = latency + bytes / bandwidth from the points (ascending bytes): the latency is the
/// smallest call's time (a least-squares intercept over kilobytes to megabytes is noise, and
/// came out negative), the bandwidth the least-squares slope of the rest above it.
LinkCost fitLink(const std::vector<std::pair<double, double>> &points) {
  LinkCost link;
  link.latencySeconds = std::max(points.front().second, 1e-7);
  double sxx = 0, sxy = 0;
  for (size_t i = 1; i < points.size(); ++i) {
    auto [x, y] = points[i];
    sxx += x * x;
    sxy += x * (y - link.latencySeconds);
  }
  link.bytesPerSecond = sxy > 0 && sxx > 0 ? sxx / sxy : 1e12;
  return link;
}

/// Times each collective over the world at a few sizes (every rank runs the same calls; the
/// slowest rank's time counts) and fits its link.
void measureCollectives(Communicator &comm, const CalibrationOptions &o, CostProfile &profile) {
  int n = comm.size(), rank = comm.rank();
  if (n < 2)
    return;
  // The first, a few elements per rank, measures the latency (fitLink).
  std::vector<int64_t> sizes = o.quick ? std::vector<int64_t>{64, 16 << 10, 1 << 20}
                                       : std::vector<int64_t>{64, 4 << 10, 64 << 10, 1 << 20, 8 << 20};
  double target = o.quick ? 0.01 : 0.05;
  std::vector<int> world;
  for (int r = 0; r < n; ++r)
    world.push_back(r);
  const CommGroup &group = comm.group(world, "calibrate");
  const char *kinds[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast_from", "send"};
  for (const char *kind : kinds) {
    std::vector<std::pair<double, double>> points;
    for (int64_t bytes : sizes) {
      int64_t count = std::max<int64_t>(bytes / 4 / n, 1) * n; // f32 elements, a multiple of the group size
      std::vector<float> a(count, 1.0f), b(count, 0.0f);
      std::string k = kind;
      std::function<void()> call;
      int64_t counted = 0;
      if (k == "all_reduce") {
        call = [&] { comm.allReduce(a.data(), count, DType::F32, ReduceOp::Sum, group); };
        counted = traffic::allReduce(count * 4, n);
      } else if (k == "all_gather") {
        call = [&] { comm.allGather(a.data(), b.data(), count / n, DType::F32, group); };
        counted = traffic::blockExchange(count / n * 4, n);
      } else if (k == "reduce_scatter") {
        call = [&] { comm.reduceScatter(a.data(), b.data(), count / n, DType::F32, ReduceOp::Sum, group); };
        counted = traffic::blockExchange(count / n * 4, n);
      } else if (k == "all_to_all") {
        call = [&] { comm.allToAll(a.data(), b.data(), count / n, DType::F32, group); };
        counted = traffic::blockExchange(count / n * 4, n);
      } else if (k == "broadcast_from") {
        call = [&] { comm.broadcastFrom(a.data(), count, DType::F32, 0, group); };
        counted = count * 4; // what the root and every link of the chain pass on
      } else { // a message from rank 0 to rank 1 and back: half the round trip
        call = [&] {
          if (rank == 0) {
            comm.send(a.data(), count * 4, 1, 0);
            comm.recv(b.data(), count * 4, 1, 1);
          } else if (rank == 1) {
            comm.recv(b.data(), count * 4, 0, 0);
            comm.send(a.data(), count * 4, 0, 1);
          }
        };
        counted = count * 4;
      }
      // The same number of calls on every rank: rank 0 decides from its warm-up.
      call();
      auto start = Clock::now();
      call();
      double once = secondsSince(start);
      comm.broadcast(&once, sizeof once, 0);
      int64_t calls = std::max<int64_t>(2, (int64_t)(target / std::max(once, 1e-7)));
      double tiny = 0;
      comm.allReduce(&tiny, 1, DType::F64, ReduceOp::Sum, group); // start together
      start = Clock::now();
      for (int64_t c = 0; c < calls; ++c)
        call();
      double seconds = secondsSince(start) / calls;
      comm.allReduce(&seconds, 1, DType::F64, ReduceOp::Max, group);
      if (k == "send")
        seconds /= 2;
      points.push_back({(double)counted, seconds});
      if (o.log && rank == 0)
        *o.log << "  " << kind << " over " << n << " ranks, " << bytes << " B: " << seconds * 1e6 << " us\n";
    }
    profile.collectives[kind][std::string(kind) == "send" ? 2 : n] = fitLink(points);
  }
}

/// One kernel call of `op` on fresh f32 tensors of the given shapes.
struct KernelCall {
  kernels::KernelFn fn;
  kernels::KernelContext ctx;
  std::vector<std::vector<float>> storage;
  KernelCall(OpKind op, const std::vector<std::vector<int64_t>> &inputs,
             const std::vector<std::vector<int64_t>> &outputs, const nlohmann::json &attrs, int threads) {
    fn = kernels::KernelRegistry::cpu().find(op);
    if (!fn)
      throw RuntimeError(std::string("calibrate: no CPU kernel for ") + opName(op));
    ctx.op = op;
    ctx.threads = threads;
    ctx.setAttrs(attrs);
    storage.reserve(inputs.size() + outputs.size());
    auto tensor = [&](const std::vector<int64_t> &shape) {
      storage.emplace_back(std::max<int64_t>(numElements(shape), 1), 0.5f);
      return TensorRef{storage.back().data(), DType::F32, shape};
    };
    for (const auto &s : inputs)
      ctx.inputs.push_back(tensor(s));
    for (const auto &s : outputs)
      ctx.outputs.push_back(tensor(s));
  }
  void operator()() { fn(ctx); }
};

/// Seconds the executor spends per step beyond the kernel's work: a program of 1000 one-element
/// adds, run as cpc-run runs a plan.
double measureStepOverhead(const CalibrationOptions &o) {
  constexpr int kSteps = 1000;
  Plan plan;
  plan.mode = PlanMode::Infer;
  plan.buffers.push_back({"x", DType::F32, {1}, BufferKind::Input});
  plan.buffers.push_back({"y", DType::F32, {1}, BufferKind::Arena});
  plan.inputs.push_back({"x", 0, "main"});
  RankProgram p;
  p.arenaBytes = kPlanAlignment;
  for (int i = 0; i < kSteps; ++i)
    p.steps.push_back({OpKind::Add, {0, 0}, {1}, nlohmann::json::object(), "add"});
  plan.programs.push_back(p);
  ExecutorOptions options;
  options.threads = o.threads;
  Executor executor(plan, options);
  executor.bindInput("x", HostTensor{DType::F32, {1}, std::vector<uint8_t>(4, 0)});
  return timePerCall([&] { executor.run("main"); }, o.quick ? 0.01 : 0.05) / kSteps;
}

/// Times the kernels of each cost class on this rank.
void measureCompute(const CalibrationOptions &o, CostProfile &profile) {
  double target = o.quick ? 0.01 : 0.05;
  auto note = [&](const char *what, double work, double rate, const char *unit) {
    if (o.log)
      *o.log << "  " << what << ": " << work << " -> " << rate / 1e9 << " G" << unit << "/s\n";
  };
  Throughput gemm, attention, optimizer, memory;
  // GEMMs on a grid of shapes (skinny ones run slower than square ones of the same FLOPs); the
  // square ones also give the rate by FLOPs.
  GemmGrid grid;
  grid.sizes = o.quick ? std::vector<int64_t>{32, 256} : std::vector<int64_t>{16, 64, 256, 1024};
  for (int64_t m : grid.sizes)
    for (int64_t n : grid.sizes)
      for (int64_t k : grid.sizes) {
        KernelCall mm(OpKind::MatMul, {{m, k}, {k, n}}, {{m, n}}, nlohmann::json::object(), o.threads);
        double flops = 2.0 * m * n * k, rate = flops / timePerCall([&] { mm(); }, target / 2);
        grid.flopsPerSecond.push_back(rate);
        if (m == n && n == k) {
          gemm.points.push_back({flops, rate});
          note("gemm (square)", flops, rate, "FLOP");
        }
      }
  profile.gemmGrid = grid;
  for (int64_t tokens : o.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 256, 1024}) {
    int64_t heads = 4, d = 64, rows = heads * tokens;
    KernelCall at(OpKind::Attention, {{1, heads, tokens, d}, {1, heads, tokens, d}, {1, heads, tokens, d}},
                  {{1, heads, tokens, d}, {1, heads, tokens, tokens}}, {{"scale", 0.125}}, o.threads);
    // The compiler's count (dialects/cpc/Cost.cpp): two products and the softmax per score.
    double flops = 2.0 * rows * tokens * (2 * d) + 4.0 * rows * tokens;
    double rate = flops / timePerCall([&] { at(); }, target);
    attention.points.push_back({flops, rate});
    note("attention", flops, rate, "FLOP");
  }
  for (int64_t n : o.quick ? std::vector<int64_t>{1 << 16} : std::vector<int64_t>{1 << 14, 1 << 17, 1 << 20, 1 << 23}) {
    KernelCall adam(OpKind::AdamW, {{n}, {n}, {n}, {n}, {}, {}}, {{n}, {n}, {n}},
                    {{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}, {"weight_decay", 0.01}}, o.threads);
    *adam.ctx.inputs[5].as<float>() = 1; // the step count
    double bytes = 7.0 * n * 4 + 8, rate = bytes / timePerCall([&] { adam(); }, target);
    optimizer.points.push_back({bytes, rate});
    note("adamw", bytes, rate, "B");
  }
  for (int64_t n : o.quick ? std::vector<int64_t>{1 << 16, 1 << 20}
                           : std::vector<int64_t>{1 << 12, 1 << 15, 1 << 18, 1 << 21, 1 << 24}) {
    KernelCall add(OpKind::Add, {{n}, {n}}, {{n}}, nlohmann::json::object(), o.threads);
    double bytes = 3.0 * n * 4, rate = bytes / timePerCall([&] { add(); }, target);
    memory.points.push_back({bytes, rate});
    note("memory (add)", bytes, rate, "B");
  }
  profile.compute[CostClass::Gemm] = gemm;
  profile.compute[CostClass::Attention] = attention;
  profile.compute[CostClass::Optimizer] = optimizer;
  profile.compute[CostClass::Memory] = memory;
  profile.stepSeconds = measureStepOverhead(o);
  if (o.log)
    *o.log << "  per step: " << profile.stepSeconds * 1e6 << " us\n";
}

/// Each op's rate (work per second, by work: FLOPs for attention, bytes otherwise) from the
/// steps of one-rank plans run on synthetic data: the steps' times are summed per op and
/// power-of-two band of work, GEMMs left to the grid.
void measurePlanOps(const CalibrationOptions &o, CostProfile &profile,
                    const std::function<double(double)> &slowestRank) {
  struct Band {
    double key = 0, work = 0, seconds = 0; // key: what the rate is looked up by (work, or one product's FLOPs)
    int64_t steps = 0;
  };
  std::map<std::string, std::map<int, Band>> bands; // op -> power-of-two band of work -> totals
  for (const Plan *plan : o.plans) {
    if (plan->worldSize > 1)
      throw RuntimeError("calibrate: a sample plan must run on one rank (" + plan->source + " runs on " +
                         std::to_string(plan->worldSize) + ")");
    ExecutorOptions options;
    options.threads = o.threads;
    options.profile = true;
    Executor executor(*plan, options);
    // Learning rate 0 (the update does its work and leaves the weights as they are: values blown
    // up by a large step would run the math on infinities and denormals) and step 1.
    for (const NamedBuffer &in : plan->inputs)
      if (in.isRuntime()) {
        float value = in.runtime == RuntimeInputKind::LearningRate ? 0.0f : 1.0f;
        HostTensor t{DType::F32, {}, std::vector<uint8_t>(4)};
        std::memcpy(t.data.data(), &value, 4);
        executor.bindInput(in.name, t);
      }
    executor.bindSyntheticInputs();
    std::map<std::string, std::vector<double>> warmUp; // the first run's (pages faulted in, caches cold)
    auto start = Clock::now();
    for (const RankProgram &p : plan->programs) {
      executor.run(p.name);
      warmUp[p.name] = executor.stepSeconds(p.name);
    }
    // Up to 4 timed runs, as many as fit the plan's share of the time budget (a large model's
    // step takes seconds: calibrating stays under a minute). Every rank runs as many, so that
    // they contend for the memory bandwidth throughout, as a plan's ranks do.
    double perRun = slowestRank(secondsSince(start));
    const int kRuns = (int)std::clamp(std::floor(kSampleSeconds / o.plans.size() / perRun), 1.0, 4.0);
    for (int run = 0; run < kRuns; ++run)
      for (const RankProgram &p : plan->programs)
        executor.run(p.name);
    for (const RankProgram &p : plan->programs) {
      std::vector<double> seconds = executor.stepSeconds(p.name);
      for (size_t i = 0; i < seconds.size() && i < warmUp[p.name].size(); ++i)
        seconds[i] -= warmUp[p.name][i];
      for (size_t i = 0; i < p.steps.size() && i < seconds.size(); ++i) {
        const StepDesc &step = p.steps[i];
        // Single GEMMs are the grid's; batched ones (a loop of small products) are measured here.
        bool batched = step.gemm.size() == 4 && step.gemm[0] > 1;
        if (communicates(step.op) || (step.gemm.size() == 4 && !batched))
          continue;
        double bytes = (double)step.bytes; // the compiler's count (a slice reads its result's worth)
        if (!step.bytes)
          for (const std::vector<int> *list : {&step.inputs, &step.outputs})
            for (int b : *list)
              bytes += (double)plan->buffers[b].bytes();
        double work = step.cost == CostClass::Attention ? (double)step.flops : bytes;
        // A batched GEMM's rate depends on the size of its products: banded by one product's FLOPs.
        double key = batched ? 2.0 * step.gemm[1] * step.gemm[2] * step.gemm[3] : work;
        if (batched)
          work = (double)step.flops;
        if (work <= 0 || key <= 0)
          continue;
        Band &band = bands[opName(step.op) + std::string(batched ? kBatchedSuffix : "")][(int)std::floor(std::log2(key))];
        band.key += key;
        band.work += work;
        band.seconds += std::max(seconds[i] / kRuns - profile.stepSeconds, 1e-9);
        ++band.steps;
      }
    }
  }
  for (const auto &[op, byBand] : bands) {
    Throughput t;
    for (const auto &[index, band] : byBand) // ascending bands: ascending mean work
      t.points.push_back({band.key / band.steps, band.work / band.seconds});
    profile.ops[op] = t;
    if (o.log)
      *o.log << "  " << op << ": " << t.points.size() << " size band" << (t.points.size() == 1 ? "" : "s") << ", "
             << t.points.back().second / 1e9 << " G/s at the largest\n";
  }
}

/// Every rate the kernels' timings gave (GEMM grid, class throughputs, per-op bands, per-step
/// overhead), in an order that depends only on the options and plans, the same on every rank.
std::vector<double *> measuredRates(CostProfile &profile) {
  std::vector<double *> rates{&profile.stepSeconds};
  for (double &r : profile.gemmGrid.flopsPerSecond)
    rates.push_back(&r);
  for (auto &[cls, t] : profile.compute)
    for (auto &point : t.points)
      rates.push_back(&point.second);
  for (auto &[op, t] : profile.ops)
    for (auto &point : t.points)
      rates.push_back(&point.second);
  return rates;
}

} // namespace

CostProfile calibrate(Communicator &comm, const CalibrationOptions &options) {
  CostProfile profile = CostProfile::builtIn();
  profile.source = "cpc calibrate";
  profile.threads = options.threads;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  profile.machine = std::string(host) + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
                    std::to_string(comm.size()) + " rank" + (comm.size() > 1 ? "s" : "");
  measureCollectives(comm, options, profile);
  // Every rank times the kernels at once, as a plan's ranks run them: they share the memory
  // bandwidth and caches, which one rank timing alone on an idle machine does not see (it
  // predicted 2-rank steps ~20% fast). The rates are averaged over the ranks.
  CalibrationOptions own = options;
  if (comm.rank() != 0)
    own.log = nullptr;
  std::vector<int> world;
  for (int r = 0; r < comm.size(); ++r)
    world.push_back(r);
  const CommGroup &group = comm.group(world, "calibrate");
  double start = 0;
  comm.allReduce(&start, 1, DType::F64, ReduceOp::Sum, group); // start together
  measureCompute(own, profile);
  measurePlanOps(own, profile, [&](double seconds) {
    comm.allReduce(&seconds, 1, DType::F64, ReduceOp::Max, group);
    return seconds;
  });
  std::vector<double *> rates = measuredRates(profile);
  std::vector<double> values;
  for (double *r : rates)
    values.push_back(*r);
  int64_t counts[2] = {(int64_t)values.size(), -(int64_t)values.size()};
  comm.allReduce(counts, 2, DType::I64, ReduceOp::Max, group); // the same rates on every rank, else no mean
  if (counts[0] != -counts[1])
    throw RuntimeError("calibrate: the ranks measured different sets of rates (" + std::to_string(counts[0]) +
                       " and " + std::to_string(-counts[1]) + ")");
  comm.allReduce(values.data(), counts[0], DType::F64, ReduceOp::Sum, group);
  for (size_t i = 0; i < rates.size(); ++i)
    *rates[i] = values[i] / comm.size();
  comm.resetCounts(); // calibration's traffic is not a plan's
  return profile;
}

void calibrateIntoFile(Communicator &comm, CalibrationOptions options, const std::vector<std::string> &planPaths,
                       const std::string &path) {
  std::vector<Plan> plans;
  for (const std::string &planPath : planPaths) // every rank runs them
    plans.push_back(readPlan(planPath));
  for (const Plan &plan : plans)
    options.plans.push_back(&plan);
  auto start = std::chrono::steady_clock::now();
  CostProfile profile = calibrate(comm, options);
  if (comm.rank() != 0)
    return;
  std::ofstream out(path);
  out << profile.toJson().dump(2) << "\n";
  out.close();
  if (!out)
    throw RuntimeError(path + ": cannot write the cost profile");
  if (options.log)
    *options.log << "wrote " << path << " (" << profile.machine << "; "
                 << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s)\n";
}

} // namespace cpc
