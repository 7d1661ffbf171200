// SPDX-License-Identifier: Apache-2.0
// Calibration: measures the machine tessel runs on into a cluster description (cluster.h) — GEMM
// rates by shape through the CPU backend, memory bandwidth by STREAM's copy and triad (McCalpin
// 1995) on the shared thread pool, and, with two or more ranks, point-to-point and all-reduce
// time per message size over the real communicator, fitted to the alpha-beta model (Hockney
// 1994). Every rank measures at once, as a training step runs, and the slowest rank's figure is
// the device's. `tessel plan calibrate` writes the result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/plan/cluster.h"

namespace tessel::plan {

struct CalibrateOptions {
  bool quick = false;  // a smaller table and shorter timings (tests, a first look)
  // With a directory: the disk memory offload would swap to there, every rank writing and
  // reading a file of its own at once ([storage], calibrate_disk.h); 0 bytes: 1 GiB (256 MiB
  // when quick).
  std::string disk_dir;
  int64_t disk_bytes = 0;
  // Called with one line per figure, on rank 0 only.
  std::function<void(const std::string&)> progress;
};

// A measured line t = alpha + beta * bytes.
struct AlphaBeta {
  double alpha = 0;  // s
  double beta = 0;   // s per byte
};

// Fits (bytes, seconds) points: alpha from the smallest third of the sizes, beta from the largest
// third, each a median, refined against each other, so that a few points delayed by other work
// do not move the line. Both terms stay positive (when noise would make one non-positive, the
// smallest message's time and the slope between the ends are used). Two or more distinct sizes.
AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);

// Collective over `world`: every rank calls it and gets the same description. Ranks on one host
// are the devices of one node (hosts told apart by name); a job whose hosts hold different
// numbers of ranks is refused.
Cluster calibrate(dist::Communicator& world, const CalibrateOptions& options);

}  // namespace tessel::plan
