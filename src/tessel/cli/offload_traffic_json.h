// SPDX-License-Identifier: Apache-2.0
// One step's predicted tier traffic in the names `tessel train` writes to train.jsonl
// (offload_nvme_read_bytes, ...), for `tessel plan offload --json` and `plan search --offload
// --json`, so a run's figures and the prediction read alike.
#pragma once

#include <nlohmann/json.hpp>

#include "tessel/plan/offload_model.h"

namespace tessel::cli {

inline nlohmann::json offload_traffic_json(const plan::OffloadTraffic& t) {
  return {{"offload_nvme_read_bytes", t.nvme_read_bytes},
          {"offload_nvme_write_bytes", t.nvme_write_bytes},
          {"offload_h2d_bytes", t.h2d_bytes},
          {"offload_d2h_bytes", t.d2h_bytes},
          {"offload_evictions", t.evictions},
          {"offload_clean_evictions", t.clean_evictions}};
}

}  // namespace tessel::cli
