// SPDX-License-Identifier: Apache-2.0
// Storage release / materialise / rebind: the bytes move between allocators while the tensors
// viewing the storage keep their handles (what ZeRO-3 and memory/'s tiers rely on).
#include "tessel/tensor/storage.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tessel/tensor/tensor.h"

namespace tessel {
namespace {

// A second allocator with its own counters, standing in for another tier.
class CountingAllocator final : public Allocator {
 public:
  void* allocate(size_t n) override {
    count_alloc(n);
    return cpu_allocator().allocate(n);
  }
  void deallocate(void* p, size_t n) override {
    if (p == nullptr) return;
    count_free(n);
    cpu_allocator().deallocate(p, n);
  }
  Device device() const override { return Device::cpu(); }
};

TEST(Storage, RebindMovesTheBytesUnderLiveViews) {
  CountingAllocator other;
  Tensor t = arange(0, 33);
  Tensor view = t.narrow(0, 13, 7);
  Storage& s = t.storage();
  void* p = other.allocate(s.nbytes());
  std::memcpy(p, s.data(), s.nbytes());
  s.rebind(p, other);
  EXPECT_EQ(other.bytes_in_use(), 33 * sizeof(float));
  EXPECT_EQ(view.to_vector<float>(), (std::vector<float>{13, 14, 15, 16, 17, 18, 19}));
  s.release();
  EXPECT_EQ(other.bytes_in_use(), 0u);
  EXPECT_THROW(view.to_vector<float>(), Error);
  s.rebind(nullptr, cpu_allocator());  // released, to materialise from the host allocator
  s.materialize();
  EXPECT_EQ(other.bytes_in_use(), 0u);
  view.fill(2);
  EXPECT_EQ(t.to_vector<float>()[19], 2.0f);
  float outside = 0;
  Storage external(&outside, sizeof(float), Device::cpu(), nullptr);
  EXPECT_THROW(external.rebind(nullptr, other), Error);
}

}  // namespace
}  // namespace tessel
