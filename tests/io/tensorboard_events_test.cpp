// SPDX-License-Identifier: Apache-2.0
// TensorBoard event files: the masked CRC against values computed bit by bit, an Event's bytes
// against the protobuf wire format worked out by hand, the writer's file (name, first record,
// framing) read back, and the cut a resumed run makes (after a step, at a torn record). The whole
// format is also checked end to end by an independent Python decoder on a real run
// (tests/train/tensorboard_check.py).
#include "tessel/io/tensorboard_events.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("tessel_tb_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(char(b));
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TensorBoardEvents, MaskedCrcMatchesBitwiseValues) {
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8 of CRC-32C, computed bit by bit in Python.
  EXPECT_EQ(masked_crc32c("", 0), 0xa282ead8u);
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xc78ab0e5u);
}

TEST(TensorBoardEvents, ScalarEventHasTheWireBytesWorkedOutByHand) {
  const std::string want =
      bytes({0x09, 0,    0,   0, 0,   0, 0, 0xf8, 0x3f,  // field 1 fixed64: wall_time 1.5
             0x10, 0x07,                                 // field 2 varint: step 7
             0x2a, 10,                                   // field 5 length 10: summary
             0x0a, 8,                                    //   Summary field 1 length 8: value
             0x0a, 1,    'a',                            //     Value field 1: tag "a"
             0x15, 0,    0,   0, 0x40});                 //     Value field 2 fixed32: 2.0f
  EXPECT_EQ(event_scalars(1.5, 7, {{"a", 2.0f}}), want);
  // A step of 300 takes two varint bytes (0xac 0x02); a negative one ten.
  EXPECT_EQ(event_scalars(0, 300, {}).substr(9, 3), bytes({0x10, 0xac, 0x02}));
  EXPECT_EQ(event_scalars(0, -1, {}).size(), 9u + 1 + 10 + 2);
  const std::string version = event_file_version(2.0);
  EXPECT_EQ(version.substr(11), bytes({0x1a, 13}) + "brain.Event:2");
}

TEST(TensorBoardEvents, RecordFramingAndParseRoundTrip) {
  const std::string data = event_scalars(1.5, 7, {{"a", 2.0f}});
  const std::string rec = tfrecord(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(rec.substr(0, 8), bytes({23, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(rec.substr(8, 4), bytes({0xe7, 0xce, 0xf8, 0x1e}));  // masked CRC of those 8 bytes
  EXPECT_EQ(rec.substr(12, data.size()), data);
  const Event e = parse_event(data);
  EXPECT_EQ(e.wall_time, 1.5);
  EXPECT_EQ(e.step, 7);
  ASSERT_EQ(e.values.size(), 1u);
  EXPECT_EQ(e.values[0].tag, "a");
  EXPECT_EQ(e.values[0].value, 2.0f);
  EXPECT_THROW(parse_event(bytes({0x0a, 5, 'x'})), Error);  // a field overrunning the message
}

TEST(TensorBoardEvents, WriterNamesTheFileAndStartsWithTheVersion) {
  TempDir t("writer");
  std::string first;
  {
    EventFileWriter w((t.path / "tb").string());
    first = w.path();
    EXPECT_EQ(fs::path(first).filename().string().rfind("events.out.tfevents.", 0), 0u) << first;
    w.write_scalars(1, {{"train/loss", 5.5f}, {"train/lr", 1e-3f}}, 100.0);
    w.write_scalars(2, {{"train/loss", 5.25f}}, 101.0);
  }
  EventFileWriter again((t.path / "tb").string());  // the same second: another name
  EXPECT_NE(again.path(), first);
  const EventFileContents c = read_event_file(first);
  ASSERT_EQ(c.events.size(), 3u);
  EXPECT_EQ(c.events[0].file_version, "brain.Event:2");
  EXPECT_EQ(c.events[1].step, 1);
  EXPECT_EQ(c.events[1].wall_time, 100.0);
  ASSERT_EQ(c.events[1].values.size(), 2u);
  EXPECT_EQ(c.events[1].values[1].tag, "train/lr");
  EXPECT_EQ(c.events[1].values[1].value, 1e-3f);
  EXPECT_EQ(c.events[2].values[0].value, 5.25f);
  EXPECT_EQ(c.ends.back(), fs::file_size(first));
}

TEST(TensorBoardEvents, TruncateKeepsStepsUpToTheResumeStepAndDropsATornTail) {
  TempDir t("truncate");
  std::string path;
  {
    EventFileWriter w(t.path.string());
    path = w.path();
    for (int64_t s = 1; s <= 6; ++s) w.write_scalars(s, {{"x", float(s)}});
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << tfrecord(event_scalars(0, 7, {{"x", 7}})).substr(0, 20);  // a crash mid-record
  }
  EXPECT_EQ(read_event_file(path).events.size(), 7u);  // the torn record is not read
  truncate_event_file(path, 4);
  const EventFileContents c = read_event_file(path);
  ASSERT_EQ(c.events.size(), 5u);
  EXPECT_EQ(c.events.back().step, 4);
  EXPECT_EQ(fs::file_size(path), c.ends.back());
  // A corrupt byte ends the reading there, as it ends TensorBoard's.
  std::string raw = slurp(path);
  raw[c.ends[2] + 14] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << raw;
  EXPECT_EQ(read_event_file(path).events.size(), 3u);
  // A fresh run (step -1) keeps nothing: the file goes.
  truncate_event_file(path, -1);
  EXPECT_TRUE(event_files(t.path).empty());
}

TEST(TensorBoardEvents, UnwritableFolderIsAnErrorNamingIt) {
  TempDir t("unwritable");
  fs::create_directories(t.path);
  std::ofstream(t.path / "file") << "x";
  try {
    EventFileWriter w((t.path / "file" / "tb").string());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((t.path / "file" / "tb").string()), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessel::io
