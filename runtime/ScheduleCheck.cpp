//===- ScheduleCheck.cpp --------------------------------------------------===//
#include "runtime/ScheduleCheck.h"

#include <algorithm>
#include <set>

namespace cpc {

namespace {

/// A step's attributes as an object (a step without any may hold null).
const nlohmann::json &attrsOf(const StepDesc &step) {
  static const nlohmann::json empty = nlohmann::json::object();
  return step.attrs.is_object() ? step.attrs : empty;
}

const std::set<std::string> kCollectives = {"cpc.all_reduce", "cpc.all_gather", "cpc.reduce_scatter",
                                            "cpc.all_to_all"};

std::string shapeText(const BufferDesc &b) {
  std::string s = std::string(dtypeName(b.dtype)) + "[";
  for (size_t i = 0; i < b.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(b.shape[i]);
  return s + "]";
}

/// What every member of a collective must agree on: the op, its axes and reduction, the values.
std::string describeCollective(const Plan &plan, const StepDesc &step) {
  std::string s = step.op;
  if (attrsOf(step).contains("kind"))
    s += " " + attrsOf(step)["kind"].get<std::string>();
  for (int in : step.inputs)
    s += " " + shapeText(plan.buffers[in]);
  return s;
}

/// The world rank at `rank`'s coordinates with axis `axis` set to `peer`.
int peerOf(const Plan &plan, int rank, const StepDesc &step) {
  const std::string axis = attrsOf(step).value("axis", std::string());
  int64_t peer = attrsOf(step).value("peer", int64_t(-1));
  auto it = std::find(plan.meshAxes.begin(), plan.meshAxes.end(), axis);
  if (it == plan.meshAxes.end())
    throw RuntimeError(step.op + " at " + step.loc + ": the mesh has no axis '" + axis + "'");
  size_t d = it - plan.meshAxes.begin();
  if (peer < 0 || peer >= plan.meshShape[d])
    throw RuntimeError(step.op + " at " + step.loc + ": peer " + std::to_string(peer) + " is outside axis '" +
                       axis + "'");
  std::vector<int64_t> coords = meshCoordinates(rank, plan.meshShape);
  coords[d] = peer;
  int64_t world = meshRank(coords, plan.meshShape);
  if (world == rank)
    throw RuntimeError(step.op + " at " + step.loc + ": rank " + std::to_string(rank) + " would talk to itself");
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

std::vector<std::vector<CommAction>> commActions(const Plan &plan, const std::string &name) {
  std::vector<std::vector<CommAction>> ranks(std::max(plan.worldSize, 1));
  for (int r = 0; r < (int)ranks.size(); ++r)
    for (const RankProgram &program : plan.programs) {
      if (program.name != name || !plan.runsOn(program, r))
        continue;
      for (const StepDesc &step : program.steps) {
        CommAction a;
        a.loc = step.loc;
        if (kCollectives.count(step.op)) {
          a.what = describeCollective(plan, step);
          auto axes = attrsOf(step).value("axes", std::vector<std::string>{});
          a.group = plan.meshShape.empty() ? std::vector<int>{0} : plan.shardGroup(r, axes);
        } else if (step.op == "cpc.send" || step.op == "cpc.recv") {
          a.kind = step.op == "cpc.send" ? CommAction::Kind::Send : CommAction::Kind::Recv;
          a.peer = peerOf(plan, r, step);
          a.channel = attrsOf(step).value("channel", int64_t(0));
          const std::vector<int> &values = a.kind == CommAction::Kind::Send ? step.inputs : step.outputs;
          if (values.size() != 1)
            throw RuntimeError(step.op + " at " + step.loc + " must carry one value");
          int buffer = values[0];
          a.bytes = plan.buffers[buffer].bytes();
          a.what = step.op + " " + shapeText(plan.buffers[buffer]);
        } else {
          continue;
        }
        ranks[r].push_back(std::move(a));
      }
    }
  return ranks;
}

std::string checkSchedule(const std::vector<std::vector<CommAction>> &ranks) {
  const int n = ranks.size();
  std::vector<size_t> pc(n, 0);
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
      } else if (a->kind == CommAction::Kind::Send) {
        const CommAction *b = a->peer >= 0 && a->peer < n ? next(a->peer) : nullptr;
        if (b && b->kind == CommAction::Kind::Recv && b->peer == r && b->channel == a->channel) {
          if (b->bytes != a->bytes)
            return "rank " + std::to_string(r) + " sends " + std::to_string(a->bytes) + " B to rank " +
                   std::to_string(a->peer) + " on channel " + std::to_string(a->channel) + " (" + a->loc +
                   ") but the receive takes " + std::to_string(b->bytes) + " B (" + b->loc + ")";
          ++pc[r];
          ++pc[a->peer];
          progress = true;
        }
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < n; ++r)
    if (const CommAction *a = next(r))
      stuck += (stuck.empty() ? "" : "; ") + describe(r, *a);
  return stuck.empty() ? "" : "the ranks would wait forever: " + stuck;
}

std::string checkPlanSchedule(const Plan &plan) {
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
