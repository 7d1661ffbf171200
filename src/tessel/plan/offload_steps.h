// SPDX-License-Identifier: Apache-2.0
// The offload model's inside (offload_model.h): a rank's chunk layout and the chunk accesses its
// start-up and one step make, as the trainer's offload code makes them. One process (or a
// tensor-parallel rank) in offload_steps.cpp, a ZeRO-3 data-parallel rank's shards in
// offload_zero3.cpp, a ZeRO-1/2 rank's in offload_zero12.cpp (under a pipeline with the schedule's
// holds recorded: OffloadInput::recorded_holds); offload_model.cpp replays them
// against the tiers. Plan-internal.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessel/plan/offload_model.h"

namespace tessel::plan::offload {

enum class Tier { None, Device, Host, Nvme };  // None: freed, no bytes anywhere

struct Event {
  enum Kind { Access, Release, Free } kind;
  int chunk;
  Tier tier;
  bool write;
};

// Appends a step's accesses, releases and frees of chunks to a list of events.
class EventWriter {
 public:
  explicit EventWriter(std::vector<Event>& ev) : ev_(ev) {}
  void access(int c, Tier t, bool write) { ev_.push_back({Event::Access, c, t, write}); }
  void release(int c) { ev_.push_back({Event::Release, c, Tier::None, false}); }
  void free(int c) { ev_.push_back({Event::Free, c, Tier::None, false}); }

 private:
  std::vector<Event>& ev_;
};

// The trainer's chunk lists ("groups"), in the order their names are reported.
enum Group { kCopy, kParam, kBucket, kGrad, kMomentM, kMomentV, kNumGroups };
inline constexpr const char* kGroupNames[] = {"param16", "param",  "grad_bucket",
                                              "grad",    "adam_m", "adam_v"};

inline constexpr int64_t kIoAlignment = 4096;    // memory/memory_config.h
inline constexpr int64_t kTensorAlignment = 64;  // a tensor's place in its chunk

inline int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

// Chunk lists filled as ChunkManager::lay_out() fills them: each registration at the next
// 64-byte place of its group's open chunk, a new chunk when it does not fit.
class ChunkLists {
 public:
  explicit ChunkLists(int64_t chunk_bytes) : cb_(chunk_bytes) { open_.fill(-1); }
  // The chunk of a registration of `bytes` in `group`; `name` for the error when it cannot fit.
  int add(int group, int64_t bytes, const std::string& name);
  const std::vector<int>& group_of() const { return group_of_; }  // per chunk
  int64_t bytes() const { return bytes_; }  // the registrations' bytes, padding left out

 private:
  int64_t cb_;
  std::array<int, kNumGroups> open_;
  std::array<int64_t, kNumGroups> used_{};
  std::vector<int> group_of_;
  int64_t bytes_ = 0;
};

// What the trainer does with one rank's chunks: their groups, start-up's accesses after the
// chunks are placed, one step's, and the start-up checks' figures.
struct RankSteps {
  std::vector<int> group_of;  // per chunk
  int64_t state_bytes = 0;
  std::vector<Event> start, step;
  // Steps 1.. that differ from `step` (a pipeline rank's recorded holds), before it repeats.
  std::vector<std::vector<Event>> first_steps;
  int working_set = 0;  // device-tier chunks the trainer requires (its formula)
  int host_row = 0;     // host-tier chunks the update holds at once
};

// The most chunks a step holds in the device tier, as OffloadStrategy::build_units counts them:
// a unit's `held` chunks with those of the units hooked on the first unit's module (the root's
// units; under a pipeline, where no unit is the root's, the first unit alone).
int working_set(const OffloadInput& in, const std::vector<std::vector<int>>& held);

// Appends one step's recorded holds (OffloadInput::recorded_holds) as chunk events:
// `chunk_of(hold)` is the chunk of the bucket tensor held, or -1 where it is plain memory
// (a hold of it is none); a chunk of full buffers is freed once all `buffers[chunk]` in it are
// discarded. A unit's copies (ShardHoldEvent::Copies) go to `copies` (unit, hold or release),
// which writes their chunks' events; none are expected without it.
void append_recorded(const std::vector<ShardHoldEvent>& holds,
                     const std::function<int(const ShardHoldEvent&)>& chunk_of,
                     const std::map<int, int>& buffers, EventWriter& out,
                     const std::function<void(int64_t unit, bool hold)>& copies = {});

// A rank's steps from `write_step(out, recorded)`: without recorded holds one step (`recorded`
// null) into r.step; with them one per recorded step, r.first_steps then r.step (the last, which
// later steps repeat).
using StepEventsWriter =
    std::function<void(std::vector<Event>& out, const std::vector<ShardHoldEvent>* recorded)>;
void write_steps(const OffloadInput& in, RankSteps& r, const StepEventsWriter& write_step);

RankSteps one_process_steps(const OffloadInput& in, int64_t chunk_bytes);
RankSteps zero3_steps(const OffloadInput& in, int64_t chunk_bytes);
RankSteps zero12_steps(const OffloadInput& in, int64_t chunk_bytes);

}  // namespace tessel::plan::offload
