//===- PipelineSplit.cpp - the training step as per-chunk and per-rank programs ===//
//
// Pipeline parallelism as a program split (MPMD): after partitioning (dp and tp are inside each
// program), @accumulate is cut into a forward and a backward function per model chunk and
// @apply into one function per pipeline rank (an inference program into forward functions). Where each op goes is decided from the ops'
// `cpc.stage` labels and dataflow (Passes.td); then each program is built in the source's op
// order, pulling in what it reads: its own copy of inputs, parameters, constants and what is
// computed from those alone; a local value; a value from an earlier program of the same rank
// (`cpc.transfer`: a result there, an argument here, which the runtime keeps per microbatch);
// or a value of another rank (a `cpc.send` right after it is computed there, a `cpc.recv` right
// before its first use here). Any placement is correct this way; the labels only decide which
// values travel.
//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <functional>
#include <map>
#include <set>

namespace cpc {
#define GEN_PASS_DEF_CPCPIPELINESPLIT
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

enum class Kind { Forward, Backward, Apply };

/// One output function under construction.
struct Program {
  Kind kind;
  int64_t index; // chunk (forward, backward) or pipeline rank (apply)
  int64_t rank;  // the pipeline rank that runs it
  func::FuncOp source;
  func::FuncOp func;
  Block *block = nullptr;
  IRMapping map;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
};

bool isVariableRead(Operation *op) { return llvm::isa<ParameterOp, StateOp>(op); }

std::string variableName(Operation *op) {
  if (auto p = llvm::dyn_cast<ParameterOp>(op))
    return p.getName().str();
  if (auto s = llvm::dyn_cast<StateOp>(op))
    return s.getName().str();
  return llvm::cast<AssignOp>(op).getName().str();
}

class Splitter {
public:
  Splitter(ModuleOp module, int64_t stages, int64_t chunks)
      : module_(module), b_(module.getContext()), stages_(stages), chunks_(chunks) {}

  /// Cuts `accumulate` (a training microbatch, or an inference program) into per-chunk
  /// programs and `apply` (null for inference: forward programs alone) into per-rank ones.
  LogicalResult run(func::FuncOp accumulate, func::FuncOp apply);

private:
  // --- placement ------------------------------------------------------------------------
  /// Whether `op` of `func` is copied into every program that reads it: it reads no input
  /// data, and is a constant, a pure op (or, outside @apply, a variable read).
  bool copied(Operation *op, bool variablesCopied) {
    auto it = copied_.find(op);
    if (it != copied_.end())
      return it->second;
    bool result;
    if (llvm::isa<AssignOp>(op))
      result = false;
    else if (isVariableRead(op))
      result = variablesCopied;
    else if (op->getNumOperands() == 0)
      result = llvm::isa<ConstantOp>(op);
    else
      result = isMemoryEffectFree(op) && llvm::all_of(op->getOperands(), [&](Value v) {
                 Operation *def = v.getDefiningOp();
                 return def && copied(def, variablesCopied);
               });
    return copied_[op] = result;
  }
  void placeAccumulate(func::FuncOp func);
  /// A gradient accumulator whose increment sums terms computed on several chunks (a parameter
  /// read by several stages: a tied embedding) is kept per chunk: each chunk adds its own terms
  /// every microbatch, and the update sums the copies once per step (instead of one chunk's
  /// term travelling to the other every microbatch).
  void splitSharedAccumulators(func::FuncOp accumulate, func::FuncOp apply);
  void placeApply(func::FuncOp func);
  /// The variables read (through copied ops) by operand `v`.
  void variablesReadBy(Value v, SmallVectorImpl<Operation *> &reads);

  // --- building -------------------------------------------------------------------------
  Program &program(Kind kind, int64_t index) { return programs_[{(int)kind, index}]; }
  /// `v` (of the source function) as a value of `p`, bringing it there if needed.
  Value get(Program &p, Value v);
  /// Where a computed value lives: the programs of its producer.
  Program *home(Value v) {
    auto it = where_.find(v.getDefiningOp());
    return it == where_.end() || it->second.empty() ? nullptr : it->second.front();
  }
  /// Whether, for one microbatch, `a` runs before `b` on their rank: forwards by ascending
  /// chunk, then backwards by descending chunk (what every schedule keeps).
  bool runsBefore(const Program &a, const Program &b) const {
    auto order = [&](const Program &p) { return p.kind == Kind::Forward ? p.index : 2 * chunks_ - 1 - p.index; };
    return order(a) < order(b);
  }
  void emit(Program &p, Operation *op);
  void finish(Program &p, Phase phase);
  /// Adds the pp axis to the mesh (creating one for a model without dp or tp).
  LogicalResult addPipelineAxis();
  void createPrograms(func::FuncOp accumulate, func::FuncOp apply);
  /// The programs that run `op` of @accumulate or (`update`) @apply.
  SmallVector<Program *> programsOf(Operation *op, bool update);
  /// Builds the programs' ops from `func`'s, in order, and their results from its return.
  LogicalResult emitFunction(func::FuncOp func, bool update);

  ModuleOp module_;
  OpBuilder b_;
  int64_t stages_, chunks_;
  FlatSymbolRefAttr mesh_;
  llvm::DenseMap<Operation *, bool> copied_;
  // Placement: per op, its chunk and direction (accumulate) or its pipeline rank (apply).
  llvm::DenseMap<Operation *, int64_t> chunkOf_;
  llvm::DenseSet<Operation *> backward_;
  llvm::DenseMap<Operation *, int64_t> rankOf_;
  // Per variable: the chunks whose programs read it in @accumulate; in @apply, the ranks.
  std::map<std::string, std::set<int64_t>> homeChunks_, homeRanks_;
  std::map<std::pair<int, int64_t>, Program> programs_;
  llvm::DenseMap<Operation *, SmallVector<Program *>> where_;
  llvm::DenseMap<std::pair<Value, Program *>, Value> moved_;
  int64_t channels_ = 0;
};

/// Walks up from `v` through copied ops to the variables it reads.
void Splitter::variablesReadBy(Value v, SmallVectorImpl<Operation *> &reads) {
  Operation *def = v.getDefiningOp();
  if (!def || !copied_.lookup(def))
    return;
  if (isVariableRead(def)) {
    reads.push_back(def);
    return;
  }
  for (Value o : def->getOperands())
    variablesReadBy(o, reads);
}

void Splitter::placeAccumulate(func::FuncOp func) {
  SmallVector<Operation *> unresolved;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (copied(&op, true) || llvm::isa<AssignOp>(op))
      continue;
    bool backward = op.hasAttr(kBackwardAttrName);
    std::optional<int64_t> lowest, highest; // chunks of the placed operands, forward / backward
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      auto it = def ? chunkOf_.find(def) : chunkOf_.end();
      if (it == chunkOf_.end())
        continue;
      if (backward_.contains(def)) {
        backward = true;
        highest = highest ? std::min(*highest, it->second) : it->second;
      } else {
        lowest = lowest ? std::max(*lowest, it->second) : it->second;
      }
    }
    std::optional<int64_t> label = getStage(&op);
    std::optional<int64_t> chunk;
    // A forward op runs no earlier than the chunks it reads from, a backward op no later.
    if (backward)
      chunk = highest ? (label ? std::min(*label, *highest) : *highest) : label;
    else
      chunk = lowest ? (label ? std::max(*label, *lowest) : *lowest) : label;
    if (backward)
      backward_.insert(&op);
    if (!chunk) {
      unresolved.push_back(&op);
      continue;
    }
    chunkOf_[&op] = std::clamp<int64_t>(*chunk, 0, chunks_ - 1);
  }
  // What reads only inputs goes with its first reader, into backward when all its readers are
  // there: a collective over a gradient accumulator's old value must run after the earlier
  // microbatches' backward wrote it, not be handed over from a forward that ran before.
  for (Operation *op : llvm::reverse(unresolved)) {
    int64_t chunk = chunks_;
    bool placed = false, allBackward = true;
    for (Operation *user : op->getUsers())
      if (auto it = chunkOf_.find(user); it != chunkOf_.end()) {
        chunk = std::min(chunk, it->second);
        placed = true;
        allBackward &= backward_.contains(user);
      }
    chunkOf_[op] = chunk == chunks_ ? 0 : chunk;
    if (placed && allBackward)
      backward_.insert(op);
  }
  for (auto [op, chunk] : chunkOf_)
    for (Value v : op->getOperands()) {
      SmallVector<Operation *> reads;
      variablesReadBy(v, reads);
      for (Operation *read : reads)
        homeChunks_[variableName(read)].insert(chunk);
    }
  // A variable this step writes but does not read lives where its value is computed (or, for a
  // value of parameters and constants alone, on chunk 0): @apply reads it there.
  func.walk([&](AssignOp assign) {
    std::set<int64_t> &homes = homeChunks_[variableName(assign)];
    if (!homes.empty())
      return;
    Operation *def = assign.getValue().getDefiningOp();
    auto it = def ? chunkOf_.find(def) : chunkOf_.end();
    homes.insert(it == chunkOf_.end() ? 0 : it->second);
  });
}

// Over 80 lines: one rewrite of two functions whose operand and result lists must change together.
void Splitter::splitSharedAccumulators(func::FuncOp accumulate, func::FuncOp apply) {
  SmallVector<AssignOp> assigns;
  accumulate.walk([&](AssignOp a) { assigns.push_back(a); });
  for (AssignOp assign : assigns) {
    // assign(acc, add(state acc, increment)), the increment a sum of single-use adds
    auto sum = assign.getValue().getDefiningOp<AddOp>();
    if (!sum || !chunkOf_.count(sum))
      continue;
    auto old = sum.getLhs().getDefiningOp<StateOp>();
    Value increment = sum.getRhs();
    if (!old) {
      old = sum.getRhs().getDefiningOp<StateOp>();
      increment = sum.getLhs();
    }
    if (!old || old.getRole() != StateRole::GradAccumulator || old.getName() != assign.getName() ||
        !old->hasOneUse() || !sum->hasOneUse())
      continue;
    std::map<int64_t, SmallVector<Value>> terms; // chunk -> the terms computed there
    SmallVector<AddOp> inner;
    std::function<void(Value)> collect = [&](Value v) {
      auto add = v.getDefiningOp<AddOp>();
      if (add && add->hasOneUse() && chunkOf_.count(add)) {
        inner.push_back(add);
        collect(add.getLhs());
        collect(add.getRhs());
        return;
      }
      Operation *def = v.getDefiningOp();
      auto it = def ? chunkOf_.find(def) : chunkOf_.end();
      terms[it == chunkOf_.end() ? chunkOf_[sum] : it->second].push_back(v);
    };
    collect(increment);
    if (terms.size() < 2)
      continue;
    std::string name = old.getName().str();
    auto drop = [&](Operation *op) { // the maps key ops by address, which a new op may reuse
      chunkOf_.erase(op);
      backward_.erase(op);
      copied_.erase(op);
      op->erase();
    };
    VariableOp original = old.getVariable();
    OpBuilder b(assign);
    for (auto &[chunk, values] : terms) {
      auto copy = b.create<StateOp>(old.getLoc(), cloneVariable(original, name + ".chunk" + std::to_string(chunk)));
      copied_[copy] = true; // read where it is used, as every variable of @accumulate
      Value total = copy;
      for (Value v : values) {
        total = b.create<AddOp>(assign.getLoc(), total, v);
        chunkOf_[total.getDefiningOp()] = chunk;
        backward_.insert(total.getDefiningOp());
      }
      b.create<AssignOp>(assign.getLoc(), total, copy.getNameAttr());
      homeChunks_[copy.getName().str()].insert(chunk);
    }
    drop(assign);
    drop(sum);
    drop(old);
    for (AddOp add : inner) // outermost first: each is unused once its user is gone
      drop(add);
    homeChunks_.erase(name);
    // @apply reads the sum of the copies and zeroes each of them.
    SmallVector<Operation *> uses;
    apply.walk([&](Operation *op) {
      if ((llvm::isa<StateOp>(op) && llvm::cast<StateOp>(op).getName() == name) ||
          (llvm::isa<AssignOp>(op) && llvm::cast<AssignOp>(op).getName() == name))
        uses.push_back(op);
    });
    for (Operation *op : uses) {
      OpBuilder a(op);
      Value total;
      for (auto &[chunk, values] : terms) {
        std::string copyName = name + ".chunk" + std::to_string(chunk);
        if (auto zero = llvm::dyn_cast<AssignOp>(op)) {
          assignVariable(a, zero.getLoc(), zero.getValue(), copyName);
          continue;
        }
        auto copy = a.create<StateOp>(op->getLoc(), findVariable(module_, copyName));
        total = total ? a.create<AddOp>(op->getLoc(), total, copy).getResult() : copy.getResult();
      }
      if (total)
        op->getResult(0).replaceAllUsesWith(total);
      op->erase();
    }
    if (variableAccesses(module_, original).empty()) // the copies hold it now
      original.erase();
  }
}

void Splitter::placeApply(func::FuncOp func) {
  for (auto &[name, chunks] : homeChunks_)
    for (int64_t c : chunks)
      homeRanks_[name].insert(c % stages_);
  // Where each placed value is: a variable read is at its homes, an op at one rank.
  llvm::DenseMap<Value, std::set<int64_t>> at;
  SmallVector<Operation *> unresolved;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (copied(&op, false) || llvm::isa<AssignOp>(op))
      continue;
    if (isVariableRead(&op)) {
      auto it = homeRanks_.find(variableName(&op));
      if (it == homeRanks_.end())
        unresolved.push_back(&op); // only the update reads it (an optimizer moment): with its reader
      else
        at[op.getResult(0)] = it->second;
      continue;
    }
    // Where most of the operand bytes already are (ties: the later rank, so that a chain of
    // scalar sums runs up the pipeline once).
    std::map<int64_t, int64_t> bytes;
    for (Value v : op.getOperands())
      if (auto it = at.find(v); it != at.end())
        for (int64_t r : it->second)
          bytes[r] += std::max<int64_t>(valueBytes(v), 1);
    if (bytes.empty()) {
      unresolved.push_back(&op);
      continue;
    }
    int64_t best = bytes.begin()->first;
    for (auto [r, n] : bytes)
      if (n >= bytes[best])
        best = r;
    rankOf_[&op] = best;
    for (Value r : op.getResults())
      at[r] = {best};
  }
  for (Operation *op : llvm::reverse(unresolved)) {
    int64_t rank = stages_;
    for (Operation *user : op->getUsers())
      if (auto it = rankOf_.find(user); it != rankOf_.end())
        rank = std::min(rank, it->second);
    rank = rank == stages_ ? 0 : rank;
    if (isVariableRead(op))
      homeRanks_[variableName(op)].insert(rank);
    else
      rankOf_[op] = rank;
  }
}

Value Splitter::get(Program &p, Value v) {
  if (Value local = p.map.lookupOrNull(v))
    return local;
  if (auto arg = llvm::dyn_cast<BlockArgument>(v)) { // an input: every program binds its own
    Value a = p.block->addArgument(arg.getType(), arg.getLoc());
    p.argAttrs.push_back(p.source.getArgAttrDict(arg.getArgNumber()));
    p.map.map(v, a);
    return a;
  }
  Operation *def = v.getDefiningOp();
  bool variableHere = isVariableRead(def) && p.kind == Kind::Apply && homeRanks_[variableName(def)].count(p.rank);
  if (copied_.lookup(def) || variableHere) {
    for (Value o : def->getOperands())
      get(p, o);
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToEnd(p.block);
    Operation *clone = b_.clone(*def, p.map);
    clone->removeAttr(kStageAttrName);
    clone->removeAttr(kBackwardAttrName);
    return p.map.lookup(v);
  }
  // Computed elsewhere: from the producer's program, or (a variable of @apply) from its home;
  // but a value an earlier program of this rank already has (received there) is handed over
  // rather than sent again.
  Program *from = home(v);
  if (!from && isVariableRead(def))
    from = &program(Kind::Apply, *homeRanks_[variableName(def)].begin());
  if (from && from->rank != p.rank && p.kind != Kind::Apply)
    for (auto &[key, q] : programs_)
      if (q.kind != Kind::Apply && q.rank == p.rank && runsBefore(q, p) && q.map.contains(v)) {
        from = &q;
        break;
      }
  if (!from || from == &p)
    return (def->emitError("pipeline split: no program computes this value"), Value());
  Value source = get(*from, v);
  auto key = std::make_pair(v, &p);
  if (auto it = moved_.find(key); it != moved_.end())
    return it->second;
  int64_t channel = channels_++;
  Value moved;
  if (from->rank == p.rank) { // a later program of the same rank: handed over by the runtime
    NamedAttrList attrs;
    attrs.set(kTransferAttrName, b_.getI64IntegerAttr(channel));
    from->results.push_back(source);
    from->resultAttrs.push_back(attrs.getDictionary(b_.getContext()));
    moved = p.block->addArgument(v.getType(), v.getLoc());
    p.argAttrs.push_back(attrs.getDictionary(b_.getContext()));
  } else {
    OpBuilder::InsertionGuard guard(b_);
    if (Operation *producer = source.getDefiningOp())
      b_.setInsertionPointAfter(producer);
    else
      b_.setInsertionPointToStart(from->block);
    b_.create<SendOp>(v.getLoc(), source, mesh_, b_.getStringAttr("pp"), b_.getI64IntegerAttr(p.rank),
                      b_.getI64IntegerAttr(channel));
    b_.setInsertionPointToEnd(p.block);
    moved = b_.create<RecvOp>(v.getLoc(), v.getType(), mesh_, b_.getStringAttr("pp"),
                              b_.getI64IntegerAttr(from->rank), b_.getI64IntegerAttr(channel));
  }
  moved_[key] = moved;
  p.map.map(v, moved);
  return moved;
}

void Splitter::emit(Program &p, Operation *op) {
  for (Value v : op->getOperands())
    if (!get(p, v))
      return;
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(p.block);
  Operation *clone = b_.clone(*op, p.map);
  clone->removeAttr(kStageAttrName);
  clone->removeAttr(kBackwardAttrName);
  where_[op].push_back(&p);
}

void Splitter::finish(Program &p, Phase phase) {
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(p.block);
  b_.create<func::ReturnOp>(p.source.getLoc(), p.results);
  p.func.setFunctionType(b_.getFunctionType(p.block->getArgumentTypes(), ValueRange(p.results).getTypes()));
  p.func.setAllArgAttrs(p.argAttrs);
  p.func.setAllResultAttrs(p.resultAttrs);
  setPhase(p.func, phase);
  if (p.kind != Kind::Apply)
    p.func->setAttr(kPipelineChunkAttrName, b_.getI64IntegerAttr(p.index));
  p.func->setAttr(kPipelineRankAttrName, b_.getI64IntegerAttr(p.rank));
}

LogicalResult Splitter::addPipelineAxis() {
  FailureOr<MeshOp> mesh = getOrCreateMesh(module_, {});
  if (failed(mesh))
    return failure();
  // pp is the outermost axis: a stage's dp x tp ranks are neighbours (Megatron's order).
  SmallVector<int64_t> shape{stages_};
  SmallVector<StringRef> names{"pp"};
  for (auto [size, name] : llvm::zip(mesh->getShape(), mesh->getAxisNames())) {
    if (llvm::cast<StringAttr>(name).getValue() == "pp")
      return mesh->emitError("@mesh already has a pp axis");
    shape.push_back(size);
    names.push_back(llvm::cast<StringAttr>(name).getValue());
  }
  mesh->setShapeAttr(b_.getDenseI64ArrayAttr(shape));
  mesh->setAxisNamesAttr(b_.getStrArrayAttr(names));
  if (ArrayAttr roles = mesh->getAxisRolesAttr()) { // pp has no strategy role
    SmallVector<Attribute> all{MeshAxisRoleAttr::get(b_.getContext(), MeshAxisRole::None)};
    llvm::append_range(all, roles);
    mesh->setAxisRolesAttr(b_.getArrayAttr(all));
  }
  mesh_ = FlatSymbolRefAttr::get(b_.getContext(), "mesh");
  return success();
}

void Splitter::createPrograms(func::FuncOp accumulate, func::FuncOp apply) {
  b_.setInsertionPoint(accumulate);
  auto create = [&](Kind kind, int64_t index, func::FuncOp source, const std::string &name) {
    Program &p = program(kind, index);
    p.kind = kind;
    p.index = index;
    p.rank = kind == Kind::Apply ? index : index % stages_;
    p.source = source;
    p.func = b_.create<func::FuncOp>(source.getLoc(), name, b_.getFunctionType({}, {}));
    p.block = p.func.addEntryBlock();
  };
  for (int64_t c = 0; c < chunks_; ++c) {
    create(Kind::Forward, c, accumulate, "forward_" + std::to_string(c));
    if (apply) // an inference program has no backward
      create(Kind::Backward, c, accumulate, "backward_" + std::to_string(c));
  }
  for (int64_t r = 0; apply && r < stages_; ++r)
    create(Kind::Apply, r, apply, "apply_" + std::to_string(r));
}

SmallVector<Program *> Splitter::programsOf(Operation *op, bool update) {
  SmallVector<Program *> ps;
  if (auto assign = llvm::dyn_cast<AssignOp>(op)) { // every copy of the variable
    Operation *def = assign.getValue().getDefiningOp();
    if (update) {
      std::set<int64_t> ranks = homeRanks_[variableName(op)];
      if (ranks.empty()) // written, never read: where its value is (rank 0 for a constant one)
        ranks.insert(def && rankOf_.count(def) ? rankOf_[def] : 0);
      for (int64_t r : ranks)
        ps.push_back(&program(Kind::Apply, r));
      return ps;
    }
    bool back = def && backward_.contains(def);
    const std::set<int64_t> &chunks = homeChunks_[variableName(op)]; // never empty (placeAccumulate)
    for (int64_t c : chunks)
      ps.push_back(&program(back ? Kind::Backward : Kind::Forward, c));
    return ps;
  }
  if (update) {
    if (auto it = rankOf_.find(op); it != rankOf_.end())
      ps.push_back(&program(Kind::Apply, it->second));
  } else if (auto it = chunkOf_.find(op); it != chunkOf_.end()) {
    ps.push_back(&program(backward_.contains(op) ? Kind::Backward : Kind::Forward, it->second));
  }
  return ps;
}

LogicalResult Splitter::emitFunction(func::FuncOp func, bool update) {
  for (Operation &op : func.getBody().front()) {
    if (auto ret = llvm::dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        Program *p = home(v);
        // A variable read returned as it is (the loss scale the step used): from a program that
        // read it for an op of its own, before any assign there.
        if (!p && v.getDefiningOp() && isVariableRead(v.getDefiningOp()))
          for (Operation *user : v.getUsers())
            if (auto it = where_.find(user); !p && it != where_.end())
              for (Program *reader : it->second)
                if (!p && reader->map.contains(v))
                  p = reader;
        if (!p)
          return ret.emitError("pipeline split: a result computed by no program");
        p->results.push_back(get(*p, v));
        p->resultAttrs.push_back(func.getResultAttrDict(i));
      }
      continue;
    }
    for (Program *p : programsOf(&op, update)) {
      emit(*p, &op);
      if (!where_.count(&op))
        return failure();
    }
  }
  return success();
}

LogicalResult Splitter::run(func::FuncOp accumulate, func::FuncOp apply) {
  if (failed(addPipelineAxis()))
    return failure();
  placeAccumulate(accumulate);
  if (apply) {
    splitSharedAccumulators(accumulate, apply);
    placeApply(apply);
  }
  createPrograms(accumulate, apply);
  if (failed(emitFunction(accumulate, false)) || (apply && failed(emitFunction(apply, true))))
    return failure();
  for (auto &[key, p] : programs_)
    finish(p, p.kind == Kind::Forward ? Phase::Forward : p.kind == Kind::Backward ? Phase::Backward : Phase::Apply);
  accumulate.erase();
  if (apply)
    apply.erase();
  return success();
}

struct CpcPipelineSplitPass : cpc::impl::CpcPipelineSplitBase<CpcPipelineSplitPass> {
  using CpcPipelineSplitBase::CpcPipelineSplitBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stages < 1 || chunks < stages || chunks % stages) {
      module.emitError("pipeline split: ")
          << (int64_t)chunks << " chunks do not spread evenly over " << (int64_t)stages << " ranks";
      return signalPassFailure();
    }
    func::FuncOp accumulate = findPhase(module, Phase::Accumulate), apply = findPhase(module, Phase::Apply);
    if (!accumulate && !apply) // inference: the forward programs of the model function
      accumulate = findPhase(module, Phase::Infer);
    else if (!accumulate || !apply)
      accumulate = nullptr;
    if (!accumulate) {
      module.emitError("pipeline split: needs @accumulate and @apply (cpc-build-train-step separate-apply), or "
                       "an inference program (cpc-inference-program)");
      return signalPassFailure();
    }
    Splitter splitter(module, stages, chunks);
    if (failed(splitter.run(accumulate, apply)))
      signalPassFailure();
  }
};

} // namespace
