//===- ConstTensor.h - small host tensors for folding shape subgraphs -----===//
//
// Exporters compute shapes at run time (Shape -> Gather -> Concat -> Reshape). The importer
// evaluates such subgraphs on the host, with these tensors, so every cpc value gets a static
// type. Integers (and bools) are held as int64, floats as double.
//
#ifndef CPC_FRONTENDS_ONNX_CONSTTENSOR_H
#define CPC_FRONTENDS_ONNX_CONSTTENSOR_H

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cpc::onnx_import {

/// double -> int64 as a device cast would give it, without C++'s undefined behaviour: NaN is 0,
/// values beyond int64 saturate, the rest truncate toward zero.
inline int64_t saturatingInt64(double v) {
  if (!(v == v))
    return 0;
  if (v >= 0x1p63)
    return INT64_MAX;
  if (v < -0x1p63)
    return INT64_MIN;
  return (int64_t)v;
}

class ConstTensor {
public:
  using DataType = onnx::TensorProto_DataType;

  ConstTensor() = default;
  ConstTensor(DataType type, std::vector<int64_t> shape);
  static ConstTensor fromInts(std::vector<int64_t> values, std::vector<int64_t> shape,
                              DataType type = onnx::TensorProto_DataType_INT64);
  static ConstTensor fromDoubles(std::vector<double> values, std::vector<int64_t> shape,
                                 DataType type = onnx::TensorProto_DataType_FLOAT);
  static ConstTensor scalarLike(const ConstTensor &like, double value);

  DataType type() const { return type_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rank() const { return (int64_t)shape_.size(); }
  int64_t numElements() const;
  bool isFloat() const;

  /// Element i as a double / int64, whatever the storage.
  double getDouble(int64_t i) const { return isFloat() ? f_[i] : (double)i_[i]; }
  int64_t getInt(int64_t i) const { return isFloat() ? saturatingInt64(f_[i]) : i_[i]; }
  void set(int64_t i, double v);
  std::vector<int64_t> toInts() const;

  /// Same elements, converted to `type` (ONNX Cast semantics: float -> int truncates).
  ConstTensor cast(DataType type) const;
  ConstTensor reshaped(std::vector<int64_t> shape) const;
  /// numpy broadcasting of two tensors through `fn`; result has `resultType`.
  static ConstTensor broadcastBinary(const ConstTensor &a, const ConstTensor &b, DataType resultType,
                                     const std::function<double(double, double)> &fn);
  ConstTensor map(DataType resultType, const std::function<double(double)> &fn) const;
  ConstTensor broadcastTo(const std::vector<int64_t> &shape) const;
  ConstTensor gather(const ConstTensor &indices, int64_t axis) const;
  ConstTensor slice(const std::vector<int64_t> &starts, const std::vector<int64_t> &limits,
                    const std::vector<int64_t> &strides) const;
  ConstTensor transpose(const std::vector<int64_t> &perm) const;
  static ConstTensor concat(const std::vector<const ConstTensor *> &parts, int64_t axis);
  /// Product of all elements over `axes` (ReduceProd/ReduceSum on shape vectors).
  ConstTensor reduce(const std::vector<int64_t> &axes, bool keepdims, bool product) const;

  /// Reads a TensorProto held in the model (raw_data or typed fields).
  static ConstTensor fromProto(const onnx::TensorProto &proto);

private:
  DataType type_ = onnx::TensorProto_DataType_INT64;
  std::vector<int64_t> shape_;
  std::vector<double> f_;
  std::vector<int64_t> i_;
};

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);
/// Product of the dims; throws std::runtime_error on a negative dim or overflow.
int64_t numElementsOf(const std::vector<int64_t> &shape);
/// Throws std::runtime_error when `proto`'s dims describe a tensor larger than cpc supports or,
/// with `inlineData`, when the data it holds does not match its dims.
void checkTensorProtoSize(const onnx::TensorProto &proto, bool inlineData);
bool isFloatType(onnx::TensorProto_DataType type);
/// Bytes per element of an ONNX data type; 0 when cpc does not support it.
size_t elementSize(onnx::TensorProto_DataType type);
std::string dataTypeName(int type);
std::string shapeToString(const std::vector<int64_t> &shape);

} // namespace cpc::onnx_import

#endif
