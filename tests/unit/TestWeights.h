//===- TestWeights.h - parameter values for plans built from test modules ---===//
#ifndef CPC_TESTS_UNIT_TESTWEIGHTS_H
#define CPC_TESTS_UNIT_TESTWEIGHTS_H

#include "frontends/onnx/OnnxImporter.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace cpc::test {

/// f64 initial values of a test module's parameters, by name.
class DoubleWeights : public cpc::WeightStore {
public:
  std::map<std::string, std::vector<double>> values;
  bool contains(const std::string &name) const override { return values.count(name); }
  size_t byteSize(const std::string &name) const override { return values.at(name).size() * sizeof(double); }
  void read(const std::string &name, void *dst) const override {
    std::memcpy(dst, values.at(name).data(), byteSize(name));
  }
};

} // namespace cpc::test

#endif
