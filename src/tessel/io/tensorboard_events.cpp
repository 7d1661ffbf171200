// SPDX-License-Identifier: Apache-2.0
// TensorBoard event files (tensorboard_events.h): TFRecord framing, the hand-written protobuf
// encoding and decoding of tensorflow.Event, and the checked writer.
#include "tessel/io/tensorboard_events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/io/crc32c.h"
#include "tessel/io/protobuf_wire.h"

namespace tessel::io {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

// Protobuf wire types and the field numbers of event.proto / summary.proto.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;
constexpr int kFieldWallTime = 1, kFieldStep = 2, kFieldFileVersion = 3, kFieldSummary = 5;
constexpr int kFieldSummaryValue = 1;
constexpr int kFieldTag = 1, kFieldSimpleValue = 2;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

std::string event_head(double wall_time, int64_t step) {
  std::string out;
  put_double(out, kFieldWallTime, wall_time);
  put_key(out, kFieldStep, kVarint);
  put_varint(out, uint64_t(step));  // int64: two's complement, ten bytes when negative
  return out;
}

uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Record bytes are read with io's protobuf reader; its errors name the record.
constexpr const char* kRecord = "tensorboard: an Event record";

ScalarValue parse_value(wire::WireReader r) {
  ScalarValue v;
  while (!r.done()) {
    const auto [field, type] = r.tag();
    if (field == uint32_t(kFieldTag) && type == uint32_t(kLengthDelimited)) {
      v.tag = r.string("tag");
    } else if (field == uint32_t(kFieldSimpleValue) && type == uint32_t(kFixed32)) {
      v.value = r.fixed<float>("simple_value");
    } else {
      r.skip(field, type);
    }
  }
  return v;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string tfrecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string event_file_version(double wall_time) {
  std::string out = event_head(wall_time, 0);
  put_bytes(out, kFieldFileVersion, kEventFileVersion);
  return out;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<ScalarValue>& values) {
  std::string summary;
  for (const ScalarValue& v : values) {
    std::string value;
    put_bytes(value, kFieldTag, v.tag);
    put_float(value, kFieldSimpleValue, v.value);
    put_bytes(summary, kFieldSummaryValue, value);
  }
  std::string out = event_head(wall_time, step);
  put_bytes(out, kFieldSummary, summary);
  return out;
}

Event parse_event(const std::string& data) {
  wire::WireReader r(data, 0, data.size(), kRecord);
  Event e;
  while (!r.done()) {
    const auto [field, type] = r.tag();
    if (field == uint32_t(kFieldWallTime) && type == uint32_t(kFixed64)) {
      e.wall_time = r.fixed<double>("wall_time");
    } else if (field == uint32_t(kFieldStep) && type == uint32_t(kVarint)) {
      e.step = int64_t(r.varint("step"));
    } else if (field == uint32_t(kFieldFileVersion) && type == uint32_t(kLengthDelimited)) {
      e.file_version = r.string("file_version");
    } else if (field == uint32_t(kFieldSummary) && type == uint32_t(kLengthDelimited)) {
      wire::WireReader summary = wire::sub_message(r, field, type, "summary");
      while (!summary.done()) {
        const auto [sfield, stype] = summary.tag();
        if (sfield == uint32_t(kFieldSummaryValue) && stype == uint32_t(kLengthDelimited)) {
          e.values.push_back(parse_value(wire::sub_message(summary, sfield, stype, "value")));
        } else {
          summary.skip(sfield, stype);
        }
      }
    } else {
      r.skip(field, type);
    }
  }
  return e;
}

EventFileContents read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "tensorboard: cannot read the event file ", path, ": ",
               std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  EventFileContents out;
  size_t at = 0;
  while (bytes.size() - at >= 12) {
    const uint64_t n = get_le(p + at, 8);
    if (uint32_t(get_le(p + at + 8, 4)) != masked_crc32c(p + at, 8)) break;
    if (bytes.size() - at - 12 < n || bytes.size() - at - 12 - n < 4) break;  // torn
    const std::string data = bytes.substr(at + 12, size_t(n));
    if (uint32_t(get_le(p + at + 12 + n, 4)) != masked_crc32c(data.data(), data.size())) break;
    try {
      out.events.push_back(parse_event(data));
    } catch (const Error&) {
      break;  // framed whole but not an Event: read no further, as for a bad CRC
    }
    at += 12 + size_t(n) + 4;
    out.ends.push_back(at);
  }
  return out;
}

void truncate_event_file(const std::string& path, int64_t step) {
  const EventFileContents contents = read_event_file(path);
  uint64_t keep = 0;
  for (size_t i = 0; i < contents.events.size() && contents.events[i].step <= step; ++i)
    keep = contents.ends[i];
  std::error_code ec;
  if (keep == 0) {
    fs::remove(path, ec);
    TESSEL_CHECK(!ec, "tensorboard: cannot remove the event file ", path, " of steps after ", step,
                 ": ", ec.message());
    return;
  }
  if (keep == fs::file_size(path, ec) && !ec) return;
  fs::resize_file(path, keep, ec);
  TESSEL_CHECK(!ec, "tensorboard: cannot cut the event file ", path, " back to step ", step, ": ",
               ec.message());
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "tensorboard: cannot create the event file folder ", dir, ": ", ec.message());
  const std::string base =
      (fs::path(dir) / (kEventFilePrefix + std::to_string(std::time(nullptr)) + "." + host_name()))
          .string();
  int fd = -1;
  std::string path;
  for (int n = 0; fd < 0; ++n) {
    path = n == 0 ? base : base + "." + std::to_string(n);
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    TESSEL_CHECK(fd >= 0 || (errno == EEXIST && n < 1000),
                 "tensorboard: cannot create the event file ", path,
                 " (log.tensorboard): ", std::strerror(errno));
  }
  file_ = RecordFile(fd, path,
                     "tensorboard: cannot write the event file " + path + " (log.tensorboard)");
  write_record(event_file_version(now_seconds()));
}

void EventFileWriter::write_scalars(int64_t step, const std::vector<ScalarValue>& values,
                                    double wall_time) {
  write_record(event_scalars(wall_time < 0 ? now_seconds() : wall_time, step, values));
}

void EventFileWriter::write_record(const std::string& data) {
  file_.append(tfrecord(data));
}

}  // namespace tessel::io
