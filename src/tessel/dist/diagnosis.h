// SPDX-License-Identifier: Apache-2.0
// Deadlines of blocking calls and the hang diagnosis: given what every peer of a communicator
// reported (its record at the stuck sequence number, its latest record, what it is blocked in),
// one message that names the collective, the axis, and which ranks had not reached it, were at a
// different op, or did not answer.
#pragma once

#include <span>
#include <string>

#include "tessel/dist/record.h"

namespace tessel::dist {

// Deadlines in seconds. The first call on each communicator gets the longer one: it includes
// connection set-up and ranks arriving at different times after start-up or checkpoint loading.
struct CommTimeouts {
  double steady_s = 300;
  double first_s = 600;
  // TESSEL_COMM_TIMEOUT and TESSEL_COMM_FIRST_TIMEOUT (seconds, > 0); throws Error naming the
  // variable on a malformed value. The first deadline is never shorter than the steady one.
  static CommTimeouts from_env();
  double for_record(const Record& r) const { return r.seq <= 1 ? first_s : steady_s; }
};

CommTimeouts comm_timeouts();  // from the environment on first use
void set_comm_timeouts(const CommTimeouts& t);

// How long a rank that timed out waits for its peers' answers.
double diagnosis_answer_timeout(const CommTimeouts& t);

// Exit code of a job ended by the watchdog (as timeout(1)).
inline constexpr int kCommTimeoutExitCode = 124;

// Two ranks issued the same call as far as matching goes (kind, dtype, reduction, root); element
// counts may differ per rank in the v-variants.
bool same_call(const Record& a, const Record& b);

// Classification of every member of the stuck communicator.
struct HangReport {
  std::string message;
  std::vector<int> not_reached, different_op, reached, unresponsive;  // ranks in the communicator
  // The lowest rank still waiting at this sequence number (in this call or a different one): it
  // alone reports, so the job ends with one message instead of one per waiting rank.
  int reporter = 0;
};

// `peers` is indexed by rank in `comm` (this rank's entry is ignored).
HangReport diagnose_hang(const Record& stuck, const CommInfo& comm, double waited_s,
                         double deadline_s, std::span<const PeerReply> peers);

}  // namespace tessel::dist
