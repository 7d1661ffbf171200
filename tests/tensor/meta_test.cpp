// SPDX-License-Identifier: Apache-2.0
// The meta device: tensors with shapes and dtypes and no bytes. Factories, views and copies work
// and allocate nothing; reading or writing data is an Error that names the tensor's shape.
#include <gtest/gtest.h>

#include <functional>

#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"
#include "tessel/tensor/meta_copy.h"
#include "tessel/tensor/tensor.h"

namespace tessel {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Meta, FactoriesViewsAndCopiesAllocateNothing) {
  const size_t before = cpu_allocator().bytes_in_use();
  cpu_allocator().reset_peak();
  const Device meta = Device::meta();
  Tensor a = empty({7, 13, 33}, DType::F32, meta);
  Tensor z = zeros({1 << 20, 1 << 12}, DType::BF16, meta);  // 8 GiB if it were real
  Tensor f = full({5}, 2.0, DType::F16, meta);
  EXPECT_EQ(a.device(), meta);
  EXPECT_EQ(z.nbytes(), size_t(1) << 33);
  EXPECT_EQ(z.storage().nbytes(), size_t(1) << 33);
  EXPECT_EQ(f.dtype(), DType::F16);

  Tensor v = a.reshape({7, -1});
  EXPECT_EQ(v.shape(), Shape({7, 13 * 33}));
  EXPECT_EQ(v.storage_ptr(), a.storage_ptr());
  EXPECT_EQ(a.narrow(0, 0, 1).narrow(1, 2, 5).shape(), Shape({1, 5, 33}));
  EXPECT_EQ(a.transpose(0, 2).shape(), Shape({33, 13, 7}));
  EXPECT_EQ(a.permute({1, 2, 0}).device(), meta);
  EXPECT_EQ(a.slice(1, 3, 10).shape(), Shape({7, 7, 33}));
  EXPECT_EQ(a.to(DType::BF16).dtype(), DType::BF16);
  EXPECT_EQ(a.clone().shape(), a.shape());
  EXPECT_EQ(concat({a, a}, 1).shape(), Shape({7, 26, 33}));
  std::vector<Tensor> parts = chunk(a, 3, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), Shape({7, 13, 11}));
  EXPECT_EQ(zeros_like(a).device(), meta);
  EXPECT_NE(a.str().find("<meta>"), std::string::npos);

  EXPECT_EQ(cpu_allocator().bytes_in_use(), before);
  EXPECT_EQ(cpu_allocator().peak_bytes(), before);
}

TEST(Meta, DataAccessIsAnErrorNamingTheShape) {
  Tensor t = empty({3, 7}, DType::F32, Device::meta());
  t.set_name("w");
  for (const auto& touch : std::vector<std::function<void()>>{
           [&] { (void)t.data_ptr(); },
           [&] { (void)t.data<float>(); },
           [&] {
             (void)t.at(std::vector<int64_t>{0, 0});
           },
           [&] { (void)t.to_vector<float>(); },
       }) {
    const std::string e = error_of(touch);
    EXPECT_NE(e.find("meta"), std::string::npos) << e;
    EXPECT_NE(e.find("[3, 7]"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] { (void)empty({1}, DType::F32, Device::meta()).item(); }).find("meta"),
            std::string::npos);
  // Between the host and meta nothing can be copied.
  Tensor host = zeros({3, 7});
  EXPECT_NE(error_of([&] { host.copy_from(t); }).find("meta"), std::string::npos);
  EXPECT_NE(error_of([&] { t.copy_from(host); }).find("meta"), std::string::npos);
}

// Inside a DefaultDeviceScope every host request is meta, random draws included; outside it the
// host is untouched.
TEST(Meta, DefaultDeviceScope) {
  {
    DefaultDeviceScope scope(Device::meta());
    EXPECT_TRUE(empty({4}).device().is_meta());
    EXPECT_TRUE(zeros({4}, DType::F32, Device::cpu()).device().is_meta());
    EXPECT_TRUE(randn({1000, 1000}).device().is_meta());
    EXPECT_TRUE(arange(0, 9).device().is_meta());
    {
      DefaultDeviceScope inner(Device::cpu());
      EXPECT_TRUE(empty({4}).device().is_cpu());
    }
    EXPECT_TRUE(empty({4}).device().is_meta());
  }
  EXPECT_TRUE(empty({4}).device().is_cpu());
  EXPECT_EQ(arange(0, 3).to_vector<float>(), (std::vector<float>{0, 1, 2}));
}

// The tensor layer's own data movement on meta tensors is reported with its byte counts.
std::vector<std::pair<std::string, std::pair<size_t, size_t>>> g_seen;
void record(std::string_view what, std::span<const Tensor> in, std::span<const Tensor> out) {
  size_t r = 0, w = 0;
  for (const Tensor& t : in) r += t.nbytes();
  for (const Tensor& t : out) w += t.nbytes();
  g_seen.push_back({std::string(what), {r, w}});
}

TEST(Meta, CopiesAreReported) {
  g_seen.clear();
  MetaCopyObserver previous = exchange_meta_copy_observer(record);
  Tensor a = empty({7, 13}, DType::F32, Device::meta());
  (void)a.to(DType::BF16);
  (void)a.transpose(0, 1);
  (void)split(a, std::vector<int64_t>{6, 7}, 1);
  Tensor host = zeros({2});  // host work is never reported
  host.fill(1.0);
  exchange_meta_copy_observer(previous);
  (void)a.clone();  // no observer any more
  ASSERT_EQ(g_seen.size(), 3u);
  EXPECT_EQ(g_seen[0], (std::pair<std::string, std::pair<size_t, size_t>>{"convert", {364, 182}}));
  EXPECT_EQ(g_seen[1].first, "permute");
  EXPECT_EQ(g_seen[2], (std::pair<std::string, std::pair<size_t, size_t>>{"split", {364, 364}}));
}

// ZeRO-3 releases its parameters' storage and materialises it again around each use; on meta the
// count follows, once per release and once per materialisation, and a released storage's end
// counts nothing more.
TEST(Meta, StorageReleaseAndMaterializeAreCounted) {
  const size_t before = meta_allocator().bytes_in_use();
  {
    Tensor t = empty({7, 13}, DType::F32, Device::meta());
    EXPECT_TRUE(t.storage().is_materialized());
    EXPECT_EQ(meta_allocator().bytes_in_use(), before + 7 * 13 * 4);
    t.storage().release();
    EXPECT_FALSE(t.storage().is_materialized());
    EXPECT_EQ(meta_allocator().bytes_in_use(), before);
    t.storage().release();  // twice: still nothing held
    EXPECT_EQ(meta_allocator().bytes_in_use(), before);
    t.storage().materialize();
    t.storage().materialize();  // already there: no second count
    EXPECT_TRUE(t.storage().is_materialized());
    EXPECT_EQ(meta_allocator().bytes_in_use(), before + 7 * 13 * 4);
    EXPECT_NE(error_of([&] { (void)t.data_ptr(); }).find("meta"), std::string::npos);
    Tensor u = empty({33}, DType::BF16, Device::meta());
    u.storage().release();
  }
  EXPECT_EQ(meta_allocator().bytes_in_use(), before);
}

}  // namespace
}  // namespace tessel
