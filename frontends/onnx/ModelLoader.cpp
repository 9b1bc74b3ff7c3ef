//===- ModelLoader.cpp ----------------------------------------------------===//
#include "frontends/onnx/ModelLoader.h"
#include "frontends/onnx/ConstTensor.h"
#include "frontends/onnx/InlineFunctions.h"
#include "support/CheckedSize.h"

#include "onnx/checker.h"
#include "onnx/defs/parser.h"
#include "onnx/shape_inference/implementation.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/unknown_field_set.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unordered_map>

namespace cpc::onnx_import {

namespace {
[[noreturn]] void fail(const std::string &path, const std::string &message) {
  throw ImportError(path + ": " + message);
}

/// Joins a multi-line library message into one line (errors are one line each).
std::string oneLine(const std::string &s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space)
      out += ' ';
    out += c;
    space = false;
  }
  return out;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

void parseBinary(const std::string &path, onnx::ModelProto &model) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail(path, "is a directory, not an ONNX model");
  }
  bool ok;
  {
    google::protobuf::io::FileInputStream raw(fd);
    google::protobuf::io::CodedInputStream coded(&raw);
    coded.SetTotalBytesLimit(INT_MAX);
    ok = model.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
  }
  ::close(fd);
  if (!ok)
    fail(path, "not a valid ONNX model (truncated or corrupt protobuf)");
}

void parseText(const std::string &path, onnx::ModelProto &model) {
  std::ifstream in(path);
  if (!in)
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  std::string source = text.str();
  onnx::OnnxParser parser(source.c_str());
  onnx::Common::Status status;
  try {
    status = parser.Parse(model);
  } catch (const std::exception &e) { // libonnx's parser lets std::stol & co. throw on bad numbers
    fail(path, "cannot parse ONNX text: a malformed or out-of-range number (" + oneLine(e.what()) + ")");
  }
  if (!status.IsOK())
    fail(path, "cannot parse ONNX text: " + oneLine(status.ErrorMessage()));
}

void checkExternalData(const LoadedModel &model) {
  for (const auto &init : model.proto->graph().initializer()) {
    if (init.data_location() != onnx::TensorProto_DataLocation_EXTERNAL)
      continue;
    ExternalLocation where = externalLocation(model, init);
    struct stat st;
    if (stat(where.file.c_str(), &st) != 0)
      fail(model.path, "initializer '" + init.name() + "' keeps its data in '" + where.file +
                           "', which is missing");
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    int64_t size = std::max<int64_t>(1, elementSize((onnx::TensorProto_DataType)init.data_type()));
    auto bytes = checkedTensorBytes(dims, size);
    if (!bytes)
      fail(model.path, "initializer '" + init.name() + "': " + tensorSizeProblem(dims, size));
    int64_t length = where.length >= 0 ? where.length : *bytes;
    if (length != *bytes)
      fail(model.path, "initializer '" + init.name() + "' has external data of " + std::to_string(length) +
                           " bytes, its dims " + shapeToString(dims) + " need " + std::to_string(*bytes));
    auto end = checkedAdd(where.offset, length);
    if (!end || *end > (int64_t)st.st_size)
      fail(model.path, "initializer '" + init.name() + "' needs bytes up to " +
                           (end ? std::to_string(*end) : "beyond 2^63") + " of '" + where.file +
                           "', which has only " + std::to_string(st.st_size));
  }
}
} // namespace

std::string describeNode(const onnx::NodeProto &node, int index) {
  std::string name = node.name().empty() ? "#" + std::to_string(index) : node.name();
  std::string op = node.domain().empty() || node.domain() == "ai.onnx" ? node.op_type()
                                                                       : node.domain() + "::" + node.op_type();
  return "node '" + name + "' (" + op + ")";
}

std::vector<onnx::StringStringEntryProto> newerMetadata(const google::protobuf::Message &message, int field) {
  std::vector<onnx::StringStringEntryProto> entries;
  const google::protobuf::UnknownFieldSet &unknown = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &entryField = unknown.field(i);
    onnx::StringStringEntryProto entry;
    if (entryField.number() == field && entryField.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
        entry.ParseFromString(entryField.length_delimited()))
      entries.push_back(std::move(entry));
  }
  return entries;
}

std::string newerMetadataValue(const google::protobuf::Message &message, int field, const std::string &key) {
  for (const auto &entry : newerMetadata(message, field))
    if (entry.key() == key)
      return entry.value();
  return {};
}

namespace {
/// torch.export's input kinds (PARAMETER, BUFFER, CONSTANT_TENSOR, ...) as the exporter records them.
std::unordered_map<std::string, SourceRole> readSourceRoles(const onnx::GraphProto &graph) {
  std::unordered_map<std::string, SourceRole> roles;
  auto visit = [&](const onnx::ValueInfoProto &value) {
    for (const auto &entry : newerMetadata(value, kValueInfoMetadataField)) {
      if (entry.key() != "pkg.torch.export.graph_signature.InputSpec.kind")
        continue;
      roles[value.name()] = entry.value() == "PARAMETER" ? SourceRole::Parameter
                            : entry.value() == "BUFFER" ? SourceRole::Buffer
                                                        : SourceRole::Constant;
    }
  };
  for (const auto &value : graph.value_info())
    visit(value);
  for (const auto &value : graph.input())
    visit(value);
  return roles;
}
} // namespace

/// A non-negative decimal byte count, all of the string; throws otherwise (also on overflow).
static int64_t parseByteCount(const std::string &text) {
  size_t used = 0;
  long long v = std::stoll(text, &used, 10);
  if (used != text.size() || v < 0)
    throw std::invalid_argument(text);
  return v;
}

ExternalLocation externalLocation(const LoadedModel &model, const onnx::TensorProto &tensor) {
  ExternalLocation where;
  for (const auto &kv : tensor.external_data()) {
    try {
      if (kv.key() == "location")
        where.file = kv.value();
      else if (kv.key() == "offset")
        where.offset = parseByteCount(kv.value());
      else if (kv.key() == "length")
        where.length = parseByteCount(kv.value());
    } catch (const std::exception &) {
      fail(model.path, "initializer '" + tensor.name() + "' has a malformed external_data " +
                           kv.key() + " '" + kv.value() + "'");
    }
  }
  if (where.file.empty() || where.file.find("..") != std::string::npos || where.file[0] == '/')
    fail(model.path, "initializer '" + tensor.name() + "' has a missing or unsafe external data location '" +
                         where.file + "'");
  where.file = model.modelDir + "/" + where.file;
  return where;
}

LoadedModel parseModel(const std::string &path) {
  LoadedModel model;
  model.path = path;
  model.modelDir = directoryOf(path);
  model.proto = std::make_shared<onnx::ModelProto>();
  if (endsWith(path, ".onnxtext"))
    parseText(path, *model.proto);
  else
    parseBinary(path, *model.proto);

  onnx::ModelProto &proto = *model.proto;
  if (!proto.has_graph() || proto.ir_version() <= 0)
    fail(path, "not a valid ONNX model (no graph or IR version; truncated or corrupt?)");

  std::unordered_map<std::string, int> opsets;
  for (const auto &imp : proto.opset_import())
    opsets[imp.domain() == "ai.onnx" ? "" : imp.domain()] = (int)imp.version();
  auto it = opsets.find("");
  if (it == opsets.end())
    fail(path, "imports no version of the default ONNX opset");
  model.opset = it->second;
  model.sourceRoles = readSourceRoles(proto.graph());
  if (model.opset < kMinOpset || model.opset > kNewestOpset)
    fail(path, "opset " + std::to_string(model.opset) + " is outside the supported range " +
                   std::to_string(kMinOpset) + ".." + std::to_string(kNewestOpset));
  inlineLocalFunctions(proto, path); // before the checker: it sees ONNX ops only
  return model;
}

namespace {
/// Runs ONNX shape inference on `proto` as a validator, in a child process, and returns its
/// complaint. libonnx's inference crashes on some malformed models (a Conv whose input and
/// weight ranks differ, found by fuzzing); a crash there must become one error line, not take
/// cpc down. Its results are not needed: the importer derives every shape itself.
std::optional<std::string> shapeInferenceError(onnx::ModelProto &proto) {
  int fds[2];
  if (::pipe(fds) != 0)
    return "cannot run ONNX shape inference: " + std::string(std::strerror(errno));
  std::fflush(nullptr);
  pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return "cannot run ONNX shape inference: " + std::string(std::strerror(errno));
  }
  if (child == 0) {
    // A crash should end this process quietly; the parent reports it.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      std::signal(sig, SIG_DFL);
    ::close(fds[0]);
    std::string message;
    try {
      onnx::shape_inference::InferShapes(proto); // the child's copy of the proto
    } catch (const std::exception &e) {
      message = e.what();
    }
    for (size_t done = 0; done < message.size();) {
      ssize_t n = ::write(fds[1], message.data() + done, message.size() - done);
      if (n <= 0)
        break;
      done += n;
    }
    ::_exit(message.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    message.append(buffer, n);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return "ONNX shape inference crashed on this model (signal " + std::to_string(WTERMSIG(status)) +
           "): it is malformed (e.g. an op's input ranks do not fit together)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return std::nullopt;
  return "ONNX shape inference failed: " + oneLine(message.empty() ? "no reason given" : message);
}
} // namespace

namespace {
/// The newest opset of the default domain the linked ONNX library defines.
int libraryOpset() {
  const auto &ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto it = ranges.find(onnx::ONNX_DOMAIN);
  return it == ranges.end() ? 0 : it->second.second;
}

/// A model newer than the library: the library checks what it still defines, node by node as
/// the op's unchanged older version; whole-graph shape inference would misread changed ops.
void checkAboveLibraryOpset(const LoadedModel &model, int ceiling) {
  const onnx::GraphProto &graph = model.proto->graph();
  onnx::checker::CheckerContext ctx;
  ctx.set_ir_version(std::min<int>((int)model.proto->ir_version(), onnx::IR_VERSION));
  std::unordered_map<std::string, int> opsets{{onnx::ONNX_DOMAIN, ceiling}};
  ctx.set_opset_imports(opsets);
  ctx.set_model_dir(model.modelDir);
  onnx::checker::LexicalScopeContext lex;
  for (const auto &init : graph.initializer()) {
    try {
      onnx::checker::check_tensor(init, ctx);
    } catch (const std::exception &e) {
      fail(model.path, "invalid model: initializer '" + init.name() + "': " + oneLine(e.what()));
    }
  }
  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto &node = graph.node(index);
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (!defaultDomain || opVersionAt(node.op_type(), model.opset) != opVersionAt(node.op_type(), ceiling))
      continue;
    try {
      onnx::checker::check_node(node, ctx, lex);
    } catch (const std::exception &e) {
      fail(model.path, "invalid model: " + describeNode(node, index) + ": " + oneLine(e.what()));
    }
  }
}
} // namespace

void validateModel(LoadedModel &model) {
  const std::string &path = model.path;
  onnx::ModelProto &proto = *model.proto;
  checkExternalData(model);
  int ceiling = libraryOpset();
  if (model.opset > ceiling) {
    checkAboveLibraryOpset(model, ceiling);
    return;
  }
  std::unordered_map<std::string, int> opsets;
  for (const auto &imp : proto.opset_import())
    opsets[imp.domain() == "ai.onnx" ? "" : imp.domain()] = (int)imp.version();
  try {
    onnx::checker::CheckerContext ctx;
    ctx.set_ir_version(std::min<int>((int)proto.ir_version(), onnx::IR_VERSION));
    ctx.set_opset_imports(opsets);
    ctx.set_model_dir(model.modelDir);
    onnx::checker::LexicalScopeContext lex;
    onnx::checker::check_graph(proto.graph(), ctx, lex);
  } catch (const std::exception &e) {
    fail(path, "invalid model: " + oneLine(e.what()));
  }

  if (auto error = shapeInferenceError(proto))
    fail(path, *error);
}

namespace {
class ProtoWeightStore final : public WeightStore {
public:
  explicit ProtoWeightStore(const LoadedModel &model) : model_(model) {
    for (const auto &init : model.proto->graph().initializer())
      byName_[init.name()] = &init;
  }
  bool contains(const std::string &name) const override { return byName_.count(name); }
  size_t byteSize(const std::string &name) const override {
    const onnx::TensorProto &t = get(name);
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    int64_t size = std::max<int64_t>(1, elementSize((onnx::TensorProto_DataType)t.data_type()));
    auto bytes = checkedTensorBytes(dims, size);
    if (!bytes)
      fail(model_.path, "initializer '" + name + "': " + tensorSizeProblem(dims, size));
    return *bytes;
  }
  void read(const std::string &name, void *dst) const override {
    const onnx::TensorProto &t = get(name);
    size_t bytes = byteSize(name);
    if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
      ExternalLocation where = externalLocation(model_, t);
      std::ifstream in(where.file, std::ios::binary);
      in.seekg(where.offset);
      if (!in.read(static_cast<char *>(dst), bytes))
        fail(model_.path, "cannot read the data of '" + name + "' from '" + where.file + "'");
      return;
    }
    if (t.has_raw_data()) {
      if (t.raw_data().size() != bytes)
        fail(model_.path, "initializer '" + name + "' has " + std::to_string(t.raw_data().size()) +
                              " bytes of data, expected " + std::to_string(bytes));
      std::memcpy(dst, t.raw_data().data(), bytes);
      return;
    }
    // Typed fields: convert through ConstTensor, then narrow to the stored element type.
    ConstTensor c = ConstTensor::fromProto(t);
    auto *out = static_cast<char *>(dst);
    for (int64_t i = 0; i < c.numElements(); ++i) {
      switch (t.data_type()) {
      case onnx::TensorProto_DataType_FLOAT: { float v = (float)c.getDouble(i); std::memcpy(out + 4 * i, &v, 4); break; }
      case onnx::TensorProto_DataType_DOUBLE: { double v = c.getDouble(i); std::memcpy(out + 8 * i, &v, 8); break; }
      case onnx::TensorProto_DataType_INT64: { int64_t v = c.getInt(i); std::memcpy(out + 8 * i, &v, 8); break; }
      case onnx::TensorProto_DataType_INT32: { int32_t v = (int32_t)c.getInt(i); std::memcpy(out + 4 * i, &v, 4); break; }
      default: fail(model_.path, "initializer '" + name + "': typed " + dataTypeName(t.data_type()) +
                                     " data is not supported, store it as raw_data");
      }
    }
  }

private:
  const onnx::TensorProto &get(const std::string &name) const {
    auto it = byName_.find(name);
    if (it == byName_.end())
      fail(model_.path, "no initializer named '" + name + "'");
    return *it->second;
  }
  LoadedModel model_; // keeps the proto alive
  std::unordered_map<std::string, const onnx::TensorProto *> byName_;
};
} // namespace

std::shared_ptr<WeightStore> makeWeightStore(const LoadedModel &model) {
  return std::make_shared<ProtoWeightStore>(model);
}

} // namespace cpc::onnx_import
