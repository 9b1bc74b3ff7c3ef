//===- Reduction.cpp - ONNX Reduce* -> cpc reductions ---------------------===//
#include "frontends/onnx/NodeImporter.h"

using namespace mlir;

namespace cpc::onnx_import {
namespace {

enum class Fold { None, Sum, Prod };

/// Reduce ops: axes are an attribute before opset 18 except for ReduceSum (an input from 13).
template <typename OpT>
Handler reduction(bool axesAsInput, Fold fold) {
  return [axesAsInput, fold](NodeImporter &n) {
    std::vector<int64_t> in = n.inputShape(0);
    int64_t rank = in.size();
    std::vector<int64_t> axes;
    if (axesAsInput) {
      if (n.hasInput(1))
        axes = n.requireConstInput(1, "axes").toInts();
    } else {
      axes = n.attrInts("axes", std::vector<int64_t>{});
    }
    bool keepdims = n.attrInt("keepdims", 1) != 0;
    if (axes.empty()) {
      if (n.attrInt("noop_with_empty_axes", 0)) {
        if (const ConstTensor *c = n.constInput(0))
          n.setOutput(0, *c);
        else
          n.setOutput(0, n.input(0));
        return;
      }
      for (int64_t d = 0; d < rank; ++d)
        axes.push_back(d);
    }
    for (int64_t &a : axes)
      a = n.normalizeAxis(a, rank);
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    if (fold != Fold::None && n.constInput(0)) {
      n.setOutput(0, n.constInput(0)->reduce(axes, keepdims, fold == Fold::Prod));
      return;
    }
    if (rank == 0) {
      n.setOutput(0, n.input(0));
      return;
    }
    n.setOutput(0, n.emit1<OpT>({n.input(0)}, {n.namedI64s("axes", axes), n.namedBool("keepdims", keepdims)}));
  };
}

/// GlobalAveragePool / GlobalMaxPool: the reduction over every spatial dim (2..), kept as 1s.
template <typename OpT>
void globalPool(NodeImporter &n) {
  int64_t rank = n.inputShape(0).size();
  if (rank < 3)
    n.fail("input must be N x C x spatial..., got rank " + std::to_string(rank));
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  n.setOutput(0, n.emit1<OpT>({n.input(0)}, {n.namedI64s("axes", axes), n.namedBool("keepdims", true)}));
}

} // namespace

void registerReductionHandlers(HandlerRegistry &r) {
  r.add("ReduceSum", reduction<ReduceSumOp>(true, Fold::Sum), 13);
  r.add("ReduceMean", reduction<ReduceMeanOp>(false, Fold::None), 1, 17);
  r.add("ReduceMax", reduction<ReduceMaxOp>(false, Fold::None), 1, 17);
  r.add("ReduceMin", reduction<ReduceMinOp>(false, Fold::None), 1, 17);
  r.add("ReduceProd", reduction<ReduceProdOp>(false, Fold::Prod), 1, 17);
  // Opset 18 moved their axes from an attribute to an input (ReduceMax/Min-20 add bool types).
  r.add("ReduceMean", reduction<ReduceMeanOp>(true, Fold::None), 18, kNewestOpset);
  r.add("ReduceMax", reduction<ReduceMaxOp>(true, Fold::None), 18, kNewestOpset);
  r.add("ReduceMin", reduction<ReduceMinOp>(true, Fold::None), 18, kNewestOpset);
  r.add("ReduceProd", reduction<ReduceProdOp>(true, Fold::Prod), 18, kNewestOpset);
  r.add("GlobalAveragePool", globalPool<ReduceMeanOp>, 1, kNewestOpset);
  r.add("GlobalMaxPool", globalPool<ReduceMaxOp>, 1, kNewestOpset);
}

} // namespace cpc::onnx_import
