//===- AutoSharding.cpp - a mesh axis's layout chosen by search -----------===//
#include "passes/AutoSharding.h"

#include "dialects/cpc/Cost.h"
#include "dialects/cpc/Roles.h"
#include "passes/IlpSolver.h"
#include "passes/RepeatedBlocks.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"

#include <map>
#include <set>
#include <tuple>

using namespace mlir;

namespace cpc {
namespace {

/// Resharding that no collectives can do (a whole value wanted as a partial sum) costs this
/// many seconds: never chosen while another way exists.
constexpr double kInfeasibleSeconds = 1e3;

/// Repeated blocks are tied by neighbourhoods this many hops deep (RepeatedBlocks.h): deep
/// enough that a block's first and last ops see whether they border the embedding or the head.
constexpr int kTieRounds = 3;

/// The program's costs are in microseconds: the solver's tolerances (about 1e-7 absolute) would
/// take the microsecond differences between strategies, in seconds, for ties.
constexpr double kProgramUnitsPerSecond = 1e6;

/// One way to run an op, or to store a variable, with the axis on one factor (or dim) or none.
struct Strategy {
  int64_t factor = -1; // an op's factor, a variable's dim; -1: the axis splits nothing
  SmallVector<Layout> operands, results;
  double seconds = 0; // compute, plus resharding from producers that offer one choice
};

/// An op, or a variable (its reads and assigns share the one stored layout).
struct Node {
  Operation *op = nullptr;
  std::string variable;
  RankedTensorType type; // a variable's
  std::vector<Strategy> strategies;
  int64_t chosen = 0;
  std::vector<int> programVariables; // one per strategy when there are several
};

/// A value's producer (node and result slot) or, with node -1, a function argument.
struct Source {
  int node = -1;
  unsigned slot = 0;
};

/// A use of a value produced by a node with several strategies by one with several.
struct Edge {
  int producer, consumer;
  unsigned result, operand;
  Value value;
};

int64_t elementBytes(Value v) {
  return std::max<int64_t>(1, llvm::cast<RankedTensorType>(v.getType()).getElementTypeBitWidth() / 8);
}

bool isRankedTensor(Value v) { return llvm::isa<RankedTensorType>(v.getType()); }

/// Ops that only view their one operand (reshape, transpose, cast, copy): a parameter read
/// through them is still the parameter for the rules below.
bool isView(Operation *op) {
  if (op->getNumOperands() != 1 || op->getNumResults() != 1 || !isRankedTensor(op->getOperand(0)) ||
      !isRankedTensor(op->getResult(0)))
    return false;
  auto in = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = llvm::cast<RankedTensorType>(op->getResult(0).getType());
  return in.getNumElements() == out.getNumElements();
}

/// Whether operand `index` is contracted: a reduction factor of the rule lies in it.
bool contracts(const ShardingRule &rule, unsigned index) {
  if (index >= rule.operands.size())
    return false;
  for (const ShardingRule::DimFactors &dim : rule.operands[index])
    for (int64_t f : dim)
      if (rule.factors[f].kind == FactorKind::Reduction)
        return true;
  return false;
}

bool contracts(Operation *op, unsigned index) {
  std::optional<ShardingRule> rule = getShardingRule(op);
  return rule && contracts(*rule, index);
}

/// Whether `v` (through views) is contracted by some user: a weight, not a bias or a table added.
bool feedsContraction(Value v) {
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value next = work.pop_back_val();
    for (OpOperand &use : next.getUses()) {
      if (contracts(use.getOwner(), use.getOperandNumber()))
        return true;
      if (isView(use.getOwner()))
        work.push_back(use.getOwner()->getResult(0));
    }
  }
  return false;
}

/// The parameter `v` reads through views, or null.
ParameterOp readParameter(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto read = llvm::dyn_cast<ParameterOp>(def))
      return read;
    if (!isView(def))
      return {};
    v = def->getOperand(0);
  }
  return {};
}

class ShardingSearch {
public:
  ShardingSearch(func::FuncOp func, const Mesh &mesh, const ShardingSearchOptions &options,
                 const llvm::StringMap<Layout> &decided)
      : func_(func), mesh_(mesh), options_(options), decided_(decided), size_(mesh.parts({options.axis})) {}

  FailureOr<ShardingSearchResult> run() {
    if (failed(computeBatchLayouts()))
      return failure();
    buildNodes();
    buildEdges();
    if (failed(solve()))
      return failure();
    accountChosen();
    apply();
    for (const Node &node : nodes_)
      result_.strategies += node.strategies.size();
    result_.nodes = nodes_.size();
    recordPrediction();
    return result_;
  }

private:
  /// What the data-parallel propagation will give each value (the batch dims over dp): it runs
  /// on a copy of the function, whose layouts are read back in program order.
  LogicalResult computeBatchLayouts() {
    if (batchAxes(mesh_).empty())
      return success();
    OpBuilder b(func_);
    auto copy = llvm::cast<func::FuncOp>(b.clone(*func_));
    copy.setSymName((func_.getSymName() + ".batch_layouts").str());
    seedBatch(copy, mesh_);
    LogicalResult propagated = propagateShardings(copy, mesh_);
    if (succeeded(propagated)) {
      for (unsigned i = 0; i < copy.getNumArguments(); ++i)
        if (auto attr = copy.getArgAttrOfType<ShardingAttr>(i, kArgShardingAttr))
          batch_[func_.getArgument(i)] = dimsOnly(Layout::fromAttr(attr));
      for (auto [original, copied] : llvm::zip(func_.getBody().front(), copy.getBody().front()))
        if (auto list = copied.getAttrOfType<ArrayAttr>(kResultShardingsAttr))
          for (auto [r, attr] : llvm::zip(original.getResults(), list))
            batch_[r] = dimsOnly(Layout::fromAttr(llvm::cast<ShardingAttr>(attr)));
    }
    copy.erase();
    return propagated;
  }

  static Layout dimsOnly(Layout l) {
    l.clearPartial();
    return l;
  }

  Layout batchOf(Value v) const {
    auto it = batch_.find(v);
    return it != batch_.end() ? it->second : Layout::whole(llvm::cast<RankedTensorType>(v.getType()).getRank());
  }

  void buildNodes() {
    func_.walk([&](ParameterOp read) {
      if (read.getTrainable() && read.getType().getRank() >= 2 && feedsContraction(read.getResult()))
        weights_.insert(read.getName());
    });
    for (Operation &op : func_.getBody().front()) {
      if (llvm::isa<func::ReturnOp>(op))
        continue;
      if (auto read = llvm::dyn_cast<ParameterOp>(op)) {
        sources_[read.getResult()] = {variableNode(read.getName(), read.getType()), 0};
        continue;
      }
      if (auto read = llvm::dyn_cast<StateOp>(op)) {
        sources_[read.getResult()] = {variableNode(read.getName(), read.getType()), 0};
        continue;
      }
      if (auto assign = llvm::dyn_cast<AssignOp>(op)) {
        auto type = llvm::cast<RankedTensorType>(assign.getValue().getType());
        assigns_.push_back({assign, variableNode(assign.getName(), type)});
        continue;
      }
      if (llvm::none_of(op.getResultTypes(), [](Type t) { return llvm::isa<RankedTensorType>(t); }))
        continue;
      int n = opNode(&op);
      for (OpResult r : op.getResults())
        sources_[r] = {n, r.getResultNumber()};
    }
  }

  /// A variable's node: stored whole or split on one dim the axis divides (a weight: split,
  /// where some dim divides); one layout when an earlier function or an override decided it.
  int variableNode(StringRef name, RankedTensorType type) {
    auto [it, added] = variableNodes_.try_emplace(name, (int)nodes_.size());
    if (!added)
      return it->second;
    Node node;
    node.variable = name.str();
    node.type = type;
    auto stored = [&](Layout l, int64_t dim) {
      Strategy s;
      s.factor = dim;
      s.operands = {l};
      s.results = {l};
      node.strategies.push_back(s);
    };
    if (auto d = decided_.find(name); d != decided_.end()) {
      stored(d->second, -1);
    } else {
      stored(Layout::whole(type.getRank()), -1);
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (type.getDimSize(d) % size_ == 0) {
          Layout l = Layout::whole(type.getRank());
          l.dims[d] = {options_.axis};
          stored(l, d);
        }
      if (weights_.contains(name) && node.strategies.size() > 1 && !options_.variableBudget)
        node.strategies.erase(node.strategies.begin());
    }
    nodes_.push_back(std::move(node));
    return (int)nodes_.size() - 1;
  }

  /// The search's size and prediction on the function (kSearchAttr), for --dump-sharding.
  void recordPrediction() {
    Builder b(func_.getContext());
    std::vector<std::string> explained = explainVariables();
    func_->setAttr(kSearchAttr,
                   b.getDictionaryAttr({b.getNamedAttr("axis", b.getStringAttr(options_.axis)),
                                        b.getNamedAttr("nodes", b.getI64IntegerAttr(result_.nodes)),
                                        b.getNamedAttr("tied", b.getI64IntegerAttr(result_.tiedNodes)),
                                        b.getNamedAttr("strategies", b.getI64IntegerAttr(result_.strategies)),
                                        b.getNamedAttr("program_variables", b.getI64IntegerAttr(result_.programVariables)),
                                        b.getNamedAttr("optimal", b.getBoolAttr(result_.optimal)),
                                        b.getNamedAttr("collectives", b.getI64IntegerAttr(result_.predictedCollectives)),
                                        b.getNamedAttr("bytes", b.getI64IntegerAttr((int64_t)result_.predictedBytes)),
                                        b.getNamedAttr("variable_bytes", b.getI64IntegerAttr((int64_t)result_.variableBytes)),
                                        b.getNamedAttr("seconds", b.getF64FloatAttr(result_.predictedSeconds)),
                                        b.getNamedAttr("reshards", b.getStrArrayAttr(llvm::SmallVector<llvm::StringRef>(
                                                                       result_.reshardLines.begin(), result_.reshardLines.end()))),
                                        b.getNamedAttr("variables", b.getStrArrayAttr(llvm::SmallVector<llvm::StringRef>(
                                                                        explained.begin(), explained.end())))}));
  }

  /// The chosen layout of `value` as its producer leaves it.
  Layout chosenLayout(Value value) const {
    auto it = sources_.find(value);
    return it == sources_.end() ? batchOf(value) : resultLayout(it->second, nodes_[it->second.node].chosen);
  }

  /// The collectives the chosen strategies imply: the prediction, and one line per reshard
  /// for --dump-sharding ("user op: have -> want type, bytes").
  void accountChosen() {
    // Partitioning builds one collective per value and layout, whatever number of users want it.
    std::set<std::pair<void *, std::string>> built;
    auto use = [&](Value value, const Layout &want, Operation *user) {
      if (!built.insert({value.getAsOpaquePointer(), want.describe()}).second)
        return;
      Layout have = chosenLayout(value);
      auto type = llvm::cast<RankedTensorType>(value.getType());
      CommCost cost = reshardCost(have, want, type.getShape(), elementBytes(value), mesh_);
      result_.predictedBytes += cost.bytes;
      result_.predictedCollectives += cost.collectives;
      if (!cost.collectives)
        return;
      std::string line;
      llvm::raw_string_ostream os(line);
      // No location: the IR must be the same whether the function came from cpc import (names)
      // or from cpc-opt (none).
      os << user->getName() << ": " << have.describe() << " -> " << want.describe() << " " << type << ", " << (int64_t)cost.bytes
         << " B, " << llvm::format("%.1f", cost.seconds(options_.link) * 1e6) << " us";
      result_.reshardLines.push_back(line);
    };
    for (Node &node : nodes_)
      if (!node.op)
        result_.variableBytes += variableBytes(node, node.strategies[node.chosen]);
    forEachUse([&](Value v, int consumer, unsigned operand, Operation *user) {
      use(v, consumer < 0 ? dimsOnly(chosenLayout(v)) : nodes_[consumer].strategies[nodes_[consumer].chosen].operands[operand],
          user);
    });
  }

  /// Every use of a tensor by a node (an op, or a variable's assign: slot 0) and every result of
  /// the function (consumer -1: results leave whole or split as they are, never partial).
  template <typename Visit> void forEachUse(Visit visit) {
    for (size_t n = 0; n < nodes_.size(); ++n)
      if (Operation *op = nodes_[n].op)
        for (OpOperand &operand : op->getOpOperands())
          if (isRankedTensor(operand.get()))
            visit(operand.get(), (int)n, operand.getOperandNumber(), op);
    for (auto [assign, n] : assigns_)
      visit(assign.getValue(), n, 0u, assign.getOperation());
    for (Operation &op : func_.getBody().front())
      if (llvm::isa<func::ReturnOp>(op))
        for (Value v : op.getOperands())
          if (isRankedTensor(v))
            visit(v, -1, 0u, &op);
  }

  int opNode(Operation *op);
  std::vector<std::string> explainVariables() const;
  double localSeconds(int n, size_t strategy) const;
  void addOpStrategies(Node &node, const ShardingRule &rule);
  Strategy strategyOf(Operation *op, const ShardingRule &rule, const FactorAxes &axes, int64_t factor) const;
  void addPartialStrategies(Node &node, const ShardingRule &rule, const FactorAxes &base);
  void restrictToWeights(Node &node, const ShardingRule &rule);
  void buildEdges();
  void addUse(Value value, int consumer, unsigned operand);
  double reshardSeconds(Value value, const Layout &have, const Layout &want) const;
  const Layout &resultLayout(const Source &source, int64_t strategy) const;
  LogicalResult solve();
  void addEdge(IlpProblem &program, const Edge &e, int count);
  double variableBytes(const Node &node, const Strategy &s) const;
  LogicalResult addVariableBudget(IlpProblem &program);
  uint64_t nodeLabel(const Node &node) const;
  void apply();
  Value resharded(Value value, const Layout &want, Operation *user);

  func::FuncOp func_;
  const Mesh &mesh_;
  const ShardingSearchOptions &options_;
  const llvm::StringMap<Layout> &decided_;
  int64_t size_;
  DenseMap<Value, Layout> batch_;
  std::vector<Node> nodes_;
  llvm::StringMap<int> variableNodes_;
  llvm::StringSet<> weights_; // trainable parameters of rank >= 2 that feed a contraction
  DenseMap<Value, Source> sources_;
  std::vector<std::pair<AssignOp, int>> assigns_;
  std::vector<Edge> edges_;
  std::vector<NodeLink> links_; // every use between nodes, for finding repeated blocks
  std::vector<int> classOf_;    // the node whose choice each node shares (repeated blocks)
  DenseMap<std::pair<Value, Attribute>, Value> reshards_;
  ShardingSearchResult result_;
};

int ShardingSearch::opNode(Operation *op) {
  Node node;
  node.op = op;
  std::optional<ShardingRule> rule = getShardingRule(op);
  if (!rule) { // partitioned whole: operands gathered, results whole
    Strategy s;
    for (Value v : op->getOperands())
      s.operands.push_back(Layout::whole(isRankedTensor(v) ? llvm::cast<RankedTensorType>(v.getType()).getRank() : 0));
    for (Value v : op->getResults())
      s.results.push_back(Layout::whole(isRankedTensor(v) ? llvm::cast<RankedTensorType>(v.getType()).getRank() : 0));
    s.seconds = estimateSeconds(op, options_.profile);
    node.strategies.push_back(s);
  } else {
    addOpStrategies(node, *rule);
    if (!options_.variableBudget)
      restrictToWeights(node, *rule);
  }
  nodes_.push_back(std::move(node));
  return (int)nodes_.size() - 1;
}

/// The batch's factors (those the data-parallel layouts split) as they are, and the axis on
/// none or on one other factor it divides.
void ShardingSearch::addOpStrategies(Node &node, const ShardingRule &rule) {
  Operation *op = node.op;
  FactorAxes base = factorAxesOf(
      op, rule, mesh_, /*resultsFirst=*/true, [&](Value v) { return batchOf(v); },
      [&](OpOperand &operand) { return batchOf(operand.get()); });
  for (int64_t f = -1; f < rule.numFactors(); ++f) {
    FactorAxes axes = base;
    if (f >= 0) {
      if (!rule.maySplit(f) || !base[f].empty() || rule.factors[f].size % size_)
        continue;
      axes[f] = {options_.axis};
      legalizeFactorAxes(axes, rule, mesh_);
      if (axes[f].empty())
        continue;
    }
    node.strategies.push_back(strategyOf(op, rule, axes, f));
  }
  addPartialStrategies(node, rule, base);
}

/// `op` run with its factors split over `axes`: the layouts its rule implies, and its compute
/// shared by the ranks those axes split it over.
Strategy ShardingSearch::strategyOf(Operation *op, const ShardingRule &rule, const FactorAxes &axes,
                                    int64_t factor) const {
  Strategy s;
  s.factor = factor;
  int64_t parts = 1;
  for (const MeshAxes &a : axes)
    parts *= mesh_.parts(a);
  s.seconds = estimateSeconds(op, options_.profile) / (double)parts;
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    s.operands.push_back(operandLayout(rule, i, axes, Layout::whole(rule.operands[i].size())));
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    s.results.push_back(cpc::resultLayout(rule, i, axes, nullptr));
  return s;
}

/// Linear ops pass partial sums on (add and sub when every operand is one, other ops in the one
/// operand they are linear in): each rank's share goes through unreduced and one all-reduce
/// serves the whole chain, as partitioning does (a gradient norm's terms are summed first).
void ShardingSearch::addPartialStrategies(Node &node, const ShardingRule &rule, const FactorAxes &base) {
  Operation *op = node.op;
  auto variant = [&](ArrayRef<unsigned> partialOperands) {
    Strategy s = strategyOf(op, rule, base, -1);
    for (unsigned i : partialOperands)
      s.operands[i].partial = {options_.axis};
    for (Layout &l : s.results) {
      if (!l.partial.empty())
        return; // already partial over the batch: one kind of partial sum at a time
      l.partial = {options_.axis};
    }
    node.strategies.push_back(std::move(s));
  };
  if (llvm::isa<AddOp, SubOp>(op)) {
    SmallVector<unsigned> all;
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      all.push_back(i);
    variant(all);
    return;
  }
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    if (isRankedTensor(op->getOperand(i)) && propagatesPartial(op, i, ReductionKind::Sum))
      variant({i});
}

/// A contraction that reads a weight (a parameter stored split) splits one of the weight's
/// factors: that is what tensor parallelism is, against splitting the batch again.
void ShardingSearch::restrictToWeights(Node &node, const ShardingRule &rule) {
  for (OpOperand &operand : node.op->getOpOperands()) {
    ParameterOp weight = readParameter(operand.get());
    auto it = weight ? variableNodes_.find(weight.getName()) : variableNodes_.end();
    if (it == variableNodes_.end() || !contracts(rule, operand.getOperandNumber()) ||
        llvm::any_of(nodes_[it->second].strategies, [](const Strategy &s) { return !s.results[0].isSplit(); }))
      continue; // not a weight stored split
    auto inWeight = [&](const Strategy &s) {
      return s.factor >= 0 && llvm::any_of(rule.operands[operand.getOperandNumber()], [&](const auto &dim) {
               return llvm::is_contained(dim, s.factor);
             });
    };
    if (llvm::any_of(node.strategies, inWeight))
      llvm::erase_if(node.strategies, [&](const Strategy &s) { return !inWeight(s); });
  }
}

double ShardingSearch::reshardSeconds(Value value, const Layout &have, const Layout &want) const {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  CommCost cost = reshardCost(have, want, type.getShape(), elementBytes(value), mesh_);
  return cost.infeasible ? kInfeasibleSeconds : cost.seconds(options_.link);
}

const Layout &ShardingSearch::resultLayout(const Source &source, int64_t strategy) const {
  return nodes_[source.node].strategies[strategy].results[source.slot];
}

/// Every use between nodes: kept as an edge where both ends choose, else folded into the
/// strategies' own costs.
void ShardingSearch::buildEdges() {
  forEachUse([&](Value v, int consumer, unsigned operand, Operation *) {
    if (consumer >= 0) {
      addUse(v, consumer, operand);
      return;
    }
    auto it = sources_.find(v); // a result: its producer's partial sums are reduced
    if (it != sources_.end())
      for (Strategy &s : nodes_[it->second.node].strategies)
        s.seconds += reshardSeconds(v, s.results[it->second.slot], dimsOnly(s.results[it->second.slot]));
  });
}

void ShardingSearch::addUse(Value value, int consumer, unsigned operand) {
  Node &user = nodes_[consumer];
  auto it = sources_.find(value);
  if (it == sources_.end()) { // a function argument: laid out as the batch seeds say
    for (Strategy &s : user.strategies)
      s.seconds += reshardSeconds(value, batchOf(value), s.operands[operand]);
    return;
  }
  Source source = it->second;
  links_.push_back({source.node, source.slot, consumer, operand});
  Node &producer = nodes_[source.node];
  if (producer.strategies.size() == 1) {
    for (Strategy &s : user.strategies)
      s.seconds += reshardSeconds(value, resultLayout(source, 0), s.operands[operand]);
    return;
  }
  if (user.strategies.size() == 1) {
    for (size_t i = 0; i < producer.strategies.size(); ++i)
      producer.strategies[i].seconds += reshardSeconds(value, resultLayout(source, i), user.strategies[0].operands[operand]);
    return;
  }
  edges_.push_back({source.node, consumer, source.slot, operand, value});
}

/// A node's structural label before any round: what it computes on what types, and the
/// strategies it offers (nodes tied together must offer the same ones).
uint64_t ShardingSearch::nodeLabel(const Node &node) const {
  llvm::hash_code h = llvm::hash_value(node.strategies.size());
  for (const Strategy &s : node.strategies)
    h = llvm::hash_combine(h, s.factor, s.operands.size(), s.results.size());
  if (!node.op)
    return llvm::hash_combine(h, weights_.contains(node.variable), node.type.getAsOpaquePointer());
  h = llvm::hash_combine(h, node.op->getName().getAsOpaquePointer());
  // The pipeline chunk or recompute segment an op belongs to does not change its strategies or
  // their costs: blocks in different stages still repeat (without this, --pp 32 ties nothing:
  // 18x the variables).
  for (NamedAttribute attr : node.op->getAttrs())
    if (!llvm::is_contained(kPlacementLabels, attr.getName()))
      h = llvm::hash_combine(h, attr.getName().getAsOpaquePointer(), attr.getValue().getAsOpaquePointer());
  for (Type t : node.op->getOperandTypes())
    h = llvm::hash_combine(h, t.getAsOpaquePointer());
  for (Type t : node.op->getResultTypes())
    h = llvm::hash_combine(h, t.getAsOpaquePointer());
  return h;
}

/// What a variable's strategy keeps on each rank: its block.
double ShardingSearch::variableBytes(const Node &node, const Strategy &s) const {
  double bytes = (double)std::max<int64_t>(1, node.type.getElementTypeBitWidth() / 8);
  for (int64_t d = 0; d < node.type.getRank(); ++d)
    bytes *= (double)node.type.getDimSize(d) / (double)mesh_.parts(s.results[0].dims[d]);
  return bytes;
}

/// The variables' blocks fit the budget: the sum over variables of the chosen strategy's bytes
/// (tied variables choose alike, so a class's variable counts each member's bytes).
LogicalResult ShardingSearch::addVariableBudget(IlpProblem &program) {
  double fixed = 0, least = 0;
  std::vector<std::pair<int, double>> terms;
  std::map<int, std::vector<double>> perClass; // class -> bytes per strategy, summed over members
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node &node = nodes_[n];
    if (node.op)
      continue;
    std::vector<double> &bytes = perClass[classOf_[n]];
    bytes.resize(node.strategies.size(), 0.0);
    for (size_t i = 0; i < node.strategies.size(); ++i)
      bytes[i] += variableBytes(node, node.strategies[i]);
  }
  for (const auto &[n, bytes] : perClass) {
    least += *llvm::min_element(bytes);
    if (nodes_[n].programVariables.empty()) {
      fixed += bytes[0];
      continue;
    }
    for (size_t i = 0; i < bytes.size(); ++i)
      terms.push_back({nodes_[n].programVariables[i], bytes[i]});
  }
  if (least > (double)options_.variableBudget)
    return func_.emitError("the parameters and optimizer states need ")
           << (int64_t)least << " bytes per rank at least, split over " << options_.axis << "=" << size_
           << "; the budget is " << options_.variableBudget << " bytes";
  program.addAtMost(terms, (double)options_.variableBudget - fixed);
  return success();
}

/// Alpa's program over the nodes' classes (repeated blocks share one choice): one 0-1 variable
/// per strategy of a class with several (exactly one chosen), and per class-to-class edge one
/// variable per pair of layouts (addEdge), priced by the resharding between them times the
/// edges it stands for. An edge inside one class costs what its strategy's two ends imply.
LogicalResult ShardingSearch::solve() {
  std::vector<uint64_t> labels;
  for (const Node &node : nodes_)
    labels.push_back(nodeLabel(node));
  classOf_ = repeatedClasses(labels, links_, kTieRounds);
  std::vector<std::vector<double>> costs(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    std::vector<double> &c = costs[classOf_[n]];
    c.resize(nodes_[n].strategies.size(), 0.0);
    for (size_t i = 0; i < c.size(); ++i)
      c[i] += nodes_[n].strategies[i].seconds;
  }
  std::map<std::tuple<int, unsigned, int, unsigned>, std::pair<Edge, int>> between; // class edges, counts
  for (const Edge &e : edges_) {
    int from = classOf_[e.producer], to = classOf_[e.consumer];
    if (from == to) {
      for (size_t i = 0; i < costs[from].size(); ++i)
        costs[from][i] += reshardSeconds(e.value, nodes_[e.producer].strategies[i].results[e.result],
                                         nodes_[e.consumer].strategies[i].operands[e.operand]);
      continue;
    }
    auto [it, added] = between.try_emplace({from, e.result, to, e.operand}, Edge{from, to, e.result, e.operand, e.value}, 0);
    ++it->second.second;
  }
  IlpProblem program;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if ((int)n != classOf_[n] || nodes_[n].strategies.size() < 2)
      continue;
    std::vector<std::pair<int, double>> one;
    for (double seconds : costs[n]) {
      nodes_[n].programVariables.push_back(program.addVariable(seconds * kProgramUnitsPerSecond, /*binary=*/true));
      one.push_back({nodes_[n].programVariables.back(), 1.0});
    }
    program.addEquality(one, 1.0);
  }
  for (const auto &[key, edge] : between)
    addEdge(program, edge.first, edge.second);
  if (options_.variableBudget && failed(addVariableBudget(program)))
    return failure();
  result_.tiedNodes = llvm::count_if(llvm::seq<size_t>(0, nodes_.size()), [&](size_t n) { return classOf_[n] != (int)n; });
  result_.programVariables = program.numVariables();
  IlpProblem::Solution solution;
  std::string why;
  if (program.numVariables() && !program.solve(options_.solverSeconds, solution, why))
    return func_.emitError("the sharding search over ") << options_.axis << " found no layout: " << why;
  result_.optimal = !program.numVariables() || solution.optimal;
  result_.predictedSeconds = solution.objective / kProgramUnitsPerSecond;
  for (Node &node : nodes_) {
    if (node.programVariables.empty())
      continue;
    for (size_t i = 0; i < node.programVariables.size(); ++i)
      if (solution.values[node.programVariables[i]] > 0.5)
        node.chosen = i;
  }
  for (size_t n = 0; n < nodes_.size(); ++n)
    nodes_[n].chosen = nodes_[classOf_[n]].chosen;
  return success();
}

/// An edge's resharding cost depends only on the layout the producer leaves and the one the
/// user wants, and strategies share layouts (a matmul's five strategies read x in three), so
/// its variables are per pair of distinct layouts: each tied to the sum of the choices of
/// either end that give its layout. Exact, and a fraction of Alpa's per-strategy pairs.
void ShardingSearch::addEdge(IlpProblem &program, const Edge &e, int count) {
  const Node &from = nodes_[e.producer], &to = nodes_[e.consumer];
  auto group = [](const Node &node, auto layoutOf) {
    std::vector<std::pair<Layout, std::vector<int>>> groups; // layout, program variables giving it
    for (size_t i = 0; i < node.strategies.size(); ++i) {
      const Layout &l = layoutOf(node.strategies[i]);
      auto it = llvm::find_if(groups, [&](const auto &g) { return g.first.dims == l.dims && g.first.partial == l.partial &&
                                                                   g.first.reduction == l.reduction; });
      if (it == groups.end())
        groups.push_back({l, {node.programVariables[i]}});
      else
        it->second.push_back(node.programVariables[i]);
    }
    return groups;
  };
  auto have = group(from, [&](const Strategy &s) -> const Layout & { return s.results[e.result]; });
  auto want = group(to, [&](const Strategy &s) -> const Layout & { return s.operands[e.operand]; });
  std::vector<std::vector<int>> pair(have.size(), std::vector<int>(want.size()));
  for (size_t a = 0; a < have.size(); ++a)
    for (size_t b = 0; b < want.size(); ++b)
      pair[a][b] = program.addVariable(count * kProgramUnitsPerSecond * reshardSeconds(e.value, have[a].first, want[b].first),
                                       /*binary=*/false);
  // At either end, a layout's pair variables sum to the choices that give that layout.
  auto tie = [&](const std::vector<int> &choices, size_t others, auto pairWith) {
    std::vector<std::pair<int, double>> terms;
    for (int x : choices)
      terms.push_back({x, -1.0});
    for (size_t i = 0; i < others; ++i)
      terms.push_back({pairWith(i), 1.0});
    program.addEquality(terms, 0.0);
  };
  for (size_t a = 0; a < have.size(); ++a)
    tie(have[a].second, want.size(), [&](size_t b) { return pair[a][b]; });
  for (size_t b = 0; b < want.size(); ++b)
    tie(want[b].second, have.size(), [&](size_t a) { return pair[a][b]; });
}

/// The value `value` laid out as `want` for `user`: itself, or a cpc.shard of it (one per value
/// and layout, before its first such user).
Value ShardingSearch::resharded(Value value, const Layout &want, Operation *user) {
  Layout have = dimsOnly(batchOf(value));
  if (auto it = sources_.find(value); it != sources_.end())
    have = resultLayout(it->second, nodes_[it->second.node].chosen);
  if (have.dims == want.dims)
    return value; // alike, or a partial sum the partitioner reduces in place
  ShardingAttr attr = want.toAttr(mesh_.ref(), /*priority=*/1);
  auto [it, added] = reshards_.try_emplace({value, attr}, Value());
  if (added) {
    OpBuilder b(user);
    it->second = b.create<ShardOp>(user->getLoc(), value, attr).getResult();
  }
  return it->second;
}

/// What node `n` costs with `strategy`, its neighbours' choices as chosen: its own seconds and
/// the resharding on its edges.
double ShardingSearch::localSeconds(int n, size_t strategy) const {
  const Strategy &s = nodes_[n].strategies[strategy];
  double seconds = s.seconds;
  for (const Edge &e : edges_) {
    if (e.producer == n)
      seconds += reshardSeconds(e.value, s.results[e.result],
                                nodes_[e.consumer].strategies[nodes_[e.consumer].chosen].operands[e.operand]);
    if (e.consumer == n)
      seconds += reshardSeconds(e.value, nodes_[e.producer].strategies[nodes_[e.producer].chosen].results[e.result],
                                s.operands[e.operand]);
  }
  return seconds;
}

/// Per variable (--dump-sharding, cpc plan --explain): the layout chosen, its bytes per rank and
/// the resharding at its uses, and what each other layout it offered would change, priced with
/// every other choice as chosen: "name: [tp, -] 1024 B, 3.1 us; [-, tp] +2.0 us -0 B; ...".
std::vector<std::string> ShardingSearch::explainVariables() const {
  std::vector<std::string> lines;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node &node = nodes_[n];
    if (node.op)
      continue;
    const Strategy &chosen = node.strategies[node.chosen];
    double seconds = localSeconds((int)n, node.chosen), bytes = variableBytes(node, chosen);
    std::string line;
    llvm::raw_string_ostream os(line);
    os << node.variable << ": " << chosen.results[0].describe() << " " << (int64_t)bytes << " B, "
       << llvm::format("%.1f", seconds * 1e6) << " us";
    for (size_t i = 0; i < node.strategies.size(); ++i)
      if (i != (size_t)node.chosen)
        os << "; " << node.strategies[i].results[0].describe() << " "
           << llvm::format("%+.1f", (localSeconds((int)n, i) - seconds) * 1e6) << " us "
           << llvm::format("%+.0f", variableBytes(node, node.strategies[i]) - bytes) << " B";
    if (decided_.count(node.variable))
      os << "; decided before the search";
    else if (llvm::none_of(node.strategies, [](const Strategy &st) { return st.results[0].isSplit(); }))
      os << "; no dim divides";
    else if (llvm::all_of(node.strategies, [](const Strategy &st) { return st.results[0].isSplit(); }))
      os << "; whole not offered (a weight is split when there is no memory budget)";
    lines.push_back(line);
  }
  return lines;
}

/// Seeds propagation keeps: each op's result layouts, a cpc.shard per resharded operand, and the
/// variables' layouts for the caller to store.
void ShardingSearch::apply() {
  for (Node &node : nodes_) {
    const Strategy &s = node.strategies[node.chosen];
    if (!node.op) {
      result_.variables[node.variable] = s.results[0];
      continue;
    }
    SmallVector<Attribute> layouts;
    for (auto [r, l] : llvm::zip(node.op->getResults(), s.results))
      layouts.push_back(dimsOnly(l).toAttr(mesh_.ref(), /*priority=*/1));
    if (!layouts.empty())
      node.op->setAttr(kResultShardingsAttr, ArrayAttr::get(func_.getContext(), layouts));
    for (OpOperand &operand : node.op->getOpOperands())
      if (isRankedTensor(operand.get()) && s.operands[operand.getOperandNumber()].partial.empty())
        operand.set(resharded(operand.get(), s.operands[operand.getOperandNumber()], node.op));
  }
  for (auto [assign, n] : assigns_)
    assign->setOperand(0, resharded(assign.getValue(), nodes_[n].strategies[nodes_[n].chosen].operands[0], assign));
}

} // namespace

FailureOr<ShardingSearchResult> searchShardingLayout(func::FuncOp func, const Mesh &mesh,
                                                     const ShardingSearchOptions &options,
                                                     const llvm::StringMap<Layout> &decided) {
  if (!mesh.hasAxis(options.axis))
    return func.emitError("the mesh has no axis '") << options.axis << "' to search a layout over";
  return ShardingSearch(func, mesh, options, decided).run();
}

} // namespace cpc
