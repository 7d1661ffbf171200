// SPDX-License-Identifier: Apache-2.0
// Deadlines from the environment, and the comparison of peers' records that turns a timeout into
// one message naming who is behind.
#include "tessel/dist/diagnosis.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel::dist {

namespace {

std::optional<double> env_seconds(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  TESSEL_CHECK(end != v && *end == '\0' && s > 0, name, "='", v,
               "' is not a positive number of seconds");
  return s;
}

// Read on every call: atomics, loaded from the environment once.
std::atomic<double> g_steady_s{0}, g_first_s{0};
std::once_flag g_loaded;

void load_timeouts() {
  std::call_once(g_loaded, [] {
    CommTimeouts t = CommTimeouts::from_env();
    g_steady_s.store(t.steady_s);
    g_first_s.store(t.first_s);
  });
}

std::string who(const CommInfo& comm, int r) {
  std::ostringstream out;
  out << "rank " << r;
  if (r < int(comm.world_ranks.size())) out << " [world " << comm.world_ranks[size_t(r)] << "]";
  return out.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

}  // namespace

bool same_call(const Record& a, const Record& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.reduce == b.reduce &&
         (a.kind != OpKind::Broadcast || a.peer == b.peer);
}

CommTimeouts CommTimeouts::from_env() {
  CommTimeouts t;
  if (auto s = env_seconds("TESSEL_COMM_TIMEOUT")) t.steady_s = *s;
  if (auto s = env_seconds("TESSEL_COMM_FIRST_TIMEOUT")) {
    t.first_s = *s;
  } else {
    t.first_s = std::max(t.first_s, t.steady_s);
  }
  t.first_s = std::max(t.first_s, t.steady_s);
  return t;
}

CommTimeouts comm_timeouts() {
  load_timeouts();
  return {g_steady_s.load(std::memory_order_relaxed), g_first_s.load(std::memory_order_relaxed)};
}

void set_comm_timeouts(const CommTimeouts& t) {
  TESSEL_CHECK(t.steady_s > 0 && t.first_s > 0,
               "set_comm_timeouts: deadlines must be positive, got ", t.steady_s, " s and ",
               t.first_s, " s (first call)");
  load_timeouts();
  g_steady_s.store(t.steady_s);
  g_first_s.store(t.first_s);
}

double diagnosis_answer_timeout(const CommTimeouts& t) {
  return std::clamp(t.steady_s / 2, 0.5, 5.0);
}

HangReport diagnose_hang(const Record& stuck, const CommInfo& comm, double waited_s,
                         double deadline_s, std::span<const PeerReply> peers) {
  HangReport rep;
  std::ostringstream out, details;
  out << describe(stuck) << " on axis '" << stuck.label.data() << "' did not complete within "
      << deadline_s << " s (" << who(comm, comm.rank) << " of " << comm.size << " waited ";
  out.precision(3);
  out << waited_s << " s).";
  const bool p2p = !is_collective(stuck.kind);
  rep.reporter = comm.rank;
  for (int r = 0; r < comm.size; ++r) {
    if (r == comm.rank) {
      rep.reached.push_back(r);
      continue;
    }
    if (p2p && r != stuck.peer) continue;
    const PeerReply& p = peers[size_t(r)];
    if (!p.answered) {
      rep.unresponsive.push_back(r);
      details << " No answer from " << who(comm, r) << " (dead, or stuck outside tessel).";
      continue;
    }
    std::string last = p.has_last ? describe(p.last) : std::string("nothing");
    if (p2p) {
      rep.not_reached.push_back(r);
      details << " Peer " << who(comm, r) << ": last point-to-point call on '" << stuck.label.data()
              << "': " << last << "; now " << p.now.data() << ".";
    } else if (p.has_at && same_call(p.at, stuck)) {
      rep.reached.push_back(r);
      if (p.at.state != OpState::Done) rep.reporter = std::min(rep.reporter, r);
    } else if (p.has_at) {
      rep.different_op.push_back(r);
      if (p.at.state != OpState::Done) rep.reporter = std::min(rep.reporter, r);
      details << " At a different op: " << who(comm, r) << " issued #" << stuck.seq << " as "
              << describe(p.at) << "; now " << p.now.data() << ".";
    } else if (p.last_seq < stuck.seq) {
      rep.not_reached.push_back(r);
      details << " Not reached by " << who(comm, r) << ": last issued on '" << stuck.label.data()
              << "': " << last << "; now " << p.now.data() << ".";
    } else {
      rep.reached.push_back(r);  // its record has left the ring: it issued the call long ago
    }
  }
  out << details.str();
  if (!p2p) out << " Reached by " << rank_list(rep.reached) << ".";
  if (rep.not_reached.empty() && rep.different_op.empty() && rep.unresponsive.empty())
    out << " Every rank reached it: the transport itself is stuck or very slow.";
  rep.message = out.str();
  return rep;
}

}  // namespace tessel::dist
