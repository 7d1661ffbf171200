// SPDX-License-Identifier: Apache-2.0
// TensorBoard event files written directly, without TensorFlow. An event file is a sequence of
// TFRecords (uint64 little-endian length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C
// of the data; mask = ((crc >> 15) | (crc << 17)) + 0xa282ead8), each record one serialized
// `tensorflow.Event` protobuf, encoded here by hand with the fields TensorBoard's scalars need:
//
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
//
// (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto). The first record of
// a file carries file_version "brain.Event:2"; every later one a Summary of scalars at a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/io/record_file.h"

namespace tessel::io {

inline constexpr const char* kEventFileVersion = "brain.Event:2";
inline constexpr const char* kEventFilePrefix = "events.out.tfevents.";

// TFRecord's masked CRC-32C of `size` bytes.
uint32_t masked_crc32c(const void* data, size_t size);
// `data` framed as one TFRecord.
std::string tfrecord(const std::string& data);

struct ScalarValue {
  std::string tag;  // "train/loss"
  float value = 0;
};

// Serialized tensorflow.Event messages.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::vector<ScalarValue>& values);

// One decoded record of an event file (the fields above; other fields are skipped).
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<ScalarValue> values;
};
// Decodes a serialized Event; an Error when it is not protobuf wire format.
Event parse_event(const std::string& data);

// The whole records of an event file and the bytes they span; a torn or corrupt record (a crash
// mid-write, a bad CRC) ends the reading, as it ends TensorBoard's. An Error when unreadable.
struct EventFileContents {
  std::vector<Event> events;
  std::vector<uint64_t> ends;  // ends[i]: the byte just after record i
};
EventFileContents read_event_file(const std::string& path);

// Cuts `path` after its last whole record whose step is <= `step` (records are written in step
// order), as a resumed run does to the steps it is about to repeat; a file left without a record
// of any step is removed. An Error naming the file when it cannot be cut.
void truncate_event_file(const std::string& path, int64_t step);

// Appends records to a new event file in a folder. Every write is checked: a record that cannot be
// written whole (disk full, file-size limit, I/O error) is cut back off the file, and the write
// throws an Error naming the file and the operating system's reason.
class EventFileWriter {
 public:
  EventFileWriter() = default;
  // Creates `dir` if needed and the file `events.out.tfevents.<unix seconds>.<hostname>` in it
  // (".1", ".2", ... appended when that name is taken: two starts within a second), then writes
  // the file_version record.
  explicit EventFileWriter(const std::string& dir);

  bool enabled() const { return file_.is_open(); }
  const std::string& path() const { return file_.path(); }
  // One Event holding `values` at `step`; wall_time < 0 means now.
  void write_scalars(int64_t step, const std::vector<ScalarValue>& values, double wall_time = -1);

 private:
  void write_record(const std::string& data);
  RecordFile file_;  // TFRecord-framed events
};

}  // namespace tessel::io
