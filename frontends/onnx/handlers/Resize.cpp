//===- Resize.cpp - ONNX Resize -> cpc ------------------------------------===//
//
// Resize is separable: each resized axis is resampled on its own, every output position a
// weighted sum of a few input positions whose weights depend only on the sizes and attributes.
// So the importer computes those weights on the host (ONNX's reference rules, in double) and
// emits ops the dialect already has: nearest is a Gather of constant positions, linear and
// cubic a MatMul by a constant [in, out] interpolation matrix. Their gradients, sharding rules,
// costs and kernels are Gather's and MatMul's.
//
#include "frontends/onnx/NodeImporter.h"

#include <cmath>
#include <functional>

using namespace mlir;

namespace cpc::onnx_import {
namespace {

/// How one resized axis maps output positions to input coordinates.
struct AxisResize {
  int64_t in = 0, out = 0;
  double scale = 1;            // output width / input width, as the file says it
  double roiBegin = 0, roiEnd = 1; // tf_crop_and_resize's window, as fractions of the input
};

/// The attributes that decide the weights.
struct ResizeMode {
  std::string mode, coordinates, nearest;
  double cubicA = -0.75;
  bool excludeOutside = false, antialias = false;
};

/// The input coordinate of output position y (ONNX's coordinate_transformation_mode), and
/// whether it lies outside the input (tf_crop_and_resize writes extrapolation_value there).
double sourceCoordinate(const std::string &mode, const AxisResize &a, double y, bool &outside) {
  double outWidth = a.scale * (double)a.in, in = (double)a.in;
  outside = false;
  if (mode == "align_corners")
    return outWidth == 1 ? 0.0 : y * (in - 1) / (outWidth - 1);
  if (mode == "asymmetric")
    return y / a.scale;
  if (mode == "tf_half_pixel_for_nn")
    return (y + 0.5) / a.scale;
  if (mode == "tf_crop_and_resize") {
    double x = outWidth == 1 ? (a.roiEnd - a.roiBegin) * (in - 1) / 2
                             : y * (a.roiEnd - a.roiBegin) * (in - 1) / (outWidth - 1);
    x += a.roiBegin * (in - 1);
    outside = x < 0 || x > in - 1;
    return x;
  }
  if (mode == "pytorch_half_pixel")
    return outWidth == 1 ? -0.5 : (y + 0.5) / a.scale - 0.5;
  if (mode == "half_pixel_symmetric") {
    double offset = in / 2 * (1 - (double)a.out / outWidth);
    return offset + (y + 0.5) / a.scale - 0.5;
  }
  return (y + 0.5) / a.scale - 0.5; // half_pixel
}

double cubicKernel(double x, double A) {
  x = std::fabs(x);
  if (x <= 1)
    return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2)
    return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

/// The taps' weights for a coordinate whose distance past its left neighbour is `ratio`
/// (in (0, 1]: an integer coordinate counts as 1 past the one before it).
std::vector<double> tapWeights(const ResizeMode &m, double ratio, double scale) {
  if (m.mode == "nearest") {
    if (ratio == 1)
      return {0, 1};
    bool right = m.nearest == "round_prefer_floor" ? ratio > 0.5
                 : m.nearest == "round_prefer_ceil" ? ratio >= 0.5
                                                    : m.nearest == "ceil";
    return {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
  }
  std::vector<double> w;
  if (!m.antialias) {
    if (m.mode == "linear")
      return {1 - ratio, ratio};
    for (double d : {ratio + 1, ratio, 1 - ratio, 2 - ratio})
      w.push_back(cubicKernel(d, m.cubicA));
    return w;
  }
  // Antialias widens the filter by 1 / scale when downsampling, normalized to sum 1.
  double s = std::min(scale, 1.0);
  double support = m.mode == "linear" ? 1 : 2;
  int64_t start = (int64_t)std::floor(-support / s) + 1, end = 2 - start;
  double sum = 0;
  for (int64_t i = start; i < end; ++i) {
    double x = s * ((double)i - ratio);
    w.push_back(m.mode == "linear" ? std::clamp(1 - std::fabs(x), 0.0, 1.0) : cubicKernel(x, m.cubicA));
    sum += w.back();
  }
  for (double &v : w)
    v /= sum;
  return w;
}

/// Each output position's taps along one axis: (input position, weight); taps past the ends
/// clamp to the edge, or drop out and renormalize with exclude_outside.
using Taps = std::vector<std::pair<int64_t, double>>;

/// The taps of every output position of one axis, and which outputs are extrapolated.
std::vector<Taps> axisWeights(const ResizeMode &m, const AxisResize &a, std::vector<bool> &extrapolated) {
  std::vector<Taps> weights(a.out);
  extrapolated.assign(a.out, false);
  for (int64_t y = 0; y < a.out; ++y) {
    bool outside;
    double x = sourceCoordinate(m.coordinates, a, (double)y, outside);
    extrapolated[y] = outside;
    double left = std::floor(x);
    double ratio = x == left ? 1.0 : x - left;
    std::vector<double> w = tapWeights(m, ratio, a.scale);
    int64_t taps = w.size();
    // The taps nearest x, ties to the smaller index (the reference's window rule).
    int64_t pad = (taps + 1) / 2;
    double shifted = x + (double)pad;
    double base = std::floor(shifted), frac = shifted - base;
    int64_t offset = taps % 2 == 0 ? (frac == 0 ? -(taps / 2) : -(taps / 2) + 1)
                                   : (frac <= 0.5 ? -((taps - 1) / 2) : -((taps - 1) / 2) + 1);
    int64_t first = (int64_t)base + offset - pad;
    if (m.excludeOutside) {
      double sum = 0;
      for (int64_t k = 0; k < taps; ++k) {
        if (first + k < 0 || first + k >= a.in)
          w[k] = 0;
        sum += w[k];
      }
      for (double &v : w)
        v = sum == 0 ? v : v / sum;
    }
    for (int64_t k = 0; k < taps; ++k)
      weights[y].push_back({std::clamp<int64_t>(first + k, 0, a.in - 1), w[k]});
  }
  return weights;
}

/// A constant of `values` (one per position along `axis`) shaped to broadcast against a
/// tensor of rank `rank`.
ConstTensor alongAxis(const std::vector<double> &values, int64_t axis, int64_t rank, ConstTensor::DataType dtype) {
  std::vector<int64_t> shape(rank, 1);
  shape[axis] = values.size();
  return ConstTensor::fromDoubles(values, shape, dtype);
}

// Bounds on what a Resize may ask of the importer's host memory.
constexpr int64_t kMaxResizedAxis = int64_t(1) << 24;
constexpr int64_t kMaxMatrixElements = int64_t(1) << 25;

class ResizeImporter {
public:
  explicit ResizeImporter(NodeImporter &n) : n_(n), shape_(n.inputShape(0)) {}

  void run() {
    readMode();
    std::vector<AxisResize> axes = readAxes();
    Value x = n_.input(0);
    for (size_t d = 0; d < axes.size(); ++d)
      if (!isIdentity(axes[d]))
        x = resizeAxis(x, (int64_t)d, axes[d]);
    n_.setOutput(0, x);
  }

private:
  /// An axis the reference leaves alone: same size, scale 1, the whole input as its window.
  bool isIdentity(const AxisResize &a) const {
    bool wholeWindow = mode_.coordinates != "tf_crop_and_resize" || (a.roiBegin == 0 && a.roiEnd == 1);
    return a.out == a.in && std::fabs(a.scale - 1) < 1e-9 && wholeWindow;
  }

  void readMode() {
    mode_.mode = n_.attrString("mode", "nearest");
    mode_.coordinates = n_.attrString("coordinate_transformation_mode", "half_pixel");
    mode_.nearest = n_.attrString("nearest_mode", "round_prefer_floor");
    mode_.cubicA = n_.attrFloat("cubic_coeff_a", -0.75);
    mode_.excludeOutside = n_.attrInt("exclude_outside", 0) != 0;
    mode_.antialias = n_.attrInt("antialias", 0) != 0;
    if (mode_.mode != "nearest" && mode_.mode != "linear" && mode_.mode != "cubic")
      n_.fail("mode '" + mode_.mode + "' is not one of nearest, linear, cubic");
    static const char *const kCoordinates[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                               "align_corners", "asymmetric", "tf_crop_and_resize",
                                               "tf_half_pixel_for_nn"};
    if (llvm::none_of(kCoordinates, [&](const char *c) { return mode_.coordinates == c; }))
      n_.fail("coordinate_transformation_mode '" + mode_.coordinates + "' is not supported");
    static const char *const kNearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    if (llvm::none_of(kNearest, [&](const char *c) { return mode_.nearest == c; }))
      n_.fail("nearest_mode '" + mode_.nearest + "' is not supported");
    if (mode_.antialias && mode_.mode == "nearest")
      n_.fail("antialias applies to linear and cubic modes only");
  }

  /// An optional input given as a non-empty constant (exporters write "" or an empty tensor).
  const ConstTensor *optionalConst(size_t i, const char *what) {
    if (!n_.hasInput(i))
      return nullptr;
    const ConstTensor &t = n_.requireConstInput(i, what);
    return t.numElements() ? &t : nullptr;
  }

  std::vector<AxisResize> readAxes() {
    int64_t rank = shape_.size();
    std::vector<int64_t> axes;
    for (int64_t a : n_.attrInts("axes", std::vector<int64_t>{}))
      axes.push_back(n_.normalizeAxis(a, rank));
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d)
        axes.push_back(d);
    const ConstTensor *scales = optionalConst(2, "scales"), *sizes = optionalConst(3, "sizes");
    if (!!scales == !!sizes)
      n_.fail("exactly one of scales and sizes must be given");
    const ConstTensor *given = scales ? scales : sizes;
    if (given->numElements() != (int64_t)axes.size())
      n_.fail((scales ? "scales" : "sizes") + std::string(" must hold one value per resized axis (") +
              std::to_string(axes.size()) + ")");
    std::vector<AxisResize> out(rank);
    for (int64_t d = 0; d < rank; ++d)
      out[d] = {shape_[d], shape_[d], 1.0, 0.0, 1.0};
    std::string policy = n_.attrString("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      n_.fail("keep_aspect_ratio_policy '" + policy + "' is not one of stretch, not_larger, not_smaller");
    double kept = policy == "not_larger" ? INFINITY : -INFINITY;
    auto resizeTo = [&](int64_t axis, double size) { // checked before it becomes an integer
      if (!(size >= 1) || size > (double)kMaxResizedAxis)
        n_.fail("axis " + std::to_string(axis) + " would be resized to " + std::to_string(size) +
                " elements (cpc supports 1 to 2^24)");
      out[axis].out = (int64_t)size;
    };
    for (size_t i = 0; i < axes.size(); ++i) {
      AxisResize &a = out[axes[i]];
      if (scales) {
        a.scale = scales->getDouble(i);
        if (!(a.scale > 0) || !std::isfinite(a.scale))
          n_.fail("scales must be positive and finite");
        resizeTo(axes[i], std::floor((double)a.in * a.scale));
      } else {
        resizeTo(axes[i], sizes->getDouble(i));
        a.scale = (double)a.out / (double)a.in;
        kept = policy == "not_larger" ? std::min(kept, a.scale) : std::max(kept, a.scale);
      }
    }
    if (sizes && policy != "stretch")
      for (int64_t d : axes) {
        out[d].scale = kept;
        resizeTo(d, std::floor((double)out[d].in * kept + 0.5));
      }
    if (mode_.coordinates == "tf_crop_and_resize") {
      const ConstTensor *roi = optionalConst(1, "roi");
      if (!roi || roi->numElements() != 2 * (int64_t)axes.size())
        n_.fail("tf_crop_and_resize needs a constant roi with a begin and an end per resized axis");
      for (size_t i = 0; i < axes.size(); ++i) {
        out[axes[i]].roiBegin = roi->getDouble(i);
        out[axes[i]].roiEnd = roi->getDouble(i + axes.size());
      }
    }
    return out;
  }

  Value resizeAxis(Value x, int64_t axis, const AxisResize &a) {
    std::vector<bool> extrapolated;
    std::vector<Taps> weights = axisWeights(mode_, a, extrapolated);
    Type et = llvm::cast<RankedTensorType>(x.getType()).getElementType();
    int64_t rank = shape_.size();
    Value y = mode_.mode == "nearest" ? nearest(x, axis, weights) : interpolate(x, axis, a, weights, et);
    if (llvm::none_of(extrapolated, [](bool e) { return e; }))
      return y;
    std::vector<double> mask(extrapolated.begin(), extrapolated.end());
    Value where = n_.constant(alongAxis(mask, axis, rank, onnx::TensorProto_DataType_BOOL));
    double fill = n_.attrFloat("extrapolation_value", 0.0);
    Value value = llvm::isa<FloatType>(et) ? n_.scalar(fill, et) : n_.intScalar((int64_t)fill, et);
    return n_.emit1<WhereOp>({where, value, y});
  }

  /// Nearest: each output takes the one input position whose weight is 1.
  Value nearest(Value x, int64_t axis, const std::vector<Taps> &weights) {
    std::vector<int64_t> picks;
    for (const Taps &taps : weights)
      picks.push_back(std::max_element(taps.begin(), taps.end(), [](const auto &l, const auto &r) {
                        return l.second < r.second;
                      })->first);
    Value at = n_.constant(ConstTensor::fromInts(picks, {(int64_t)picks.size()}));
    return n_.emit1<GatherOp>({x, at}, {n_.namedI64("axis", axis)});
  }

  /// Linear and cubic: the axis moved last, times the [in, out] weights, moved back.
  Value interpolate(Value x, int64_t axis, const AxisResize &a, const std::vector<Taps> &weights, Type et) {
    if (!llvm::isa<FloatType>(et))
      n_.fail(mode_.mode + " resizing needs a floating-point input");
    if (a.in * a.out > kMaxMatrixElements)
      n_.fail("resizing an axis of " + std::to_string(a.in) + " to " + std::to_string(a.out) +
              " elements needs a larger interpolation matrix than cpc builds (2^25 elements)");
    int64_t rank = shape_.size();
    std::vector<double> matrix(a.in * a.out);
    for (int64_t y = 0; y < a.out; ++y)
      for (auto [i, w] : weights[y])
        matrix[i * a.out + y] += w;
    auto dtype = et.isF64() ? onnx::TensorProto_DataType_DOUBLE : onnx::TensorProto_DataType_FLOAT;
    Value m = n_.constant(ConstTensor::fromDoubles(matrix, {a.in, a.out}, dtype));
    if (!et.isF32() && !et.isF64())
      m = n_.emitTyped<CastOp>(RankedTensorType::get({a.in, a.out}, et), {m});
    if (axis == rank - 1)
      return n_.emit1<MatMulOp>({x, m});
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis)
        perm.push_back(d);
    perm.push_back(axis);
    std::vector<int64_t> back(rank);
    for (int64_t d = 0; d < rank; ++d)
      back[perm[d]] = d;
    Value moved = n_.emit1<MatMulOp>({n_.transpose(x, perm), m});
    return n_.transpose(moved, back);
  }

  NodeImporter &n_;
  std::vector<int64_t> shape_;
  ResizeMode mode_;
};

void importResize(NodeImporter &n) { ResizeImporter(n).run(); }

} // namespace

void registerResizeHandlers(HandlerRegistry &r) { r.add("Resize", importResize, 11, kNewestOpset); }

} // namespace cpc::onnx_import
