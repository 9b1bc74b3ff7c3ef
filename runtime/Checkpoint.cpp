//===- Checkpoint.cpp -----------------------------------------------------===//
#include "runtime/Checkpoint.h"
#include "runtime/ModelState.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cpc {

namespace {

constexpr const char *kFormat = "cpc-checkpoint";
constexpr int kVersion = 1;
constexpr const char *kMetadata = "metadata.json";

std::string stepDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", (long long)step);
  return name;
}

std::string rankFileName(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
  return name;
}

std::string hex64(uint64_t v) {
  char s[20];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
  return s;
}

[[noreturn]] void fail(const std::string &path, const std::string &what) { throw RuntimeError(path + ": " + what); }

/// Writes all of `data` to `fd`, or fails naming `path`.
void writeAll(int fd, const void *data, size_t bytes, const std::string &path) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail(path, std::string("cannot write: ") + std::strerror(errno));
    p += n;
    bytes -= n;
  }
}

/// Flushes a file or directory to the disk (a rename is durable once its directory is).
void syncPath(const std::string &path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0)
      ::close(fd);
    fail(path, std::string("cannot sync to disk: ") + std::strerror(err));
  }
  ::close(fd);
}

void writeFileSynced(const std::string &path, const std::string &text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    fail(path, std::string("cannot create: ") + std::strerror(errno));
  writeAll(fd, text.data(), text.size(), path);
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    fail(path, std::string("cannot write: ") + std::strerror(errno));
}

/// The plan's variables: the parameters and states some rank's programs use, in plan order.
std::vector<int> planVariables(const Plan &plan, const std::vector<std::vector<bool>> &held) {
  std::vector<int> vars;
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDesc &b = plan.buffers[i];
    if ((b.kind != BufferKind::Parameter && b.kind != BufferKind::State) || b.aliasOf >= 0)
      continue;
    if (std::any_of(held.begin(), held.end(), [&](const std::vector<bool> &h) { return h[i]; }))
      vars.push_back((int)i);
  }
  return vars;
}

/// Rank 0 decides; every rank learns the outcome ("" when it went well) and throws the same line.
void agree(Communicator &comm, std::string message) {
  char buf[512] = {0};
  if (comm.rank() == 0)
    std::strncpy(buf, message.c_str(), sizeof buf - 1);
  if (comm.size() > 1)
    comm.broadcast(buf, sizeof buf, 0);
  if (buf[0])
    throw RuntimeError(buf);
}

/// Rank 0 collects every rank's JSON (its own included), in rank order.
std::vector<nlohmann::json> gatherJson(Communicator &comm, const nlohmann::json &mine) {
  std::string text = mine.dump();
  if (comm.rank() != 0) {
    int64_t size = (int64_t)text.size();
    comm.send(&size, sizeof size, 0, 0);
    comm.send(text.data(), size, 0, 1);
    return {};
  }
  std::vector<nlohmann::json> all = {mine};
  for (int r = 1; r < comm.size(); ++r) {
    int64_t size = 0;
    comm.recv(&size, sizeof size, r, 0);
    std::string theirs(size, '\0');
    comm.recv(theirs.data(), size, r, 1);
    all.push_back(nlohmann::json::parse(theirs));
  }
  return all;
}

/// Complete checkpoints under `root` by step.
std::map<int64_t, std::string> completeCheckpoints(const std::string &root) {
  std::map<int64_t, std::string> found;
  std::error_code ec;
  static const std::regex name(R"(step-(\d{1,18}))");
  for (const auto &entry : fs::directory_iterator(root, ec)) {
    std::smatch m;
    std::string base = entry.path().filename().string();
    if (std::regex_match(base, m, name) && fs::exists(entry.path() / kMetadata, ec))
      found[std::stoll(m[1])] = entry.path().string();
  }
  return found;
}

/// Rank 0, after the new checkpoint is in place: the oldest beyond `keep`, and what crashed
/// saves left, go.
void prune(const std::string &root, const std::string &current, int keep) {
  std::error_code ec;
  std::map<int64_t, std::string> done = completeCheckpoints(root);
  int excess = (int)done.size() - std::max(keep, 1);
  for (const auto &[step, dir] : done)
    if (excess-- > 0 && dir != current)
      fs::remove_all(dir, ec);
  for (const auto &entry : fs::directory_iterator(root, ec))
    if (entry.path().filename().string().rfind(".incomplete-step-", 0) == 0)
      fs::remove_all(entry.path(), ec);
}

nlohmann::json layoutOf(const Plan &plan) {
  ModelStateBytes states = modelStateBytes(plan);
  return {{"world_size", plan.worldSize},
          {"mesh_axes", plan.meshAxes},
          {"mesh_shape", plan.meshShape},
          {"zero", states.zeroStage},
          {"precision", states.precision},
          {"source", plan.source}};
}

/// Rank 0, once every rank's shards are on disk: the metadata (listing them), then the rename
/// that makes the checkpoint complete, then the older ones go.
void commit(const Plan &plan, const std::vector<nlohmann::json> &ranks, const TrainingPosition &position,
            const std::string &tmpDir, const std::string &finalDir, const std::string &root, int keep) {
  nlohmann::json meta = {{"format", kFormat},
                         {"version", kVersion},
                         {"step", position.step},
                         {"optimizer_steps", position.optimizerSteps},
                         {"skipped_steps", position.skippedSteps},
                         {"data", position.data},
                         {"layout", layoutOf(plan)},
                         {"files", nlohmann::json::object()},
                         {"variables", nlohmann::json::array()}};
  for (const nlohmann::json &rank : ranks) {
    if (!rank["entries"].empty())
      meta["files"][rank["file"].get<std::string>()] = rank["bytes"];
    for (const nlohmann::json &e : rank["entries"])
      meta["variables"].push_back(e);
  }
  writeFileSynced((fs::path(tmpDir) / kMetadata).string(), meta.dump(1));
  syncPath(tmpDir, true);
  std::error_code ec;
  if (fs::exists(finalDir, ec)) // the same step saved again (a resumed run): replace it
    fs::remove_all(finalDir, ec);
  if (std::rename(tmpDir.c_str(), finalDir.c_str()) != 0)
    fail(finalDir, std::string("cannot move the checkpoint into place: ") + std::strerror(errno));
  syncPath(root, true);
  prune(root, finalDir, keep);
}

} // namespace

std::string saveCheckpoint(const Plan &plan, Executor &executor, Communicator &comm, const std::string &root,
                           const TrainingPosition &position, int keep) {
  const std::string finalDir = (fs::path(root) / stepDirName(position.step)).string();
  const std::string tmpDir = (fs::path(root) / ("." + std::string("incomplete-") + stepDirName(position.step))).string();
  std::string problem;
  if (comm.rank() == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    fs::remove_all(tmpDir, ec);
    if (!fs::create_directory(tmpDir, ec))
      problem = tmpDir + ": cannot create the checkpoint directory: " + (ec ? ec.message() : "exists");
  }
  agree(comm, problem);

  std::vector<std::vector<bool>> held;
  for (int r = 0; r < plan.worldSize; ++r)
    held.push_back(Executor::buffersOfRank(plan, r));
  const std::string fileName = rankFileName(comm.rank());
  const std::string filePath = (fs::path(tmpDir) / fileName).string();
  int fd = -1;
  int64_t offset = 0;
  nlohmann::json entries = nlohmann::json::array();
  std::vector<int> vars = planVariables(plan, held);
  for (size_t v = 0; v < vars.size(); ++v) {
    const BufferDesc &b = plan.buffers[vars[v]];
    std::vector<int> holders;
    for (int r = 0; r < plan.worldSize; ++r)
      if (held[r][vars[v]])
        holders.push_back(r);
    if (!held[comm.rank()][vars[v]])
      continue;
    HostTensor whole = executor.wholeVariable(b.name); // every holder: the shard group gathers together
    if (holders[v % holders.size()] != comm.rank())
      continue;
    if (fd < 0 && (fd = ::open(filePath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
      fail(filePath, std::string("cannot create: ") + std::strerror(errno));
    writeAll(fd, whole.data.data(), whole.data.size(), filePath);
    entries.push_back({{"name", b.name},
                       {"parameter", b.kind == BufferKind::Parameter},
                       {"trainable", b.trainable},
                       {"role", roleName(b.role)},
                       {"dtype", dtypeName(whole.dtype)},
                       {"shape", whole.shape},
                       {"file", fileName},
                       {"offset", offset},
                       {"bytes", (int64_t)whole.data.size()},
                       {"checksum", hex64(planChecksum(whole.data.data(), whole.data.size()))}});
    offset += (int64_t)whole.data.size();
  }
  if (fd >= 0 && (::fsync(fd) != 0 || ::close(fd) != 0))
    fail(filePath, std::string("cannot write: ") + std::strerror(errno));
  std::vector<nlohmann::json> all = gatherJson(comm, {{"file", fileName}, {"bytes", offset}, {"entries", entries}});

  problem.clear();
  if (comm.rank() == 0) {
    try {
      commit(plan, all, position, tmpDir, finalDir, root, keep);
    } catch (const std::exception &e) {
      problem = e.what();
    }
  }
  agree(comm, problem);
  return finalDir;
}

std::string findCheckpoint(const std::string &path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kMetadata, ec))
    return path;
  if (!fs::is_directory(path, ec))
    fail(path, "no such checkpoint directory");
  std::map<int64_t, std::string> done = completeCheckpoints(path);
  if (done.empty())
    fail(path, "no checkpoint here (no metadata.json, and no complete step-* directory)");
  return done.rbegin()->second;
}

nlohmann::json readCheckpointMetadata(const std::string &dir) {
  const std::string path = (fs::path(dir) / kMetadata).string();
  std::ifstream in(path);
  if (!in)
    fail(path, "cannot read the checkpoint's metadata");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const std::exception &e) {
    fail(path, "not a checkpoint's metadata (invalid JSON; the save may have been cut short)");
  }
  if (!meta.is_object() || meta.value("format", "") != kFormat)
    fail(path, std::string("not a cpc checkpoint's metadata (no \"format\": \"") + kFormat + "\")");
  if (meta.value("version", 0) != kVersion)
    fail(path, "checkpoint format version " + meta.value("version", nlohmann::json()).dump() + ", this cpc reads " +
                   std::to_string(kVersion));
  static const std::regex fileName(R"(rank-\d{5}\.bin)");
  try {
    for (const char *key : {"step", "optimizer_steps", "skipped_steps"})
      if (meta.at(key).get<int64_t>() < 0)
        fail(path, std::string("\"") + key + "\" is negative");
    for (const auto &[file, bytes] : meta.at("files").items()) {
      if (!std::regex_match(file, fileName))
        fail(path, "bad file name '" + file + "'");
      std::error_code ec;
      auto size = fs::file_size(fs::path(dir) / file, ec);
      if (ec || (int64_t)size != bytes.get<int64_t>())
        fail((fs::path(dir) / file).string(), ec ? "missing (an incomplete checkpoint)"
                                                 : "holds " + std::to_string(size) + " bytes, the metadata says " +
                                                       bytes.dump() + " (an incomplete or corrupt checkpoint)");
    }
    for (const nlohmann::json &v : meta.at("variables")) {
      std::string file = v.at("file");
      int64_t offset = v.at("offset"), bytes = v.at("bytes");
      if (!meta["files"].contains(file) || offset < 0 || bytes < 0 ||
          offset + bytes > meta["files"][file].get<int64_t>())
        fail(path, "variable '" + v.at("name").get<std::string>() + "' lies outside its file");
      auto dtype = parseDType(v.at("dtype"));
      if (!dtype || (int64_t)numElements(v.at("shape").get<std::vector<int64_t>>()) * (int64_t)dtypeSize(*dtype) != bytes)
        fail(path, "variable '" + v.at("name").get<std::string>() + "': type, shape and size disagree");
    }
  } catch (const nlohmann::json::exception &e) {
    fail(path, std::string("malformed checkpoint metadata: ") + e.what());
  }
  return meta;
}

namespace {

/// Reads the variable of metadata entry `v` of checkpoint `dir`, verifying its checksum.
CheckpointVariable readEntry(const std::string &dir, const nlohmann::json &v) {
  const std::string name = v["name"];
  CheckpointVariable var;
  var.name = name;
  var.parameter = v.value("parameter", false);
  var.trainable = v.value("trainable", false);
  var.role = v.value("role", "");
  var.value.dtype = *parseDType(v["dtype"]);
  var.value.shape = v["shape"].get<std::vector<int64_t>>();
  var.value.data.resize(v["bytes"].get<int64_t>());
  const std::string path = (fs::path(dir) / v["file"].get<std::string>()).string();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  size_t done = 0;
  int64_t offset = v["offset"];
  while (done < var.value.data.size()) {
    ssize_t n = ::pread(fd, var.value.data.data() + done, var.value.data.size() - done, offset + done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      fail(path, "cannot read variable '" + name + "' (the file is shorter than its metadata says)");
    }
    done += n;
  }
  ::close(fd);
  if (hex64(planChecksum(var.value.data.data(), var.value.data.size())) != v.value("checksum", ""))
    fail(path, "variable '" + name + "' fails its checksum (a corrupt checkpoint)");
  return var;
}

} // namespace

TrainingPosition loadCheckpoint(const Plan &plan, Executor &executor, int rank, const std::string &path,
                                std::string *notes) {
  const std::string dir = findCheckpoint(path);
  nlohmann::json meta = readCheckpointMetadata(dir);
  std::map<std::string, const nlohmann::json *> saved; // the metadata's entry of each variable
  for (const nlohmann::json &v : meta["variables"])
    saved[v["name"].get<std::string>()] = &v;
  std::set<std::string> used;
  std::vector<bool> held = Executor::buffersOfRank(plan, rank);
  std::vector<const nlohmann::json *> wanted;
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDesc &b = plan.buffers[i];
    if ((b.kind != BufferKind::Parameter && b.kind != BufferKind::State) || b.aliasOf >= 0)
      continue;
    used.insert(b.name);
    if (!held[i])
      continue;
    auto it = saved.find(b.name);
    if (it == saved.end()) {
      if (b.role == VariableRole::GradAccumulator)
        continue; // summed afresh every step
      fail(dir, "the checkpoint has no " + std::string(b.kind == BufferKind::Parameter ? "parameter" : "state") + " '" +
                    b.name + "', which this plan needs (saved from " + meta["layout"].dump() + ")");
    }
    const nlohmann::json &v = *it->second;
    std::vector<int64_t> shape = b.sharded() ? b.globalShape : b.shape;
    if (parseDType(v["dtype"]) != b.dtype || v["shape"] != shape)
      fail(dir, "'" + b.name + "' is " + v["dtype"].get<std::string>() + " " +
                    shapeString(v["shape"].get<std::vector<int64_t>>()) + " in the checkpoint, " + dtypeName(b.dtype) +
                    " " + shapeString(shape) + " in this plan");
    wanted.push_back(&v);
  }
  // Twice: every value is checked before the first is set (never half loaded), holding one
  // variable at a time rather than the rank's whole share (the second read comes from the page
  // cache).
  for (const nlohmann::json *v : wanted)
    readEntry(dir, *v);
  for (const nlohmann::json *v : wanted)
    executor.setVariable((*v)["name"], readEntry(dir, *v).value);
  if (notes) {
    std::string unused;
    for (const auto &[name, entry] : saved)
      if (!used.count(name))
        unused += (unused.empty() ? "'" : ", '") + name + "'";
    if (!unused.empty())
      *notes = "the checkpoint's " + unused + " are not used by this plan";
  }
  TrainingPosition position;
  position.step = meta["step"];
  position.optimizerSteps = meta["optimizer_steps"];
  position.skippedSteps = meta["skipped_steps"];
  position.data = meta.value("data", nlohmann::json::object());
  return position;
}

int exportCheckpointWeights(const std::string &path, const std::string &output, bool trainableOnly) {
  const std::string dir = findCheckpoint(path);
  nlohmann::json meta = readCheckpointMetadata(dir);
  std::vector<std::pair<std::string, HostTensor>> tensors;
  for (const nlohmann::json &v : meta["variables"]) {
    if (!v.value("parameter", false) || (trainableOnly && !v.value("trainable", false)))
      continue;
    CheckpointVariable var = readEntry(dir, v);
    tensors.emplace_back(var.name, std::move(var.value));
  }
  std::sort(tensors.begin(), tensors.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
  if (tensors.empty())
    fail(dir, "the checkpoint holds no parameters");
  writeSafetensors(output, tensors,
                   {{"format", "pt"}, {"step", std::to_string(meta["step"].get<int64_t>())},
                    {"source", meta["layout"].value("source", "")}});
  return (int)tensors.size();
}

} // namespace cpc
