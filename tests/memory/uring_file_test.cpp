// SPDX-License-Identifier: Apache-2.0
// UringFile: many transfers in flight at once (more requests than the queue depth, from two
// submitting threads), completed in any order, bit-exact; a failed transfer names itself.
#include "tessel/memory/uring_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error_text.h"
#include "memory_test_util.h"
#include "tessel/memory/memory_config.h"
#include "tessel/memory/nvme_tier.h"

namespace tessel::memory {
namespace {

struct AlignedBuffer {
  explicit AlignedBuffer(size_t n)
      : bytes(n), p(static_cast<unsigned char*>(std::aligned_alloc(kIoAlignment, n))) {}
  ~AlignedBuffer() { std::free(p); }
  size_t bytes;
  unsigned char* p;
};

TEST(UringFile, ConcurrentTransfersRoundTrip) {
  test::ScratchDir dir;
  bool direct = false;
  std::string reason;
  int fd = open_for_direct_io(dir.str() + "/f", &direct, &reason);
  const size_t each = 3 * kIoAlignment;  // three requests per transfer
  const int n = 33;
  ASSERT_EQ(posix_fallocate(fd, 0, off_t(each * n)), 0);
  UringFile file(fd, "test file", 5, kIoAlignment);
  std::vector<std::unique_ptr<AlignedBuffer>> out, in;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::make_unique<AlignedBuffer>(each));
    in.push_back(std::make_unique<AlignedBuffer>(each));
    for (size_t b = 0; b < each; ++b) out.back()->p[b] = uint8_t(b * 7 + size_t(i) * 13);
    std::memset(in.back()->p, 0, each);
  }
  // Two threads submit writes at once, each for every other transfer.
  std::vector<IoTicket> writes(n);
  auto submit = [&](int first) {
    for (int i = first; i < n; i += 2)
      writes[size_t(i)] = file.write(out[size_t(i)]->p, each, uint64_t(i) * each);
  };
  std::thread other(submit, 1);
  submit(0);
  other.join();
  for (int i = n - 1; i >= 0; --i) file.wait(writes[size_t(i)]);  // completion order is free
  std::vector<IoTicket> reads;
  for (int i = 0; i < n; ++i)
    reads.push_back(file.read(in[size_t(i)]->p, each, uint64_t(i) * each));
  for (int i : {17, 3, 32, 0}) file.wait(reads[size_t(i)]);
  file.wait_all();
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(file.done(reads[size_t(i)]));
    EXPECT_EQ(std::memcmp(in[size_t(i)]->p, out[size_t(i)]->p, each), 0) << "transfer " << i;
  }
}

TEST(UringFile, AFailedTransferNamesItself) {
  test::ScratchDir dir;
  bool direct = false;
  std::string reason;
  int fd = open_for_direct_io(dir.str() + "/f", &direct, &reason);
  ASSERT_EQ(posix_fallocate(fd, 0, off_t(kIoAlignment)), 0);
  UringFile file(fd, "short file", 2, kIoAlignment);
  AlignedBuffer buf(2 * kIoAlignment);
  // The second block lies past the end of the file: a short read.
  IoTicket t = file.read(buf.p, 2 * kIoAlignment, 0);
  test::expect_error([&] { file.wait(t); },
                     {"read of 4096 bytes at offset 4096 of short file", "transferred 0 bytes"});
}

}  // namespace
}  // namespace tessel::memory
