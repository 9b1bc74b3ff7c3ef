//===- UpdatePlacement.cpp ------------------------------------------------===//
#include "passes/UpdatePlacement.h"

using namespace mlir;

namespace cpc {

std::pair<Layout, int64_t> parameterReadLayout(ParameterOp param) {
  if (auto list = param->getAttrOfType<ArrayAttr>(kResultShardingsAttr)) {
    auto attr = llvm::cast<ShardingAttr>(list[0]);
    return {Layout::fromAttr(attr), attr.getPriority()};
  }
  return {Layout::whole(param.getType().getRank()), 0};
}

std::optional<Layout> updateSplit(AdamWOp update, StringRef axis, int64_t ranks) {
  auto param = update.getParam().getDefiningOp<ParameterOp>();
  if (!param)
    return std::nullopt;
  Layout read = parameterReadLayout(param).first;
  RankedTensorType type = param.getType();
  if (read.uses(axis))
    return std::nullopt;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (read.dims[d].empty() && type.getDimSize(d) % ranks == 0) {
      Layout split = read;
      split.dims[d] = {axis.str()};
      return split;
    }
  return std::nullopt;
}

Value scaledOperand(Value v) {
  auto mul = v.getDefiningOp<MulOp>();
  auto rank = [](Value x) { return llvm::cast<RankedTensorType>(x.getType()).getRank(); };
  if (!mul || rank(v) == 0)
    return {};
  if (rank(mul.getRhs()) == 0 && rank(mul.getLhs()) > 0)
    return mul.getLhs();
  if (rank(mul.getLhs()) == 0 && rank(mul.getRhs()) > 0)
    return mul.getRhs();
  return {};
}

SmallVector<MulOp> seedNormSquares(AdamWOp update, const Layout &layout, const Mesh &mesh) {
  SmallVector<MulOp> squares;
  for (Value grad = update.getGrad(); grad && squares.empty(); grad = scaledOperand(grad))
    for (Operation *user : grad.getUsers())
      if (auto square = llvm::dyn_cast<MulOp>(user))
        if (square.getLhs() == grad && square.getRhs() == grad && !llvm::is_contained(squares, square)) {
          square->setAttr(kResultShardingsAttr,
                          ArrayAttr::get(update.getContext(), {layout.toAttr(mesh.ref(), kZeroPriority)}));
          squares.push_back(square);
        }
  return squares;
}

} // namespace cpc
