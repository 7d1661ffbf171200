// SPDX-License-Identifier: Apache-2.0
// Calibration of the disk memory offload swaps to (`tessel plan calibrate --disk DIR`): sequential
// write and then read of one file in 1 MiB requests with direct I/O and several requests in
// flight, as the NVMe tier issues them (docs/MEMORY.md) and as fio's sequential passes measure a
// disk, so the cluster description's [storage] can stand beside fio's figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessel/plan/cluster.h"

namespace tessel::plan {

struct DiskOptions {
  std::string dir;                           // where the test file goes (removed afterwards)
  int64_t bytes = int64_t(1) << 30;          // the file's size
  int64_t request_bytes = int64_t(1) << 20;  // one request
  int in_flight = 8;                         // requests at once (one thread each)
  std::string file_tag = "0";                // told apart per rank
};

struct DiskResult {
  StorageSpec storage;
  bool direct = true;  // false: the file system refused O_DIRECT and the page cache was used
};

// One clear Error when `dir` is missing, not a writable directory or has less than `bytes` free:
// calibration checks this before its other measurements.
void check_disk_dir(const std::string& dir, int64_t bytes);

// One clear Error when `dir` is missing, not a writable directory or has less than `bytes` free:
// calibration checks this before its other measurements.
void check_disk_dir(const std::string& dir, int64_t bytes);

// Writes, syncs, then reads back the file; one clear Error when the directory is missing, not
// writable or has less free space than `bytes`.
DiskResult measure_disk(const DiskOptions& options);

}  // namespace tessel::plan
