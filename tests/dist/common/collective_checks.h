// SPDX-License-Identifier: Apache-2.0
// Checks of every collective against values computed locally, shared by the in-process tests
// (GoogleTest, threads as ranks) and the multi-process programs launched by mpirun: the same
// expectations hold for every backend.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/dist/mesh.h"

namespace tessel::dist::testing {

// Counts failures and keeps the first few messages (what differed, where).
class CheckLog {
 public:
  void expect(bool ok, const std::string& what);
  int checks() const { return checks_; }
  int failures() const { return failures_; }
  std::string report() const { return detail_.str(); }

 private:
  int checks_ = 0, failures_ = 0;
  std::ostringstream detail_;
};

inline const std::vector<int64_t> kOddCounts = {1, 7, 13, 33, 257};
inline const std::vector<DType> kCommDTypes = {DType::F32, DType::BF16, DType::F16, DType::I32,
                                               DType::I64, DType::F64,  DType::I8};

// Every collective, in-place and out-of-place, for each count and dtype.
void check_collectives(Communicator& comm, CheckLog& log,
                       const std::vector<int64_t>& counts = kOddCounts,
                       const std::vector<DType>& dtypes = kCommDTypes);
// Asynchronous calls: several in flight, local work meanwhile, waits in another order, blocking
// calls interleaved, receives posted before their sends.
void check_async(Communicator& comm, CheckLog& log);
// Every axis and group-of-axes communicator of a mesh: size, rank, members, and a few collectives.
void check_mesh(const DeviceMesh& mesh, CheckLog& log);

// The end of a multi-process check: each rank prints what failed, failures and checks are summed
// over `world` (a collective) and rank 0 prints the totals. Every rank gets the same exit code, 0
// only when nothing failed and something was checked, so one failing rank fails the job.
int agree_on_exit(Communicator& world, const CheckLog& log);

}  // namespace tessel::dist::testing
