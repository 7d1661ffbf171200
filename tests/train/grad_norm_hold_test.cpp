// SPDX-License-Identifier: Apache-2.0
// The gradient norm and scaling over spans whose flat tensors are resident only while held
// (SpanHold, as memory offload keeps ZeRO-2/3's gradient shards in chunks): the held norm equals
// the plain one bit for bit, each tensor is held while it is read or scaled (and for writing only
// when scaled), and nothing is read outside its hold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "tessel/train/optim/grad_norm.h"

namespace tessel::train {
namespace {

// Flat tensors of odd sizes, several spans over each (as a shard holds several parameters'
// parts), the values kept aside: a tensor holds NaN except while held, like a chunk's bytes
// that are elsewhere until accessed.
struct Offloaded {
  std::vector<Tensor> flats;
  std::map<const Storage*, std::vector<float>> aside;
  std::vector<std::pair<size_t, bool>> holds;  // (tensor, for writing), in order

  explicit Offloaded(Generator& gen) {
    for (int64_t n : {7, 13, 33, 16389}) flats.push_back(randn({n}, DType::F32, &gen));
    for (const Tensor& t : flats) {
      const float* p = t.data<float>();
      aside[t.storage_ptr().get()] = std::vector<float>(p, p + t.numel());
      poison(t);
    }
  }
  static void poison(const Tensor& t) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  }
  size_t index(const Tensor& t) const {
    for (size_t i = 0; i < flats.size(); ++i)
      if (flats[i].storage_ptr() == t.storage_ptr()) return i;
    ADD_FAILURE() << "held a tensor that is none of the flats";
    return 0;
  }
  SpanHold hold() {
    return [this](const Tensor& flat, bool write) -> std::shared_ptr<void> {
      const size_t i = index(flat);
      holds.emplace_back(i, write);
      std::vector<float>& v = aside[flat.storage_ptr().get()];
      std::memcpy(flats[i].data<float>(), v.data(), v.size() * sizeof(float));
      return std::shared_ptr<void>(nullptr, [this, i](void*) {
        const float* p = flats[i].data<float>();
        std::vector<float>& v = aside[flats[i].storage_ptr().get()];
        std::memcpy(v.data(), p, v.size() * sizeof(float));
        poison(flats[i]);
      });
    };
  }
  std::vector<GradSpan> spans() const {
    std::vector<GradSpan> out;
    for (const Tensor& t : flats) {  // two uneven spans per tensor
      const int64_t n = t.numel();
      out.push_back({t, 0, n / 3, 0, "a"});
      out.push_back({t, n / 3, n, 0, "b"});
    }
    return out;
  }
};

TEST(GradNormHold, HeldNormEqualsThePlainNormBitwiseAndReadsOnlyHeldTensors) {
  Generator gen(7);
  Offloaded off(gen);
  // The plain norm over resident copies of the same values.
  std::vector<Tensor> resident;
  std::vector<GradSpan> plain;
  for (const GradSpan& s : off.spans()) {
    const std::vector<float>& v = off.aside.at(s.flat.storage_ptr().get());
    if (resident.empty() || s.begin == 0) resident.push_back(from_data(v, {int64_t(v.size())}));
    plain.push_back({resident.back(), s.begin, s.end, s.group, s.param});
  }
  const double want = global_square_sum(plain, 1, {}).total;
  const double got = global_square_sum(off.spans(), 1, {}, off.hold()).total;
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_EQ(std::memcmp(&want, &got, sizeof(double)), 0) << want << " vs " << got;
  // One hold per run of spans over a tensor, for reading only.
  ASSERT_EQ(off.holds.size(), off.flats.size());
  for (size_t i = 0; i < off.holds.size(); ++i) {
    EXPECT_EQ(off.holds[i].first, i);
    EXPECT_FALSE(off.holds[i].second);
  }
  // Unheld, the tensors are unreadable: the norm is not finite.
  EXPECT_FALSE(std::isfinite(global_square_sum(off.spans(), 1, {}).total));
}

TEST(GradNormHold, ScalingWritesEachSpanWhileItsTensorIsHeld) {
  Generator gen(13);
  Offloaded off(gen);
  std::map<const Storage*, std::vector<float>> before = off.aside;
  scale_spans(off.spans(), 0.375, off.hold());
  for (const auto& [i, write] : off.holds) EXPECT_TRUE(write) << "tensor " << i;
  EXPECT_EQ(off.holds.size(), 2 * off.flats.size());  // one hold per span
  for (const Tensor& t : off.flats) {
    const std::vector<float>& b = before.at(t.storage_ptr().get());
    const std::vector<float>& a = off.aside.at(t.storage_ptr().get());
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_EQ(a[k], float(b[k] * 0.375f)) << "element " << k << " of " << t.numel();
  }
}

}  // namespace
}  // namespace tessel::train
