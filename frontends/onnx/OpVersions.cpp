//===- OpVersions.cpp -----------------------------------------------------===//
#include "frontends/onnx/OpVersions.h"

#include <initializer_list>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cpc::onnx_import {

namespace {
const std::unordered_map<std::string_view, std::vector<int>> &opVersionTable() {
  static const auto *table = [] {
    auto *t = new std::unordered_map<std::string_view, std::vector<int>>;
#define CPC_ONNX_OP(name, ...) t->emplace(name, std::vector<int>{__VA_ARGS__});
#include "frontends/onnx/OpVersions.inc"
#undef CPC_ONNX_OP
    return t;
  }();
  return *table;
}
} // namespace

int opVersionAt(const std::string &opType, int opset) {
  auto it = opVersionTable().find(opType);
  if (it == opVersionTable().end())
    return 0;
  int version = 0;
  for (int since : it->second)
    if (since <= opset)
      version = since;
  return version;
}

} // namespace cpc::onnx_import
