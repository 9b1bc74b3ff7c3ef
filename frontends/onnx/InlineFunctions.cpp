//===- InlineFunctions.cpp - model-local ONNX functions expanded in place -===//
#include "frontends/onnx/InlineFunctions.h"

#include "frontends/onnx/OnnxImporter.h"

#include <map>
#include <unordered_map>

namespace cpc::onnx_import {
namespace {

constexpr int kMaxDepth = 32;          // calls nested deeper than this are taken for recursion
constexpr int kMaxNodes = 1 << 18;     // a graph the calls would grow beyond this is refused

using FunctionKey = std::pair<std::string, std::string>; // (domain, name)

std::string defaultDomain(const std::string &domain) { return domain == "ai.onnx" ? "" : domain; }

class Inliner {
public:
  Inliner(onnx::ModelProto &model, const std::string &path) : model_(model), path_(path) {
    for (const auto &imp : model.opset_import())
      if (defaultDomain(imp.domain()).empty())
        opset_ = imp.version();
    for (const onnx::FunctionProto &f : model.functions())
      functions_[{defaultDomain(f.domain()), f.name()}] = &f;
  }

  void run() {
    if (functions_.empty())
      return;
    for (int depth = 0;; ++depth) {
      google::protobuf::RepeatedPtrField<onnx::NodeProto> expanded;
      bool changed = false;
      for (const onnx::NodeProto &node : model_.graph().node()) {
        auto it = functions_.find({defaultDomain(node.domain()), node.op_type()});
        if (it == functions_.end()) {
          *expanded.Add() = node;
          continue;
        }
        if (depth == kMaxDepth)
          fail(*it->second, "calls itself, or nests calls more than " + std::to_string(kMaxDepth) + " deep");
        expand(node, *it->second, expanded);
        changed = true;
        if (expanded.size() > kMaxNodes)
          fail(*it->second, "expands the graph beyond " + std::to_string(kMaxNodes) + " nodes");
      }
      if (!changed)
        break;
      model_.mutable_graph()->mutable_node()->Swap(&expanded);
    }
    model_.clear_functions();
  }

private:
  [[noreturn]] void fail(const onnx::FunctionProto &f, const std::string &what) const {
    throw ImportError(path_ + ": local function '" + f.name() + "' " + what);
  }

  /// The body of `f` for the call `call`, appended to `out`.
  void expand(const onnx::NodeProto &call, const onnx::FunctionProto &f,
              google::protobuf::RepeatedPtrField<onnx::NodeProto> &out) {
    for (const auto &imp : f.opset_import())
      if (defaultDomain(imp.domain()).empty() && imp.version() != opset_)
        fail(f, "uses opset " + std::to_string(imp.version()) + " of the default domain, the model " +
                    std::to_string(opset_));
    // The function's formal inputs and outputs are the call's; its other values get a prefix
    // unique to this call.
    std::unordered_map<std::string, std::string> names;
    for (int i = 0; i < f.input_size(); ++i)
      names[f.input(i)] = i < call.input_size() ? call.input(i) : "";
    for (int i = 0; i < f.output_size(); ++i)
      names[f.output(i)] = i < call.output_size() ? call.output(i) : "";
    std::string prefix = "__" + f.name() + "_" + std::to_string(calls_++) + "__";
    auto rename = [&](const std::string &name) {
      if (name.empty())
        return name;
      auto it = names.find(name);
      return it != names.end() ? it->second : prefix + name;
    };
    std::map<std::string, const onnx::AttributeProto *> bound;
    for (const auto &a : call.attribute())
      bound[a.name()] = &a;
    for (const onnx::NodeProto &body : f.node()) {
      onnx::NodeProto *node = out.Add();
      *node = body;
      node->set_name(prefix + body.name());
      for (auto &in : *node->mutable_input())
        in = rename(in);
      for (auto &o : *node->mutable_output())
        o = rename(o);
      google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
      for (const auto &a : body.attribute()) {
        if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS)
          fail(f, "holds a subgraph (node '" + body.name() + "', " + body.op_type() + "), which cpc does not inline");
        if (a.ref_attr_name().empty()) {
          *attrs.Add() = a;
          continue;
        }
        auto it = bound.find(a.ref_attr_name());
        if (it == bound.end())
          continue; // not given at the call: the op's default applies
        onnx::AttributeProto *value = attrs.Add();
        *value = *it->second;
        value->set_name(a.name());
      }
      node->mutable_attribute()->Swap(&attrs);
    }
  }

  onnx::ModelProto &model_;
  const std::string &path_;
  int64_t opset_ = 0;
  std::map<FunctionKey, const onnx::FunctionProto *> functions_;
  int64_t calls_ = 0;
};

} // namespace

void inlineLocalFunctions(onnx::ModelProto &model, const std::string &path) { Inliner(model, path).run(); }

} // namespace cpc::onnx_import
