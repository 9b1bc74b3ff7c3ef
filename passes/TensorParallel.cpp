//===- TensorParallel.cpp - Megatron-style parameter splits over tp -------===//
//
// Tensor parallelism as sharding: this pass only decides how parameters are split over the
// `tp` mesh axis and writes those decisions as annotations (priority 1; --shard overrides are
// priority 0); propagation and partitioning (cpc-data-parallel runs both) derive every
// activation's layout, the split storage of parameters and their moments, and the collectives.
// The Megatron patterns are found from the graph: Linear -> activation -> Linear (an MLP), and
// a head-major fused qkv Linear -> ... -> Linear (attention; cpc-head-major-qkv runs first).
//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/Roles.h"
#include "passes/AutoSharding.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include <limits>
#include "llvm/Support/Regex.h"

namespace cpc {
#define GEN_PASS_DEF_CPCTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// A Linear: y = x W^T (+ b) with W [out, in] (torch's Linear, a transposed matmul operand) or
/// y = x W (+ b) with W [in, out] (how torch exports Linear on 3-D inputs: a pre-transposed
/// MatMul initializer), and b [out]. Records which weight dim holds the output features.
struct Linear {
  MatMulOp matmul;
  ParameterOp weight;
  int64_t outDim = 0; // the weight's output-feature dim; the other one holds input features
  ParameterOp bias;   // null without a bias
  Value output;       // the matmul, or the bias add
  int64_t inDim() const { return 1 - outDim; }
  int64_t outFeatures() { return weight.getType().getDimSize(outDim); }
};

/// `v` before any float-to-float casts (mixed precision reads a 16-bit copy of the f32 master
/// weight, and casts the f32 LayerNorm's result for a 16-bit matmul).
Value throughCasts(Value v) {
  while (auto cast = v.getDefiningOp<CastOp>()) {
    auto from = llvm::cast<RankedTensorType>(cast.getInput().getType()).getElementType();
    if (!llvm::isa<FloatType>(from) || !llvm::isa<FloatType>(getElementTypeOrSelf(cast.getType())))
      break;
    v = cast.getInput();
  }
  return v;
}

std::optional<Linear> matchLinear(MatMulOp mm) {
  auto weight = throughCasts(mm.getRhs()).getDefiningOp<ParameterOp>();
  if (!weight || mm.getTransposeLhs() || weight.getType().getRank() != 2 || weight.getShardingAttr())
    return std::nullopt;
  Linear l{mm, weight, mm.getTransposeRhs() ? 0 : 1, {}, mm.getResult()};
  for (Operation *user : mm->getUsers())
    if (auto add = llvm::dyn_cast<AddOp>(user)) {
      Value other = add.getLhs() == mm.getResult() ? add.getRhs() : add.getLhs();
      auto bias = throughCasts(other).getDefiningOp<ParameterOp>();
      if (bias && bias.getType().getRank() == 1 && bias.getType().getDimSize(0) == l.outFeatures()) {
        l.bias = bias;
        l.output = add.getResult();
        break;
      }
    }
  return l;
}

/// The layout of a parameter of `rank` dims with dim `dim` split over tp.
Layout splitOver(int64_t rank, int64_t dim, StringRef axis) {
  Layout l = Layout::whole(rank);
  l.dims[dim] = {axis.str()};
  return l;
}

/// Parses a --shard SPEC for a parameter of `shape`: one entry per dim, `-` or axes joined by `*`.
FailureOr<Layout> parseSpec(StringRef spec, ArrayRef<int64_t> shape, const Mesh &mesh, std::string &error) {
  StringRef body = spec.trim();
  if (body.consume_front("["))
    if (!body.consume_back("]"))
      return error = "unbalanced brackets", failure();
  // Dims are separated by ',' or ':' (pass options split lists at commas, so cpc compile hands
  // the pipeline ':').
  std::string separated = body.str();
  std::replace(separated.begin(), separated.end(), ':', ',');
  body = separated;
  SmallVector<StringRef> entries;
  body.split(entries, ',');
  if ((int64_t)entries.size() != (int64_t)shape.size())
    return error = "has " + std::to_string(entries.size()) + " entries for a parameter of rank " +
                   std::to_string(shape.size()),
           failure();
  Layout l = Layout::whole(shape.size());
  for (auto [d, entry] : llvm::enumerate(entries)) {
    entry = entry.trim();
    if (entry == "-" || entry.empty())
      continue;
    SmallVector<StringRef> axes;
    entry.split(axes, '*');
    for (StringRef a : axes) {
      if (!mesh.hasAxis(a.trim()))
        return error = "names '" + a.trim().str() + "', which is not a mesh axis (dp, tp)", failure();
      l.dims[d].push_back(a.trim().str());
    }
    if (shape[d] % mesh.parts(l.dims[d]))
      return error = "splits dim " + std::to_string(d) + " of size " + std::to_string(shape[d]) + " into " +
                     std::to_string(mesh.parts(l.dims[d])) + " blocks",
             failure();
  }
  return l;
}

struct CpcTensorParallelPass : cpc::impl::CpcTensorParallelBase<CpcTensorParallelPass> {
  using CpcTensorParallelBase::CpcTensorParallelBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (dp < 1 || tp < 1) {
      module.emitError("dp and tp must be >= 1");
      return signalPassFailure();
    }
    FailureOr<SmallVector<MeshAxisSpec>> axes = meshAxes();
    if (failed(axes))
      return signalPassFailure();
    FailureOr<MeshOp> meshOp = getOrCreateMesh(module, *axes);
    if (failed(meshOp))
      return signalPassFailure();
    Mesh mesh(*meshOp);
    FailureOr<SmallVector<func::FuncOp>> funcs =
        functionsOrPhases(module, {}, kShardedPhases);
    if (failed(funcs))
      return signalPassFailure();
    // Decisions by parameter name: every function reads its own cpc.parameter ops.
    llvm::StringMap<std::pair<Layout, int64_t>> decisions; // layout, priority
    if (mode == TensorParallelMode::ThreeD)
      for (func::FuncOp func : *funcs)
        seed3D(func, mesh, decisions);
    else if (mode != TensorParallelMode::OneD)
      for (func::FuncOp func : *funcs)
        seedSumma(func, mesh, decisions);
    else if (search && tp > 1) {
      if (failed(searchLayouts(*funcs, mesh, decisions)))
        return signalPassFailure();
    } else if (megatron && tp > 1)
      for (func::FuncOp func : *funcs) {
        findMlps(func, mesh, decisions);
        findAttention(func, decisions);
        findEmbeddings(func, decisions);
      }
    if (failed(applyOverrides(*funcs, mesh, decisions)))
      return signalPassFailure();
    for (func::FuncOp func : *funcs)
      func.walk([&](ParameterOp param) {
        auto it = decisions.find(param.getName());
        if (it == decisions.end())
          return;
        ShardingAttr attr = it->second.first.toAttr(mesh.ref());
        attr = ShardingAttr::get(attr.getContext(), attr.getMesh(), attr.getDimAxes(), attr.getPartialAxes(),
                                 attr.getReduction(), it->second.second);
        param->setAttr(kResultShardingsAttr, ArrayAttr::get(&getContext(), {attr}));
      });
    readThroughShards(*funcs, mesh);
  }

  /// The mesh of the mode: dp x tp (1d), dp x tp_row x tp_col (2d, q x q),
  /// dp x tp_dep x tp_row x tp_col (2.5d, d x q x q) or dp x tp_wt x tp_in x tp_out (3d, q^3).
  FailureOr<SmallVector<MeshAxisSpec>> meshAxes() {
    ModuleOp module = getOperation();
    if (mode == TensorParallelMode::OneD)
      return SmallVector<MeshAxisSpec>{{"dp", dp}, {"tp", tp}};
    int64_t d = mode == TensorParallelMode::TwoHalfD ? (int64_t)depth : 1, q = tensorParallelSide(mode, tp, d);
    if (q == 0)
      return module.emitError("tensor-parallel mode ")
                 << stringifyTensorParallelMode(mode) << " needs tp = "
                 << (mode == TensorParallelMode::ThreeD ? "q * q * q" : d > 1 ? "depth * q * q" : "q * q")
                 << " ranks (q >= 2), got tp=" << (int64_t)tp << (d > 1 ? " and depth " + std::to_string(d) : std::string()),
             failure();
    if (mode == TensorParallelMode::ThreeD)
      return SmallVector<MeshAxisSpec>{{"dp", dp},
                                       {kTpWeightAxis, q, MeshAxisRole::TensorWeight},
                                       {kTpInputAxis, q, MeshAxisRole::TensorInput},
                                       {kTpOutputAxis, q, MeshAxisRole::TensorOutput}};
    SmallVector<MeshAxisSpec> axes{{"dp", dp}};
    if (mode == TensorParallelMode::TwoHalfD)
      axes.push_back({kTpDepthAxis, d, MeshAxisRole::TensorDepth});
    axes.push_back({kTpRowAxis, q, MeshAxisRole::TensorRow});
    axes.push_back({kTpColAxis, q, MeshAxisRole::TensorCol});
    return axes;
  }

  /// 2D / 2.5D (Optimus, Tesseract): every Linear's weight is split [in over tp_row, out over
  /// tp_col], its bias over tp_col, and its result [batch over the batch axes, ..., out over
  /// tp_col]: activations are [b/q (row), ..., h/q (column)] (also split over depth and dp) and
  /// cpc-partition computes the matmuls by SUMMA. A weight is placed by the first matmul that
  /// reads it (the forward Linear; its gradients' matmuls follow).
  void seedSumma(func::FuncOp func, const Mesh &mesh, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    int64_t q = mesh.parts({kTpRowAxis.str()});
    MeshAxes batch = batchAxes(mesh);
    llvm::StringSet<> placed;
    func.walk([&](MatMulOp mm) {
      auto weight = throughCasts(mm.getRhs()).getDefiningOp<ParameterOp>();
      if (!weight || weight.getType().getRank() != 2 || weight.getShardingAttr() ||
          !placed.insert(weight.getName()).second)
        return;
      int64_t in = mm.getTransposeRhs() ? 1 : 0, out = 1 - in;
      ArrayRef<int64_t> shape = weight.getType().getShape();
      if (shape[in] % q || shape[out] % q) {
        mlir::emitRemark(mm.getLoc()) << "the Linear of '" << weight.getName() << "' stays replicated: its "
                                      << shape[in] << "x" << shape[out] << " weight does not split into " << q << "x"
                                      << q << " blocks";
        return;
      }
      Layout w = Layout::whole(2);
      w.dims[in] = {kTpRowAxis.str()};
      w.dims[out] = {kTpColAxis.str()};
      decisions[weight.getName()] = {w, 1};
      if (std::optional<Linear> linear = matchLinear(mm); linear && linear->bias)
        storeFeatureVector(linear->bias, q, decisions);
      auto type = llvm::cast<RankedTensorType>(mm.getType());
      if (type.getRank() < 2 || type.getDimSize(0) % mesh.parts(batch) || mm->getAttr(kResultShardingsAttr))
        return;
      Layout result = Layout::whole(type.getRank());
      result.dims[0] = batch;
      result.dims.back() = {kTpColAxis.str()};
      mm->setAttr(kResultShardingsAttr, ArrayAttr::get(mm.getContext(), {result.toAttr(mesh.ref(), 1)}));
    });
    // LayerNorm scales and shifts (expanded: a mul and an add of the normalized features).
    func.walk([&](ParameterOp param) {
      if (!decisions.count(param.getName()) && scaledFeatures(param))
        storeFeatureVector(param, q, decisions);
    });
  }

  /// The activation whose features a 1-D parameter scales or shifts (a LayerNorm's scale and
  /// bias, expanded into a mul and an add; through casts), or null: at its first such use in
  /// program order (the forward's, not a gradient's).
  static Value scaledFeatures(ParameterOp param) {
    if (param.getType().getRank() != 1)
      return {};
    int64_t features = param.getType().getDimSize(0);
    Operation *first = nullptr;
    Value found;
    for (Operation *user : param->getUsers()) {
      Operation *op = user;
      while (llvm::isa<CastOp>(op) && op->hasOneUse())
        op = *op->getUsers().begin();
      if (!llvm::isa<MulOp, AddOp>(op) || (first && first->isBeforeInBlock(op)))
        continue;
      for (Value other : op->getOperands()) {
        auto type = llvm::cast<RankedTensorType>(other.getType());
        if (type.getRank() >= 2 && type.getShape().back() == features) {
          first = op;
          found = other;
          break;
        }
      }
    }
    return found;
  }

  /// Colossal-AI's 2D layers store a bias or a LayerNorm parameter [k/q^2]: split over tp_col
  /// then tp_row, read over tp_col (what the activations' features are) through a cpc.shard
  /// before every op but its update (readThroughShards), so the update and the moments work on
  /// the q^2 blocks. Features that only split q ways are read and stored over tp_col.
  void storeFeatureVector(ParameterOp param, int64_t q, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    int64_t features = param.getType().getDimSize(0);
    if (features % q)
      return;
    Layout stored = splitOver(1, 0, kTpColAxis);
    if (features % (q * q) == 0) {
      stored.dims[0].push_back(kTpRowAxis.str());
      readOverColumns_.insert(param.getName());
    }
    decisions[param.getName()] = {stored, 1};
  }

  /// The parameters stored over (tp_col, tp_row) are read over tp_col: a cpc.shard before each
  /// op that uses them, their update excepted.
  void readThroughShards(ArrayRef<func::FuncOp> funcs, const Mesh &mesh) {
    ShardingAttr read = splitOver(1, 0, kTpColAxis).toAttr(mesh.ref(), 1);
    for (func::FuncOp func : funcs)
      func.walk([&](ParameterOp param) {
        if (!readOverColumns_.contains(param.getName()))
          return;
        SmallVector<Operation *> users;
        for (Operation *user : param->getUsers())
          if (!isParameterUpdate(user, param.getName()) && !llvm::is_contained(users, user))
            users.push_back(user);
        for (Operation *user : users) {
          OpBuilder b(user);
          auto shard = b.create<ShardOp>(user->getLoc(), param.getType(), param.getResult(), read);
          user->replaceUsesOfWith(param.getResult(), shard.getResult());
        }
      });
  }

  llvm::StringSet<> readOverColumns_; // 2D parameters stored over (tp_col, tp_row)

  /// 3D (Colossal-AI's 3D layers): a Linear whose input rows are split over (tp_wt, x) and its
  /// features over y, where {x, y} = {tp_in, tp_out}, gets its weight split [in over (y, tp_wt),
  /// out over x], its bias over x, and its result [rows over (tp_wt, y), ..., out over x]: the
  /// next Linear finds x and y swapped. The batch starts as rows over (tp_wt, tp_in); which of
  /// the two a Linear's input has is followed through the forward ops in program order (each
  /// Linear flips it; other ops pass on their first operand's). A weight is placed by the first
  /// matmul that reads it (the forward Linear).
  void seed3D(func::FuncOp func, const Mesh &mesh, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    int64_t q = mesh.parts({kTpWeightAxis.str()});
    MeshAxes batch = batchAxes(mesh); // dp, tp_wt, tp_in
    llvm::DenseMap<Value, bool> swapped; // the value's rows are over (tp_wt, tp_out), features over tp_in
    llvm::StringSet<> placed;
    func.walk([&](Operation *op) {
      bool in = llvm::any_of(op->getOperands(), [&](Value v) { return swapped.lookup(v); });
      auto mm = llvm::dyn_cast<MatMulOp>(op);
      auto weight = mm ? throughCasts(mm.getRhs()).getDefiningOp<ParameterOp>() : ParameterOp();
      if (!weight || weight.getType().getRank() != 2 || weight.getShardingAttr() ||
          !placed.insert(weight.getName()).second) {
        for (Value r : op->getResults())
          swapped[r] = in;
        return;
      }
      in = swapped.lookup(mm.getLhs());
      swapped[mm.getResult()] = !in;
      std::string x = (in ? kTpOutputAxis : kTpInputAxis).str(), y = (in ? kTpInputAxis : kTpOutputAxis).str();
      int64_t inDim = mm.getTransposeRhs() ? 1 : 0, outDim = 1 - inDim;
      ArrayRef<int64_t> shape = weight.getType().getShape();
      if (shape[inDim] % (q * q) || shape[outDim] % q) {
        mlir::emitRemark(mm.getLoc()) << "the Linear of '" << weight.getName() << "' stays replicated: its "
                                      << shape[inDim] << "x" << shape[outDim] << " weight does not split into "
                                      << q * q << "x" << q << " blocks";
        return;
      }
      Layout w = Layout::whole(2);
      w.dims[inDim] = {y, kTpWeightAxis.str()};
      w.dims[outDim] = {x};
      decisions[weight.getName()] = {w, 1};
      if (std::optional<Linear> linear = matchLinear(mm); linear && linear->bias)
        decisions[linear->bias.getName()] = {splitOver(1, 0, x), 1};
      auto type = llvm::cast<RankedTensorType>(mm.getType());
      MeshAxes rows = batch; // (dp,) tp_wt, tp_in -> (dp,) tp_wt, y
      llvm::erase_if(rows, [&](const std::string &a) { return a == kTpInputAxis; });
      rows.push_back(y);
      if (type.getRank() < 2 || type.getDimSize(0) % mesh.parts(rows) || mm->getAttr(kResultShardingsAttr))
        return;
      Layout result = Layout::whole(type.getRank());
      result.dims[0] = rows;
      result.dims.back() = {x};
      mm->setAttr(kResultShardingsAttr, ArrayAttr::get(mm.getContext(), {result.toAttr(mesh.ref(), 1)}));
    });
    // LayerNorm scales and shifts: over the features' axis of the activation they scale (tp_out,
    // or tp_in where it has them swapped), as Linear biases are.
    func.walk([&](ParameterOp param) {
      Value features = decisions.count(param.getName()) ? Value() : scaledFeatures(param);
      if (features && param.getType().getDimSize(0) % q == 0)
        decisions[param.getName()] = {splitOver(1, 0, swapped.lookup(features) ? kTpInputAxis : kTpOutputAxis), 1};
    });
  }

  /// Linear -> activation -> Linear: the first column-parallel, the second row-parallel.
  void findMlps(func::FuncOp func, const Mesh &mesh, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    // Backward reads the forward's values too (gelu_grad, weight gradients): the pattern is
    // looked for among all users, not only single ones.
    func.walk([&](MatMulOp mm) {
      std::optional<Linear> first = matchLinear(mm);
      if (!first)
        return;
      std::optional<Linear> second;
      for (Operation *act : first->output.getUsers()) {
        if (!llvm::isa<GeluOp, ReluOp, TanhOp, SigmoidOp>(act))
          continue;
        for (Operation *user : act->getUsers())
          if (auto mm2 = llvm::dyn_cast<MatMulOp>(user); mm2 && mm2.getLhs() == act->getResult(0))
            if ((second = matchLinear(mm2)))
              break;
        if (second)
          break;
      }
      if (!second)
        return;
      int64_t hidden = first->outFeatures();
      if (hidden % tp) {
        if (!decisions.count(first->weight.getName()))
          mlir::emitRemark(mm.getLoc()) << "the MLP of '" << first->weight.getName() << "' stays replicated: its "
                                        << hidden << " hidden features do not split over tp=" << (int64_t)tp;
        decisions[first->weight.getName()] = {Layout::whole(2), 1};
        return;
      }
      splitPair(*first, *second, decisions);
      if (sp)
        splitSequence(mm.getLhs());
    });
    dropWholeDecisions(decisions); // indivisible MLPs: notes only
  }

  /// Megatron's pair: `column` split by output features (weight and bias), `row` by input
  /// features (its bias stays whole: it is added once, after the all-reduce).
  static void splitPair(Linear &column, Linear &row, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    decisions[column.weight.getName()] = {splitOver(2, column.outDim, "tp"), 1};
    if (column.bias)
      decisions[column.bias.getName()] = {splitOver(1, 0, "tp"), 1};
    decisions[row.weight.getName()] = {splitOver(2, row.inDim(), "tp"), 1};
  }

  /// Attention: a fused qkv Linear kept in head-major order (cpc-head-major-qkv marked its
  /// parameters) is column-parallel, each rank holding whole heads of q, k and v; the first
  /// Linear its heads reach (in program order: the output projection, before anything of
  /// backward) is row-parallel.
  void findAttention(func::FuncOp func, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    llvm::DenseMap<Operation *, int64_t> position;
    func.walk([&](Operation *op) { position[op] = position.size(); });
    func.walk([&](MatMulOp mm) {
      std::optional<Linear> qkv = matchLinear(mm);
      if (!qkv || !qkv->weight.getStoredPermAttr())
        return;
      // Everything computed from the heads, in program order.
      llvm::SetVector<Operation *> reached;
      SmallVector<Value> work = {qkv->output};
      while (!work.empty()) {
        Value v = work.pop_back_val();
        for (Operation *user : v.getUsers())
          if (reached.insert(user))
            llvm::append_range(work, user->getResults());
      }
      std::optional<Linear> proj;
      int64_t first = std::numeric_limits<int64_t>::max();
      for (Operation *op : reached)
        if (auto other = llvm::dyn_cast<MatMulOp>(op); other && position[op] < first)
          if (std::optional<Linear> l = matchLinear(other); l && l->weight != qkv->weight) {
            proj = l;
            first = position[op];
          }
      int64_t features = qkv->outFeatures() / 3;
      if (!proj || proj->weight.getType().getDimSize(proj->inDim()) != features)
        return;
      splitPair(*qkv, *proj, decisions);
      if (sp)
        splitSequence(mm.getLhs());
    });
  }

  /// Vocab parallelism (Megatron): a token embedding, a table gathered along its rows at
  /// integer inputs, is split by rows over tp. Each rank looks up the tokens in its rows (zeros
  /// for the others) and the lookups are all-reduced; an output head tied to the table (the same
  /// parameter) then yields logits split over the vocabulary, and the cross-entropy's max, sum
  /// of exponentials and target logit are all-reduced partial values (propagation does that
  /// part: the gather and reduction rules).
  void findEmbeddings(func::FuncOp func, llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    func.walk([&](GatherOp gather) {
      auto table = throughCasts(gather.getData()).getDefiningOp<ParameterOp>();
      auto ids = llvm::dyn_cast<BlockArgument>(gather.getIndices());
      if (!table || !ids || gather.getAxis() != 0 || table.getType().getRank() != 2 || table.getShardingAttr() ||
          decisions.count(table.getName()))
        return;
      int64_t rows = table.getType().getDimSize(0);
      if (rows % tp) {
        mlir::emitRemark(gather.getLoc()) << "the embedding '" << table.getName() << "' stays replicated: its "
                                          << rows << " rows do not split over tp=" << (int64_t)tp;
        decisions[table.getName()] = {Layout::whole(2), 1};
        return;
      }
      decisions[table.getName()] = {splitOver(2, 0, "tp"), 1};
    });
    dropWholeDecisions(decisions); // indivisible tables: notes only
  }

  /// Whole decisions only keep a pattern from choosing a parameter twice within one function
  /// (and from noting it twice); they are no splits.
  static void dropWholeDecisions(llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    for (auto it = decisions.begin(); it != decisions.end();) {
      auto next = std::next(it);
      if (!it->second.first.isSplit())
        decisions.erase(it);
      it = next;
    }
  }

  /// Sequence parallelism: the LayerNorm that feeds a column-parallel Linear is split along the
  /// sequence over tp (priority 2, after the weights), and propagation carries the split through
  /// the residual stream (adds, norms) between blocks. Where the tokens do not divide by tp the
  /// block keeps a whole sequence, with a note.
  void splitSequence(Value input) {
    auto norm = throughCasts(input).getDefiningOp<LayerNormOp>();
    auto type = llvm::cast<RankedTensorType>(input.getType());
    if (!norm || type.getRank() < 3 || norm->getAttr(kResultShardingsAttr))
      return;
    int64_t seq = type.getRank() - 2;
    if (type.getDimSize(seq) % tp) {
      mlir::emitRemark(norm.getLoc()) << "sequence parallelism skips this block: its " << type.getDimSize(seq)
                                      << " tokens do not split over tp=" << (int64_t)tp;
      return;
    }
    Layout l = Layout::whole(type.getRank());
    l.dims[seq] = {"tp"};
    ShardingAttr attr = l.toAttr(FlatSymbolRefAttr::get(norm.getContext(), "mesh"));
    attr = ShardingAttr::get(attr.getContext(), attr.getMesh(), attr.getDimAxes(), attr.getPartialAxes(),
                             attr.getReduction(), 2);
    norm->setAttr(kResultShardingsAttr, ArrayAttr::get(norm.getContext(), {attr}));
  }

  /// 1D: the layout by search (AutoSharding.h), function by function; a variable keeps the
  /// layout the first function that reads it chose, and --shard overrides are fixed choices.
  LogicalResult searchLayouts(ArrayRef<func::FuncOp> funcs, const Mesh &mesh,
                              llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    llvm::StringMap<std::pair<Layout, int64_t>> overrides;
    if (failed(applyOverrides(funcs, mesh, overrides)))
      return failure();
    llvm::StringMap<Layout> decided;
    for (auto &entry : overrides)
      decided[entry.getKey()] = entry.getValue().first;
    ShardingSearchOptions options;
    options.variableBudget = memoryBudget;
    FailureOr<CostProfile> costs = loadCostProfile(getOperation(), profile);
    if (failed(costs))
      return failure();
    options.profile = *costs;
    options.link = costs->linkOf("all_reduce", mesh.parts({options.axis}));
    for (func::FuncOp func : funcs) {
      FailureOr<ShardingSearchResult> found = searchShardingLayout(func, mesh, options, decided);
      if (failed(found))
        return failure();
      llvm::StringSet<> parameters; // states follow what they are combined with
      func.walk([&](ParameterOp read) { parameters.insert(read.getName()); });
      for (auto &entry : found->variables) {
        decided.try_emplace(entry.getKey(), entry.getValue());
        if (entry.getValue().isSplit() && parameters.contains(entry.getKey()))
          decisions.try_emplace(entry.getKey(), entry.getValue(), 1);
      }
    }
    return success();
  }

  LogicalResult applyOverrides(ArrayRef<func::FuncOp> funcs, const Mesh &mesh,
                               llvm::StringMap<std::pair<Layout, int64_t>> &decisions) {
    for (const std::string &entry : shard) {
      size_t eq = entry.rfind('=');
      if (eq == std::string::npos || eq == 0)
        return getOperation().emitError("--shard '") << entry << "': expected REGEX=SPEC";
      std::string pattern = "^(" + entry.substr(0, eq) + ")$", problem;
      llvm::Regex re(pattern);
      if (!re.isValid(problem))
        return getOperation().emitError("--shard '") << entry << "': bad regex: " << problem;
      bool matched = false;
      for (func::FuncOp func : funcs) {
        WalkResult walk = func.walk([&](ParameterOp param) {
          if (!re.match(param.getName()))
            return WalkResult::advance();
          matched = true;
          std::string error;
          FailureOr<Layout> l = parseSpec(StringRef(entry).substr(eq + 1), param.getType().getShape(), mesh, error);
          if (failed(l)) {
            param.emitError("--shard '") << entry << "' for '" << param.getName() << "': the spec " << error;
            return WalkResult::interrupt();
          }
          decisions[param.getName()] = {*l, 0};
          readOverColumns_.erase(param.getName()); // stored and read as the rule says
          return WalkResult::advance();
        });
        if (walk.wasInterrupted())
          return failure();
      }
      if (!matched)
        return getOperation().emitError("--shard '") << entry << "' matches no parameter";
    }
    return success();
  }
};

} // namespace

int64_t cpc::tensorParallelSide(TensorParallelMode mode, int64_t tp, int64_t depth) {
  if (mode == TensorParallelMode::OneD)
    return tp;
  int64_t power = mode == TensorParallelMode::ThreeD ? 3 : 2, factor = mode == TensorParallelMode::TwoHalfD ? depth : 1,
          q = 1;
  auto ranks = [&](int64_t side) { return (power == 3 ? side * side * side : side * side) * factor; };
  if (factor < 1)
    return 0;
  while (ranks(q + 1) <= tp)
    ++q;
  return q >= 2 && ranks(q) == tp ? q : 0;
}
