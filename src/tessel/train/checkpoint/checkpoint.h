// SPDX-License-Identifier: Apache-2.0
// Crash-safe checkpoint directories. A checkpoint is `run_dir/step_NNNNNN/`, written first under a
// temporary name, with a commit marker (COMMITTED: a JSON manifest of every file's size and
// CRC-32C) written last; every file and both directories are fsynced, the directory is renamed
// into place, and `run_dir/latest` (the name of the newest checkpoint) is replaced atomically.
// A directory without a marker, or whose files disagree with it, is never loaded. What goes into
// a checkpoint is the caller's business (the trainer writes the model, optimizer state and
// state.json); this file only makes the set of files appear whole or not at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::train {

inline constexpr const char* kCommitMarker = "COMMITTED";
inline constexpr const char* kLatestPointer = "latest";

// "step_000015" (six digits, more when the step needs them).
std::string checkpoint_dir_name(int64_t step);

// CRC-32C (Castagnoli, io/crc32c.h) of a whole file, streamed.
uint32_t file_crc32c(const std::string& path);

class CheckpointWriter {
 public:
  // Creates run_dir (if needed) and an empty temporary directory for checkpoint `step`.
  CheckpointWriter(const std::string& run_dir, int64_t step);
  // Removes the temporary directory unless commit() succeeded.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Where the caller writes the checkpoint's files (flat: no subdirectories).
  const std::string& dir() const { return tmp_dir_; }
  // Writes the manifest, fsyncs, renames into run_dir/step_NNNNNN (replacing an existing
  // checkpoint of the same step), updates `latest`, then deletes all but the newest `keep`
  // committed checkpoints (keep <= 0 keeps all). Returns the final path.
  std::string commit(int64_t keep);

 private:
  std::string run_dir_, tmp_dir_, final_dir_;
  int64_t step_;
  bool committed_ = false;
};

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
};

// Committed checkpoints of run_dir (those with a marker), oldest first. Files are not verified.
std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir);

// Throws an Error naming the checkpoint and the first problem: no marker, unreadable manifest, a
// file missing, of the wrong size, or with the wrong CRC-32C. Returns the manifest's step.
int64_t verify_checkpoint(const std::string& checkpoint_dir);

// What `--resume PATH` loads. A checkpoint directory must verify (else its Error). A run
// directory yields the newest checkpoint that verifies, trying `latest` first; every checkpoint
// skipped on the way is appended to `refused` as "path: reason". An Error when none verifies.
CheckpointInfo resolve_resume(const std::string& path, std::vector<std::string>* refused = nullptr);

// Deletes all but the newest `keep` committed checkpoints, and stale temporary directories.
void prune_checkpoints(const std::string& run_dir, int64_t keep);

}  // namespace tessel::train
