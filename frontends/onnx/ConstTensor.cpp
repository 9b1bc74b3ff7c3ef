//===- ConstTensor.cpp ----------------------------------------------------===//
#include "frontends/onnx/ConstTensor.h"
#include "support/CheckedSize.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace cpc::onnx_import {

using onnx::TensorProto_DataType;

int64_t numElementsOf(const std::vector<int64_t> &shape) {
  if (auto n = checkedNumElements(shape))
    return *n;
  for (int64_t d : shape)
    if (d < 0)
      throw std::runtime_error("shape " + shapeToString(shape) + " has a negative dim");
  throw std::runtime_error("shape " + shapeToString(shape) + " has more elements than 64 bits count");
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i) {
    auto stride = checkedMul(strides[i + 1], shape[i + 1]);
    if (!stride)
      throw std::runtime_error("shape " + shapeToString(shape) + " has more elements than 64 bits count");
    strides[i] = *stride;
  }
  return strides;
}

bool isFloatType(TensorProto_DataType type) {
  switch (type) {
  case onnx::TensorProto_DataType_FLOAT:
  case onnx::TensorProto_DataType_DOUBLE:
  case onnx::TensorProto_DataType_FLOAT16:
  case onnx::TensorProto_DataType_BFLOAT16:
    return true;
  default:
    return false;
  }
}

size_t elementSize(TensorProto_DataType type) {
  switch (type) {
  case onnx::TensorProto_DataType_FLOAT: return 4;
  case onnx::TensorProto_DataType_DOUBLE: return 8;
  case onnx::TensorProto_DataType_FLOAT16: return 2;
  case onnx::TensorProto_DataType_BFLOAT16: return 2;
  case onnx::TensorProto_DataType_INT64: return 8;
  case onnx::TensorProto_DataType_INT32: return 4;
  case onnx::TensorProto_DataType_INT16: return 2;
  case onnx::TensorProto_DataType_INT8: return 1;
  case onnx::TensorProto_DataType_UINT8: return 1;
  case onnx::TensorProto_DataType_BOOL: return 1;
  default: return 0;
  }
}

std::string dataTypeName(int type) {
  if (onnx::TensorProto_DataType_IsValid(type))
    return onnx::TensorProto_DataType_Name((TensorProto_DataType)type);
  return "type#" + std::to_string(type);
}

std::string shapeToString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

ConstTensor::ConstTensor(DataType type, std::vector<int64_t> shape)
    : type_(type), shape_(std::move(shape)) {
  if (isFloat())
    f_.assign(numElements(), 0.0);
  else
    i_.assign(numElements(), 0);
}

ConstTensor ConstTensor::fromInts(std::vector<int64_t> values, std::vector<int64_t> shape,
                                  DataType type) {
  ConstTensor t(type, std::move(shape));
  if (!t.isFloat() && type != onnx::TensorProto_DataType_BOOL) {
    t.i_ = std::move(values); // exact for values beyond 2^53
    return t;
  }
  for (size_t i = 0; i < values.size(); ++i)
    t.set(i, (double)values[i]);
  return t;
}

ConstTensor ConstTensor::fromDoubles(std::vector<double> values, std::vector<int64_t> shape,
                                     DataType type) {
  ConstTensor t(type, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.set(i, values[i]);
  return t;
}

ConstTensor ConstTensor::scalarLike(const ConstTensor &like, double value) {
  ConstTensor t(like.type(), {});
  t.set(0, value);
  return t;
}

int64_t ConstTensor::numElements() const { return numElementsOf(shape_); }
bool ConstTensor::isFloat() const { return isFloatType(type_); }

void ConstTensor::set(int64_t i, double v) {
  if (isFloat()) {
    // Round through the storage precision so folded values equal run-time ones.
    f_[i] = type_ == onnx::TensorProto_DataType_DOUBLE ? v : (double)(float)v;
  } else if (type_ == onnx::TensorProto_DataType_BOOL) {
    i_[i] = v != 0;
  } else {
    i_[i] = saturatingInt64(v);
  }
}

std::vector<int64_t> ConstTensor::toInts() const {
  std::vector<int64_t> out(numElements());
  for (int64_t i = 0; i < numElements(); ++i)
    out[i] = getInt(i);
  return out;
}

ConstTensor ConstTensor::cast(DataType type) const {
  ConstTensor out(type, shape_);
  for (int64_t i = 0; i < numElements(); ++i) {
    if (!isFloat() && !out.isFloat())
      out.i_[i] = type == onnx::TensorProto_DataType_BOOL ? i_[i] != 0 : i_[i];
    else
      out.set(i, out.isFloat() ? getDouble(i) : std::trunc(getDouble(i)));
  }
  return out;
}

ConstTensor ConstTensor::reshaped(std::vector<int64_t> shape) const {
  ConstTensor out = *this;
  out.shape_ = std::move(shape);
  return out;
}

/// Index of the source element that broadcasts to output index `linear`.
static int64_t broadcastSource(int64_t linear, const std::vector<int64_t> &outShape,
                               const std::vector<int64_t> &outStrides,
                               const std::vector<int64_t> &srcShape,
                               const std::vector<int64_t> &srcStrides) {
  int64_t offset = outShape.size() - srcShape.size(), src = 0;
  for (size_t d = 0; d < outShape.size(); ++d) {
    int64_t idx = (linear / outStrides[d]) % outShape[d];
    if ((int64_t)d >= offset && srcShape[d - offset] != 1)
      src += idx * srcStrides[d - offset];
  }
  return src;
}

ConstTensor ConstTensor::broadcastBinary(const ConstTensor &a, const ConstTensor &b,
                                         DataType resultType,
                                         const std::function<double(double, double)> &fn) {
  size_t rank = std::max(a.shape_.size(), b.shape_.size());
  std::vector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.shape_.size() ? 1 : a.shape_[i - (rank - a.shape_.size())];
    int64_t db = i < rank - b.shape_.size() ? 1 : b.shape_[i - (rank - b.shape_.size())];
    if (da != db && da != 1 && db != 1)
      throw std::runtime_error("shapes " + shapeToString(a.shape_) + " and " +
                               shapeToString(b.shape_) + " do not broadcast");
    shape[i] = da == 1 ? db : da;
  }
  ConstTensor out(resultType, shape);
  auto os = stridesOf(shape), as = stridesOf(a.shape_), bs = stridesOf(b.shape_);
  bool exactInts = !a.isFloat() && !b.isFloat() && !out.isFloat();
  for (int64_t i = 0; i < out.numElements(); ++i) {
    int64_t ia = broadcastSource(i, shape, os, a.shape_, as);
    int64_t ib = broadcastSource(i, shape, os, b.shape_, bs);
    double r = fn(a.getDouble(ia), b.getDouble(ib));
    if (exactInts && std::abs(r) < 9.0e15)
      out.i_[i] = (int64_t)r;
    else
      out.set(i, r);
  }
  return out;
}

ConstTensor ConstTensor::map(DataType resultType, const std::function<double(double)> &fn) const {
  ConstTensor out(resultType, shape_);
  for (int64_t i = 0; i < numElements(); ++i)
    out.set(i, fn(getDouble(i)));
  return out;
}

ConstTensor ConstTensor::broadcastTo(const std::vector<int64_t> &shape) const {
  ConstTensor out(type_, shape);
  auto os = stridesOf(shape), ss = stridesOf(shape_);
  for (int64_t i = 0; i < out.numElements(); ++i) {
    int64_t src = broadcastSource(i, shape, os, shape_, ss);
    if (isFloat())
      out.f_[i] = f_[src];
    else
      out.i_[i] = i_[src];
  }
  return out;
}

ConstTensor ConstTensor::gather(const ConstTensor &indices, int64_t axis) const {
  std::vector<int64_t> shape(shape_.begin(), shape_.begin() + axis);
  shape.insert(shape.end(), indices.shape_.begin(), indices.shape_.end());
  shape.insert(shape.end(), shape_.begin() + axis + 1, shape_.end());
  ConstTensor out(type_, shape);
  int64_t outer = numElementsOf({shape_.begin(), shape_.begin() + axis});
  int64_t inner = numElementsOf({shape_.begin() + axis + 1, shape_.end()});
  int64_t n = indices.numElements(), dim = shape_[axis], o = 0;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t k = 0; k < n; ++k) {
      int64_t idx = indices.getInt(k);
      if (idx < 0)
        idx += dim;
      if (idx < 0 || idx >= dim)
        throw std::runtime_error("gather index " + std::to_string(indices.getInt(k)) +
                                 " out of range for dim " + std::to_string(dim));
      for (int64_t c = 0; c < inner; ++c, ++o) {
        int64_t src = (a * dim + idx) * inner + c;
        if (isFloat())
          out.f_[o] = f_[src];
        else
          out.i_[o] = i_[src];
      }
    }
  return out;
}

ConstTensor ConstTensor::slice(const std::vector<int64_t> &starts, const std::vector<int64_t> &limits,
                               const std::vector<int64_t> &strides) const {
  std::vector<int64_t> shape(rank());
  for (int64_t d = 0; d < rank(); ++d)
    shape[d] = std::max<int64_t>(0, (limits[d] - starts[d] + strides[d] - 1) / strides[d]);
  ConstTensor out(type_, shape);
  auto os = stridesOf(shape), ss = stridesOf(shape_);
  for (int64_t i = 0; i < out.numElements(); ++i) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank(); ++d)
      src += (starts[d] + ((i / os[d]) % shape[d]) * strides[d]) * ss[d];
    if (isFloat())
      out.f_[i] = f_[src];
    else
      out.i_[i] = i_[src];
  }
  return out;
}

ConstTensor ConstTensor::transpose(const std::vector<int64_t> &perm) const {
  std::vector<int64_t> shape(rank());
  for (int64_t d = 0; d < rank(); ++d)
    shape[d] = shape_[perm[d]];
  ConstTensor out(type_, shape);
  auto os = stridesOf(shape), ss = stridesOf(shape_);
  for (int64_t i = 0; i < out.numElements(); ++i) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank(); ++d)
      src += ((i / os[d]) % shape[d]) * ss[perm[d]];
    if (isFloat())
      out.f_[i] = f_[src];
    else
      out.i_[i] = i_[src];
  }
  return out;
}

ConstTensor ConstTensor::concat(const std::vector<const ConstTensor *> &parts, int64_t axis) {
  std::vector<int64_t> shape = parts.front()->shape_;
  shape[axis] = 0;
  for (auto *p : parts)
    shape[axis] += p->shape_[axis];
  ConstTensor out(parts.front()->type_, shape);
  int64_t outer = numElementsOf({shape.begin(), shape.begin() + axis});
  int64_t o = 0;
  for (int64_t a = 0; a < outer; ++a)
    for (auto *p : parts) {
      int64_t chunk = numElementsOf({p->shape_.begin() + axis, p->shape_.end()});
      for (int64_t c = 0; c < chunk; ++c, ++o) {
        int64_t src = a * chunk + c;
        if (out.isFloat())
          out.f_[o] = p->getDouble(src);
        else
          out.i_[o] = p->getInt(src);
      }
    }
  return out;
}

ConstTensor ConstTensor::reduce(const std::vector<int64_t> &axes, bool keepdims, bool product) const {
  std::vector<int64_t> keptShape, outShape;
  for (int64_t d = 0; d < rank(); ++d) {
    bool reduced = axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
    keptShape.push_back(reduced ? 1 : shape_[d]);
    if (!reduced || keepdims)
      outShape.push_back(reduced ? 1 : shape_[d]);
  }
  ConstTensor out(type_, keptShape);
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.set(i, product ? 1.0 : 0.0);
  auto ks = stridesOf(keptShape), ss = stridesOf(shape_);
  for (int64_t i = 0; i < numElements(); ++i) {
    int64_t dst = 0;
    for (int64_t d = 0; d < rank(); ++d)
      if (keptShape[d] != 1)
        dst += ((i / ss[d]) % shape_[d]) * ks[d];
    double v = out.getDouble(dst);
    out.set(dst, product ? v * getDouble(i) : v + getDouble(i));
  }
  return out.reshaped(outShape);
}

template <typename T>
static void readRaw(const std::string &raw, int64_t n, std::vector<double> *f,
                    std::vector<int64_t> *i) {
  for (int64_t k = 0; k < n; ++k) {
    T v;
    std::memcpy(&v, raw.data() + k * sizeof(T), sizeof(T));
    if (f)
      (*f)[k] = (double)v;
    else
      (*i)[k] = (int64_t)v;
  }
}

/// IEEE half / bfloat16 bits to double.
static double halfToDouble(uint16_t h, bool bfloat) {
  if (bfloat) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(mant, -24)
             : exp == 31 ? (mant ? NAN : INFINITY)
                         : std::ldexp(mant + 1024, exp - 25);
  return sign ? -v : v;
}

/// How many values a proto without raw_data holds, in the field its element type uses.
static int64_t storedValueCount(const onnx::TensorProto &proto, onnx::TensorProto_DataType type) {
  switch (type) {
  case onnx::TensorProto_DataType_FLOAT: return proto.float_data_size();
  case onnx::TensorProto_DataType_DOUBLE: return proto.double_data_size();
  case onnx::TensorProto_DataType_INT64: return proto.int64_data_size();
  default: return proto.int32_data_size(); // f16, bf16, int32, int16, int8, uint8, bool
  }
}

void checkTensorProtoSize(const onnx::TensorProto &proto, bool inlineData) {
  auto type = (TensorProto_DataType)proto.data_type();
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  int64_t size = std::max<int64_t>(1, elementSize(type));
  if (!checkedTensorBytes(shape, size))
    throw std::runtime_error(tensorSizeProblem(shape, size));
  if (!inlineData)
    return;
  int64_t n = numElementsOf(shape);
  if (proto.has_raw_data()) {
    int64_t held = (int64_t)proto.raw_data().size();
    if (held % size || held / size != n)
      throw std::runtime_error("raw_data holds " + std::to_string(held) + " bytes, its dims " +
                               shapeToString(shape) + " need " + std::to_string(n) + " values of " +
                               std::to_string(size) + " bytes");
  } else if (int64_t held = storedValueCount(proto, type); held != n) {
    throw std::runtime_error("tensor holds " + std::to_string(held) + " values, its dims " +
                             shapeToString(shape) + " say " + std::to_string(n));
  }
}

ConstTensor ConstTensor::fromProto(const onnx::TensorProto &proto) {
  auto type = (DataType)proto.data_type();
  if (!elementSize(type))
    throw std::runtime_error("unsupported tensor element type " + dataTypeName(type));
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  int64_t n = numElementsOf(shape);
  checkTensorProtoSize(proto, true); // before allocating anything of the dims' size
  ConstTensor t(type, shape);
  auto *f = t.isFloat() ? &t.f_ : nullptr;
  auto *i = t.isFloat() ? nullptr : &t.i_;
  if (proto.has_raw_data()) {
    const std::string &raw = proto.raw_data();
    switch (type) {
    case onnx::TensorProto_DataType_FLOAT: readRaw<float>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_DOUBLE: readRaw<double>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_INT64: readRaw<int64_t>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_INT32: readRaw<int32_t>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_INT16: readRaw<int16_t>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_INT8: readRaw<int8_t>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_UINT8:
    case onnx::TensorProto_DataType_BOOL: readRaw<uint8_t>(raw, n, f, i); break;
    case onnx::TensorProto_DataType_FLOAT16:
    case onnx::TensorProto_DataType_BFLOAT16: {
      std::vector<int64_t> bits(n);
      readRaw<uint16_t>(raw, n, nullptr, &bits);
      for (int64_t k = 0; k < n; ++k)
        t.f_[k] = halfToDouble(bits[k], type == onnx::TensorProto_DataType_BFLOAT16);
      break;
    }
    default: break;
    }
    return t;
  }
  switch (type) {
  case onnx::TensorProto_DataType_FLOAT:
    for (int64_t k = 0; k < n; ++k) t.f_[k] = proto.float_data(k);
    break;
  case onnx::TensorProto_DataType_DOUBLE:
    for (int64_t k = 0; k < n; ++k) t.f_[k] = proto.double_data(k);
    break;
  case onnx::TensorProto_DataType_INT64:
    for (int64_t k = 0; k < n; ++k) t.i_[k] = proto.int64_data(k);
    break;
  case onnx::TensorProto_DataType_FLOAT16:
  case onnx::TensorProto_DataType_BFLOAT16:
    for (int64_t k = 0; k < n; ++k)
      t.f_[k] = halfToDouble((uint16_t)proto.int32_data(k), type == onnx::TensorProto_DataType_BFLOAT16);
    break;
  default: // int32, int16, int8, uint8, bool live in int32_data
    for (int64_t k = 0; k < n; ++k) t.i_[k] = proto.int32_data(k);
    break;
  }
  return t;
}

} // namespace cpc::onnx_import
