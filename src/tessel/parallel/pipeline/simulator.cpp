// SPDX-License-Identifier: Apache-2.0
// Validation in two passes. The static pass walks each rank's list in order and records what the
// rank holds (activations computed or received, gradients computed or received), which is all a
// compute may use since a rank runs its list in order. The dynamic pass runs the ranks in
// simulated time: a receive blocks until its message was sent, and a rank retires its sends after
// the first compute that follows them (or at its list's end), which blocks until each receiver
// has posted the receive (at the start of the compute before it: the executor's post-ahead), so
// the ranks are advanced in turn until none can move; whatever is left unfinished is a deadlock.
#include "tessel/parallel/pipeline/simulator.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "tessel/core/error.h"

namespace tessel::parallel::pipeline {
namespace {

using detail::concat;
using StageMb = std::pair<int, int>;           // (stage, micro-batch)
using MessageKey = std::tuple<int, int, int>;  // (0 activation / 1 gradient, stage, micro-batch)

struct Where {
  int rank = 0;
  int index = 0;
};

bool is_gradient_message(ActionKind kind) {
  return kind == ActionKind::SendGradient || kind == ActionKind::RecvGradient;
}

MessageKey message_key(const Action& action) {
  return {is_gradient_message(action.kind) ? 1 : 0, action.stage, action.microbatch};
}

class Validator {
 public:
  Validator(const Schedule& schedule, const Costs& costs, Simulation& result)
      : s_(schedule), costs_(costs), result_(result) {}

  void run() {
    TESSEL_CHECK(s_.ranks >= 1 && s_.virtual_stages >= 1 && s_.microbatches >= 1,
                 "pipeline simulate: bad sizes ranks=", s_.ranks, " v=", s_.virtual_stages,
                 " m=", s_.microbatches);
    TESSEL_CHECK(static_cast<int>(s_.actions.size()) == s_.ranks,
                 "pipeline simulate: ", s_.actions.size(), " action lists for ", s_.ranks,
                 " ranks");
    TESSEL_CHECK(costs_.forward >= 0 && costs_.backward >= 0 && costs_.comm >= 0,
                 "pipeline simulate: negative cost f=", costs_.forward, " b=", costs_.backward,
                 " c=", costs_.comm);
    for (const auto* v : {&costs_.stage_forward, &costs_.stage_backward}) {
      TESSEL_CHECK(v->empty() || static_cast<int>(v->size()) == s_.num_stages(),
                   "pipeline simulate: ", v->size(), " per-stage costs for ", s_.num_stages(),
                   " stages");
      for (double c : *v) TESSEL_CHECK(c >= 0, "pipeline simulate: negative stage cost ", c);
    }
    valid_.resize(static_cast<size_t>(s_.ranks));
    for (int rank = 0; rank < s_.ranks; ++rank) {
      check_rank_order(rank);
    }
    check_counts();
    check_messages();
    find_retirements();
    simulate_time();
  }

 private:
  const Action& action(int rank, int index) const {
    return s_.actions[static_cast<size_t>(rank)][static_cast<size_t>(index)];
  }

  std::string where(int rank, int index) const {
    return concat("rank ", rank, " action #", index, " (", to_string(action(rank, index)), ")");
  }

  void error(int rank, int index, const std::string& what) {
    result_.errors.push_back(concat(where(rank, index), ": ", what));
  }

  bool in_range(int rank, int index) {
    const Action& a = action(rank, index);
    if (a.stage < 0 || a.stage >= s_.num_stages()) {
      error(rank, index, concat("stage out of range [0, ", s_.num_stages(), ")"));
      return false;
    }
    if (a.microbatch < 0 || a.microbatch >= s_.microbatches) {
      error(rank, index, concat("micro-batch out of range [0, ", s_.microbatches, ")"));
      return false;
    }
    if (!is_compute(a.kind) && (a.peer < 0 || a.peer >= s_.ranks)) {
      error(rank, index, concat("peer out of range [0, ", s_.ranks, ")"));
      return false;
    }
    return true;
  }

  void expect_owner(int rank, int index, int stage, int expected_rank, const char* role) {
    if (s_.owner(stage) != expected_rank) {
      error(rank, index,
            concat(role, " stage ", stage, " is on rank ", s_.owner(stage), ", not rank ",
                   expected_rank));
    }
  }

  void check_rank_order(int rank) {
    const auto& list = s_.actions[static_cast<size_t>(rank)];
    auto& valid = valid_[static_cast<size_t>(rank)];
    valid.assign(list.size(), false);
    std::set<StageMb> forwarded, backwarded, activations_in, gradients_in;
    const int last = s_.num_stages() - 1;
    for (int k = 0; k < static_cast<int>(list.size()); ++k) {
      if (!in_range(rank, k)) {
        continue;
      }
      valid[static_cast<size_t>(k)] = true;
      const Action& a = list[static_cast<size_t>(k)];
      const int st = a.stage;
      const int mb = a.microbatch;
      switch (a.kind) {
        case ActionKind::Forward:
          expect_owner(rank, k, st, rank, "computed");
          if (st > 0 && !forwarded.count({st - 1, mb}) && !activations_in.count({st - 1, mb})) {
            error(rank, k,
                  concat("forward without its input: no RecvActivation mb", mb, " s", st - 1,
                         " (or local forward of stage ", st - 1, ") earlier on rank ", rank));
          }
          forwarded.insert({st, mb});
          forwards_[{st, mb}].push_back({rank, k});
          break;
        case ActionKind::Backward:
          expect_owner(rank, k, st, rank, "computed");
          if (!forwarded.count({st, mb})) {
            error(rank, k,
                  concat("backward before its forward: no F mb", mb, " s", st, " earlier on rank ",
                         rank));
          }
          if (st < last && !backwarded.count({st + 1, mb}) && !gradients_in.count({st + 1, mb})) {
            error(rank, k,
                  concat("backward without its output gradient: no RecvGradient mb", mb, " s",
                         st + 1, " (or local backward) earlier on rank ", rank));
          }
          backwarded.insert({st, mb});
          backwards_[{st, mb}].push_back({rank, k});
          break;
        case ActionKind::SendActivation:
          expect_owner(rank, k, st, rank, "producing");
          if (st == last) {
            error(rank, k, "the last stage has no next stage to send an activation to");
          } else {
            expect_owner(rank, k, st + 1, a.peer, "consuming");
          }
          if (!forwarded.count({st, mb})) {
            error(rank, k, "sends an activation not produced yet: no earlier forward");
          }
          sends_[message_key(a)].push_back({rank, k});
          break;
        case ActionKind::RecvActivation:
          expect_owner(rank, k, st, a.peer, "producing");
          if (st == last) {
            error(rank, k, "the last stage's activation goes to the loss, not to a rank");
          } else {
            expect_owner(rank, k, st + 1, rank, "consuming");
          }
          activations_in.insert({st, mb});
          recvs_[message_key(a)].push_back({rank, k});
          break;
        case ActionKind::SendGradient:
          expect_owner(rank, k, st, rank, "producing");
          if (st == 0) {
            error(rank, k, "the first stage has no previous stage to send a gradient to");
          } else {
            expect_owner(rank, k, st - 1, a.peer, "consuming");
          }
          if (!backwarded.count({st, mb})) {
            error(rank, k, "sends a gradient not produced yet: no earlier backward");
          }
          sends_[message_key(a)].push_back({rank, k});
          break;
        case ActionKind::RecvGradient:
          expect_owner(rank, k, st, a.peer, "producing");
          if (st == 0) {
            error(rank, k, "the first stage produces no input gradient for another stage");
          } else {
            expect_owner(rank, k, st - 1, rank, "consuming");
          }
          gradients_in.insert({st, mb});
          recvs_[message_key(a)].push_back({rank, k});
          break;
      }
    }
  }

  void check_once(const std::map<StageMb, std::vector<Where>>& done, const char* what) {
    for (int st = 0; st < s_.num_stages(); ++st) {
      for (int mb = 0; mb < s_.microbatches; ++mb) {
        auto it = done.find({st, mb});
        if (it == done.end()) {
          result_.errors.push_back(concat("missing ", what, " of mb", mb, " s", st, " (rank ",
                                          s_.owner(st), " never computes it)"));
        } else if (it->second.size() > 1) {
          std::string places;
          for (const Where& w : it->second) {
            places += concat(places.empty() ? "" : ", ", "rank ", w.rank, " action #", w.index);
          }
          result_.errors.push_back(
              concat("duplicate ", what, " of mb", mb, " s", st, ": at ", places));
        }
      }
    }
  }

  void check_counts() {
    check_once(forwards_, "forward");
    check_once(backwards_, "backward");
  }

  // Message identities per ordered pair of ranks, in list order, for Simulation::in_order.
  std::map<std::pair<int, int>, std::vector<MessageKey>> pair_order(bool sending) const {
    std::map<std::pair<int, int>, std::vector<MessageKey>> order;
    for (int rank = 0; rank < s_.ranks; ++rank) {
      const auto& list = s_.actions[static_cast<size_t>(rank)];
      for (size_t k = 0; k < list.size(); ++k) {
        const Action& a = list[k];
        if (valid_[static_cast<size_t>(rank)][k] && (sending ? is_send(a.kind) : is_recv(a.kind))) {
          auto pair = sending ? std::pair{rank, a.peer} : std::pair{a.peer, rank};
          order[pair].push_back(message_key(a));
        }
      }
    }
    return order;
  }

  void check_messages() {
    result_.in_order = pair_order(true) == pair_order(false);
    for (const auto& [key, senders] : sends_) {
      auto it = recvs_.find(key);
      const Where& w = senders.front();
      if (it == recvs_.end()) {
        error(w.rank, w.index,
              concat("no matching receive on rank ", action(w.rank, w.index).peer));
      }
      for (size_t i = 1; i < senders.size(); ++i) {
        error(senders[i].rank, senders[i].index,
              concat("duplicate send, already sent by ", where(w.rank, w.index)));
      }
    }
    for (const auto& [key, receivers] : recvs_) {
      const Where& w = receivers.front();
      if (!sends_.count(key)) {
        error(w.rank, w.index, concat("no matching send on rank ", action(w.rank, w.index).peer));
      }
      for (size_t i = 1; i < receivers.size(); ++i) {
        error(receivers[i].rank, receivers[i].index,
              concat("duplicate receive, already received by ", where(w.rank, w.index)));
      }
    }
  }

  // Per send: the compute after which it is retired (n: at the list's end), and the receiver's
  // action whose start posts its receive (the compute before it; -1: before the first action).
  void find_retirements() {
    retire_at_.assign(static_cast<size_t>(s_.ranks), {});
    for (int rank = 0; rank < s_.ranks; ++rank) {
      const auto& list = s_.actions[static_cast<size_t>(rank)];
      const int n = static_cast<int>(list.size());
      for (int k = 0; k < n; ++k) {
        const bool send = valid_[static_cast<size_t>(rank)][static_cast<size_t>(k)] &&
                          is_send(list[static_cast<size_t>(k)].kind);
        auto it = send ? recvs_.find(message_key(list[static_cast<size_t>(k)])) : recvs_.end();
        if (it == recvs_.end()) continue;  // not a send, or one check_messages reported
        int at = k + 1;
        while (at < n && !is_compute(list[static_cast<size_t>(at)].kind)) ++at;
        const Where& r = it->second.front();
        int post = r.index - 1;
        while (post >= 0 && !is_compute(action(r.rank, post).kind)) --post;
        retire_at_[static_cast<size_t>(rank)][at].push_back({k, {r.rank, post}});
      }
    }
  }

  // Whether `rank` may pass retirement point `at`: its receives posted (`now`: the last posting).
  bool retired(int rank, int at, const std::vector<int>& pc, double& now, int* blocked_on) {
    const auto& due = retire_at_[static_cast<size_t>(rank)];
    auto it = due.find(at);
    if (it == due.end()) return true;
    for (const auto& [send, post] : it->second) {
      if (post.index < 0) continue;
      if (pc[static_cast<size_t>(post.rank)] <= post.index) {
        if (blocked_on) *blocked_on = send;
        return false;
      }
      now = std::max(
          now,
          result_.timeline[static_cast<size_t>(post.rank)][static_cast<size_t>(post.index)].start);
    }
    return true;
  }

  double duration(const Action& a) const {
    switch (a.kind) {
      case ActionKind::Forward:
        return costs_.forward_of(a.stage);
      case ActionKind::Backward:
        return costs_.backward_of(a.stage);
      case ActionKind::SendActivation:
      case ActionKind::SendGradient:
        return costs_.comm;
      default:
        return 0.0;
    }
  }

  // Advances `rank` as far as it can; returns whether it moved at all.
  bool advance(int rank, std::vector<int>& pc, std::vector<double>& clock) {
    const auto& list = s_.actions[static_cast<size_t>(rank)];
    auto& timeline = result_.timeline[static_cast<size_t>(rank)];
    int& k = pc[static_cast<size_t>(rank)];
    double& now = clock[static_cast<size_t>(rank)];
    bool moved = false;
    while (k < static_cast<int>(list.size())) {
      const Action& a = list[static_cast<size_t>(k)];
      if (k > 0 && !retired(rank, k - 1, pc, now, nullptr)) break;
      double end = now;
      if (valid_[static_cast<size_t>(rank)][static_cast<size_t>(k)]) {
        if (is_recv(a.kind)) {
          auto it = arrival_.find(message_key(a));
          if (it == arrival_.end()) {
            break;  // blocked until the sender issues the message
          }
          end = std::max(now, it->second);
        } else {
          end = now + duration(a);
          if (is_send(a.kind)) {
            arrival_.emplace(message_key(a), end);
          }
        }
      }
      timeline.push_back({k, now, end});
      now = end;
      ++k;
      moved = true;
    }
    const int n = static_cast<int>(list.size());
    if (k == n && !done_[static_cast<size_t>(rank)] &&
        (n == 0 || retired(rank, n - 1, pc, now, nullptr)) && retired(rank, n, pc, now, nullptr)) {
      done_[static_cast<size_t>(rank)] = true;
      moved = true;
    }
    return moved;
  }

  void report_deadlock(const std::vector<int>& pc) {
    std::vector<int> waits_on(static_cast<size_t>(s_.ranks), -1);
    for (int rank = 0; rank < s_.ranks; ++rank) {
      const int k = pc[static_cast<size_t>(rank)];
      const int n = static_cast<int>(s_.actions[static_cast<size_t>(rank)].size());
      if (done_[static_cast<size_t>(rank)]) {
        continue;
      }
      // Stuck retiring a send: after the compute before `k`, or at the end of its list.
      int send = -1;
      double unused = 0;
      if ((k > 0 && !retired(rank, k - 1, pc, unused, &send)) ||
          (k == n && !retired(rank, n, pc, unused, &send))) {
        const Where& r = recvs_.at(message_key(action(rank, send))).front();
        const int at = pc[static_cast<size_t>(r.rank)];  // the receiver is stuck there
        waits_on[static_cast<size_t>(rank)] = r.rank;
        error(rank, send,
              concat("deadlock: retiring this send after the next compute waits for ",
                     where(r.rank, r.index),
                     " to be posted (at the compute before it), which "
                     "rank ",
                     r.rank, " never reaches: it is stuck at ",
                     at < static_cast<int>(s_.actions[static_cast<size_t>(r.rank)].size())
                         ? where(r.rank, at)
                         : "the end of its list"));
        continue;
      }
      auto it = sends_.find(message_key(action(rank, k)));
      if (it == sends_.end()) {
        error(rank, k, "deadlock: stuck on a receive that no rank ever sends");
        continue;
      }
      const Where& sender = it->second.front();
      const int sender_pc = pc[static_cast<size_t>(sender.rank)];
      waits_on[static_cast<size_t>(rank)] = sender.rank;
      error(rank, k,
            concat("deadlock: waits for ", where(sender.rank, sender.index), ", which rank ",
                   sender.rank, " never reaches: it is stuck at ", where(sender.rank, sender_pc)));
    }
    std::set<std::vector<int>> cycles;
    for (int start = 0; start < s_.ranks; ++start) {
      std::vector<int> path;
      int rank = start;
      while (rank >= 0 && std::find(path.begin(), path.end(), rank) == path.end()) {
        path.push_back(rank);
        rank = waits_on[static_cast<size_t>(rank)];
      }
      if (rank < 0) {
        continue;
      }
      std::vector<int> cycle(std::find(path.begin(), path.end(), rank), path.end());
      std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
      cycles.insert(cycle);
    }
    for (const auto& cycle : cycles) {
      std::string text = "deadlock cycle: ";
      for (int rank : cycle) {
        text += concat("rank ", rank, " waits on ");
      }
      result_.errors.push_back(concat(text, "rank ", cycle.front()));
    }
  }

  void simulate_time() {
    const auto ranks = static_cast<size_t>(s_.ranks);
    result_.timeline.assign(ranks, {});
    std::vector<int> pc(ranks, 0);
    std::vector<double> clock(ranks, 0.0);
    done_.assign(ranks, false);
    for (bool moved = true; moved;) {
      moved = false;
      for (int rank = 0; rank < s_.ranks; ++rank) {
        moved = advance(rank, pc, clock) || moved;
      }
    }
    bool finished = true;
    for (size_t r = 0; r < ranks; ++r) {
      finished = finished && done_[r];
    }
    if (!finished) {
      report_deadlock(pc);
    }
    summarize(clock);
  }

  void summarize(const std::vector<double>& clock) {
    const auto ranks = static_cast<size_t>(s_.ranks);
    result_.makespan = *std::max_element(clock.begin(), clock.end());
    result_.compute_time.assign(ranks, 0.0);
    result_.peak_in_flight.assign(ranks, 0);
    double total_compute = 0.0;
    for (size_t r = 0; r < ranks; ++r) {
      int in_flight = 0;
      for (const TimedAction& t : result_.timeline[r]) {
        const Action& a = s_.actions[r][static_cast<size_t>(t.index)];
        if (!is_compute(a.kind)) {
          continue;
        }
        result_.compute_time[r] += t.end - t.start;
        in_flight += a.kind == ActionKind::Forward ? 1 : -1;
        result_.peak_in_flight[r] = std::max(result_.peak_in_flight[r], in_flight);
      }
      total_compute += result_.compute_time[r];
    }
    result_.bubble_fraction =
        result_.makespan > 0 ? 1.0 - total_compute / (s_.ranks * result_.makespan) : 0.0;
  }

  const Schedule& s_;
  const Costs& costs_;
  Simulation& result_;
  std::vector<std::vector<bool>> valid_;  // per rank and action: fields in range
  std::map<StageMb, std::vector<Where>> forwards_, backwards_;
  std::map<MessageKey, std::vector<Where>> sends_, recvs_;
  std::map<MessageKey, double> arrival_;  // message -> time it is available to its receiver
  // Per rank: retirement point -> (send index, the receiver's posting action) retired there.
  std::vector<std::map<int, std::vector<std::pair<int, Where>>>> retire_at_;
  std::vector<bool> done_;  // per rank: every action run and every send retired
};

}  // namespace

std::string Simulation::error_text() const {
  std::string text;
  for (const std::string& e : errors) {
    text += e;
    text += '\n';
  }
  return text;
}

Simulation simulate(const Schedule& schedule, const Costs& costs) {
  Simulation result;
  Validator(schedule, costs, result).run();
  return result;
}

void validate(const Schedule& schedule, const Costs& costs) {
  const Simulation result = simulate(schedule, costs);
  TESSEL_CHECK(result.ok(), "pipeline schedule '", schedule.name, "' (p=", schedule.ranks,
               ", v=", schedule.virtual_stages, ", m=", schedule.microbatches, ") is invalid:\n",
               result.error_text());
}

}  // namespace tessel::parallel::pipeline
