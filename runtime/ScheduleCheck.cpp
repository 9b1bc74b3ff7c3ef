//===- ScheduleCheck.cpp --------------------------------------------------===//
#include "runtime/ScheduleCheck.h"
#include "kernels/OpAttrs.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

namespace cpc {

namespace {

/// A step's attributes, decoded by its op's rules; a step that fails them names itself.
kernels::OpAttrs attrsOf(const StepDesc &step) {
  try {
    return kernels::decodeOpAttrs(step.op, step.attrs);
  } catch (const RuntimeError &e) {
    throw RuntimeError(std::string(opName(step.op)) + " at " + step.loc + ": " + e.what());
  }
}

std::string shapeText(const BufferDesc &b) {
  std::string s = std::string(dtypeName(b.dtype)) + "[";
  for (size_t i = 0; i < b.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(b.shape[i]);
  return s + "]";
}

/// What every member of a collective must agree on: the op, its axes and reduction, the values.
std::string describeCollective(const Plan &plan, const StepDesc &step, const kernels::OpAttrs &attrs) {
  std::string s = opName(step.op);
  if (attrs.has(kernels::AttrId::kind))
    s += std::string(" ") + kernels::attrEnumName(attrs.kind);
  if (attrs.has(kernels::AttrId::root))
    s += " root " + std::to_string(attrs.root);
  for (int in : step.inputs)
    s += " " + shapeText(plan.buffers[in]);
  return s;
}

/// The world rank at `rank`'s coordinates with axis `axis` set to `peer`.
int peerOf(const Plan &plan, int rank, const StepDesc &step, const kernels::OpAttrs &attrs) {
  const std::string &axis = attrs.meshAxis;
  int64_t peer = attrs.peer;
  auto it = std::find(plan.meshAxes.begin(), plan.meshAxes.end(), axis);
  if (it == plan.meshAxes.end())
    throw RuntimeError(std::string(opName(step.op)) + " at " + step.loc + ": the mesh has no axis '" + axis + "'");
  size_t d = it - plan.meshAxes.begin();
  if (peer < 0 || peer >= plan.meshShape[d])
    throw RuntimeError(std::string(opName(step.op)) + " at " + step.loc + ": peer " + std::to_string(peer) + " is outside axis '" +
                       axis + "'");
  std::vector<int64_t> coords = meshCoordinates(rank, plan.meshShape);
  coords[d] = peer;
  int64_t world = meshRank(coords, plan.meshShape);
  if (world == rank)
    throw RuntimeError(std::string(opName(step.op)) + " at " + step.loc + ": rank " + std::to_string(rank) + " would talk to itself");
  return (int)world;
}

std::string describe(int rank, const CommAction &a) {
  std::string s = "rank " + std::to_string(rank) + " ";
  switch (a.kind) {
  case CommAction::Kind::Collective: {
    s += "waits in " + a.what + " over ranks {";
    for (size_t i = 0; i < a.group.size(); ++i)
      s += (i ? "," : "") + std::to_string(a.group[i]);
    s += "}";
    break;
  }
  case CommAction::Kind::Send:
    s += "waits to send " + std::to_string(a.bytes) + " B to rank " + std::to_string(a.peer) + " on channel " +
         std::to_string(a.channel);
    break;
  case CommAction::Kind::Recv:
    s += "waits to receive from rank " + std::to_string(a.peer) + " on channel " + std::to_string(a.channel);
    break;
  }
  return a.loc.empty() ? s : s + " (" + a.loc + ")";
}

} // namespace

namespace {

/// A program's communication as far as it is the same on every rank that runs it: what each
/// action is, its bytes and tag at microbatch 0; the rank fills in groups and peers.
struct ProgramComms {
  struct Item {
    CommAction action;
    const StepDesc *step = nullptr; // null: a hand-over (its peer is the rank itself)
    kernels::OpAttrs attrs;
  };
  std::vector<Item> items;
};

ProgramComms programComms(const Plan &plan, const RankProgram &program, int64_t channels) {
  ProgramComms comms;
  // Hand-overs between this rank's programs: a message to itself, received before the program
  // starts (inputs) or sent when it ends (outputs).
  auto handOvers = [&](const std::vector<NamedBuffer> &named, CommAction::Kind kind) {
    for (const NamedBuffer &n : named)
      if (n.isTransfer() && n.program == program.name) {
        ProgramComms::Item item;
        item.action.kind = kind;
        item.action.channel = pointToPointTag(n.transfer, 0, channels);
        item.action.bytes = plan.buffers[n.buffer].bytes();
        item.action.what = "hand-over " + n.name;
        item.action.loc = program.name;
        comms.items.push_back(std::move(item));
      }
  };
  handOvers(plan.inputs, CommAction::Kind::Recv);
  for (const StepDesc &step : program.steps) {
    if (!communicates(step.op))
      continue;
    ProgramComms::Item item;
    item.step = &step;
    item.attrs = attrsOf(step);
    CommAction &a = item.action;
    a.loc = step.loc;
    if (hasTrait(step.op, PlanTrait::GroupCollective)) {
      a.what = describeCollective(plan, step, item.attrs);
    } else { // point-to-point
      a.kind = step.op == OpKind::Send ? CommAction::Kind::Send : CommAction::Kind::Recv;
      a.channel = pointToPointTag(item.attrs.channel, 0, channels);
      const std::vector<int> &values = a.kind == CommAction::Kind::Send ? step.inputs : step.outputs;
      if (values.size() != 1)
        throw RuntimeError(std::string(opName(step.op)) + " at " + step.loc + " must carry one value");
      a.bytes = plan.buffers[values[0]].bytes();
      a.what = std::string(opName(step.op)) + " " + shapeText(plan.buffers[values[0]]);
    }
    comms.items.push_back(std::move(item));
  }
  handOvers(plan.outputs, CommAction::Kind::Send);
  return comms;
}

/// `comms` as rank `r` runs them for `microbatch`, appended to `list` (locations prefixed).
void appendRankActions(const Plan &plan, const ProgramComms &comms, RankGroups &groups, int r, int64_t microbatch,
                       int64_t channels, const std::string &prefix, std::vector<CommAction> &list) {
  for (const ProgramComms::Item &item : comms.items) {
    CommAction a = item.action;
    a.loc = prefix + a.loc;
    if (a.kind != CommAction::Kind::Collective)
      a.channel += microbatch * channels; // pointToPointTag is linear in the microbatch
    if (!item.step) {
      a.peer = r;
    } else if (a.kind != CommAction::Kind::Collective) {
      a.peer = peerOf(plan, r, *item.step, item.attrs);
    } else {
      a.group = groups.over(item.attrs.meshAxes);
    }
    list.push_back(std::move(a));
  }
}

} // namespace

std::vector<CommAction> programCommActions(const Plan &plan, const RankProgram &program, int r, int64_t microbatch,
                                           int64_t channels) {
  std::vector<CommAction> list;
  RankGroups groups(plan, r);
  appendRankActions(plan, programComms(plan, program, channels), groups, r, microbatch, channels, "", list);
  return list;
}

std::vector<std::vector<CommAction>> commActions(const Plan &plan, const std::string &name) {
  std::vector<std::vector<CommAction>> ranks(std::max(plan.worldSize, 1));
  const int64_t channels = std::max<int64_t>(plan.pointToPointChannels(), 1);
  for (const RankProgram &program : plan.programs) {
    if (program.name != name)
      continue;
    ProgramComms comms = programComms(plan, program, channels); // once, not once per rank
    for (int r = 0; r < (int)ranks.size(); ++r)
      if (plan.runsOn(program, r)) {
        RankGroups groups(plan, r);
        appendRankActions(plan, comms, groups, r, 0, channels, "", ranks[r]);
      }
  }
  return ranks;
}

const RankProgram &pipelineProgram(const Plan &plan, int rank, ProgramPhase phase, int64_t chunk) {
  for (const RankProgram &p : plan.programs)
    if (p.phase == phase && (chunk < 0 || p.chunk == chunk) && plan.runsOn(p, rank))
      return p;
  throw RuntimeError("the plan has no " + std::string(roleName(phase)) + " program" +
                     (chunk >= 0 ? " of chunk " + std::to_string(chunk) : std::string()) + " for rank " +
                     std::to_string(rank));
}

std::vector<std::vector<CommAction>> pipelineCommActions(const Plan &plan, const PipelineSchedule &schedule) {
  std::vector<std::vector<CommAction>> ranks(std::max(plan.worldSize, 1));
  std::vector<std::string> axis{"pp"};
  const int64_t channels = std::max<int64_t>(plan.pointToPointChannels(), 1);
  std::map<const RankProgram *, ProgramComms> comms; // each program's, listed once
  auto commsOf = [&](const RankProgram &p) -> const ProgramComms & {
    auto [it, added] = comms.try_emplace(&p);
    if (added)
      it->second = programComms(plan, p, channels);
    return it->second;
  };
  for (int r = 0; r < (int)ranks.size(); ++r) {
    int64_t stage = plan.shardIndex(r, axis);
    if (stage < 0 || stage >= (int64_t)schedule.actions.size())
      throw RuntimeError("rank " + std::to_string(r) + " has no pipeline action list");
    std::map<std::pair<bool, int64_t>, const RankProgram *> programOf; // (backward, chunk)
    RankGroups groups(plan, r); // found once per rank, not per microbatch
    for (const PipelineAction &a : schedule.actions[stage]) {
      auto [it, added] = programOf.try_emplace({a.backward, a.chunk}, nullptr);
      if (added)
        it->second = &pipelineProgram(plan, r, a.backward ? ProgramPhase::Backward : ProgramPhase::Forward, a.chunk);
      std::string prefix =
          std::string(a.backward ? "B" : "F") + std::to_string(a.chunk) + "." + std::to_string(a.microbatch) + " ";
      appendRankActions(plan, commsOf(*it->second), groups, r, a.microbatch, channels, prefix, ranks[r]);
    }
    if (schedule.forwardOnly()) // inference: no update follows
      continue;
    appendRankActions(plan, commsOf(pipelineProgram(plan, r, ProgramPhase::Apply, -1)), groups, r, 0, channels, "",
                      ranks[r]);
  }
  return ranks;
}

std::string checkSchedule(const std::vector<std::vector<CommAction>> &ranks, std::vector<int64_t> *sendPeakBytes) {
  const int n = ranks.size();
  std::vector<int64_t> sending(n, 0);
  if (sendPeakBytes)
    sendPeakBytes->assign(n, 0);
  std::vector<size_t> pc(n, 0);
  // Sent and not yet received, per (from, to, channel), in order.
  std::map<std::tuple<int, int, int64_t>, std::deque<const CommAction *>> inFlight;
  auto next = [&](int r) -> const CommAction * { return pc[r] < ranks[r].size() ? &ranks[r][pc[r]] : nullptr; };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const CommAction *a = next(r);
      if (!a)
        continue;
      if (a->kind == CommAction::Kind::Collective) {
        if (std::find(a->group.begin(), a->group.end(), r) == a->group.end())
          return "rank " + std::to_string(r) + " issues " + a->what + " (" + a->loc + ") over a group without it";
        // Complete when every member is at a collective of this group; they must be the same.
        bool ready = true;
        for (int m : a->group) {
          const CommAction *b = m < n ? next(m) : nullptr;
          if (!b || b->kind != CommAction::Kind::Collective || b->group != a->group) {
            ready = false;
            break;
          }
          if (b->what != a->what)
            return "ranks " + std::to_string(r) + " and " + std::to_string(m) +
                   " disagree on their next collective over the same ranks: rank " + std::to_string(r) + " issues " +
                   a->what + " (" + a->loc + "), rank " + std::to_string(m) + " issues " + b->what + " (" + b->loc +
                   ")";
        }
        if (ready) {
          for (int m : a->group)
            ++pc[m];
          progress = true;
        }
      } else if (a->kind == CommAction::Kind::Send) { // buffered: completes at once
        inFlight[{r, a->peer, a->channel}].push_back(a);
        if (a->peer != r) { // a hand-over to itself is no message
          sending[r] += a->bytes;
          if (sendPeakBytes)
            (*sendPeakBytes)[r] = std::max((*sendPeakBytes)[r], sending[r]);
        }
        ++pc[r];
        progress = true;
      } else {
        auto it = inFlight.find({a->peer, r, a->channel});
        if (it != inFlight.end() && !it->second.empty()) {
          const CommAction *sent = it->second.front();
          if (sent->bytes != a->bytes)
            return "rank " + std::to_string(a->peer) + " sends " + std::to_string(sent->bytes) + " B to rank " +
                   std::to_string(r) + " on channel " + std::to_string(a->channel) + " (" + sent->loc +
                   ") but the receive takes " + std::to_string(a->bytes) + " B (" + a->loc + ")";
          if (a->peer != r)
            sending[a->peer] -= sent->bytes;
          it->second.pop_front();
          ++pc[r];
          progress = true;
        }
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < n; ++r)
    if (const CommAction *a = next(r))
      stuck += (stuck.empty() ? "" : "; ") + describe(r, *a);
  if (!stuck.empty())
    return "the ranks would wait forever: " + stuck;
  for (const auto &[key, queue] : inFlight)
    if (!queue.empty())
      return "rank " + std::to_string(std::get<0>(key)) + " sends " + queue.front()->what + " (" + queue.front()->loc +
             ") that rank " + std::to_string(std::get<1>(key)) + " never receives";
  return "";
}

std::string checkPlanSchedule(const Plan &plan, std::vector<int64_t> *sendPeakBytes) {
  if (std::optional<PipelineSchedule> pipeline = planPipelineSchedule(plan)) {
    const PipelineSchedule &schedule = *pipeline;
    std::string problem = checkSchedule(pipelineCommActions(plan, schedule), sendPeakBytes);
    return problem.empty() ? "" : "pipeline schedule " + std::string(scheduleName(schedule.kind)) + ": " + problem;
  }
  std::set<std::string> names;
  for (const RankProgram &p : plan.programs)
    names.insert(p.name);
  for (const std::string &name : names) {
    std::string problem = checkSchedule(commActions(plan, name));
    if (!problem.empty())
      return "program " + name + ": " + problem;
  }
  return "";
}

} // namespace cpc
