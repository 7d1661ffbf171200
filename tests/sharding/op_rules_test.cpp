// SPDX-License-Identifier: Apache-2.0
// Every declared placement signature of every op rule, run on thread worlds of 2 and 3 ranks
// against the op on full tensors: each rank applies the op to its pieces, and its output must be
// its piece of the serial result in the declared output placement (checked after redistributing
// to Replicate, within the derived bound of tests/common/tolerance.h). Odd sizes (13 tokens, 7
// features, 3 or 4 heads) make pieces uneven. Composite signatures (VocabParallel, vocab-parallel
// cross-entropy) need more than the plain op and are tested with their styles in tests/parallel.
#include "tessel/sharding/op_rules.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/tolerance.h"
#include "sharding_test_util.h"
#include "tessel/ops/ops.h"
#include "tessel/sharding/dist_tensor.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::sharding {
namespace {

using namespace test;

struct Example {
  std::vector<Tensor> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> run;
};

Tensor ids(const Shape& shape, int64_t vocab) {
  std::vector<int64_t> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 7 + 2) % size_t(vocab));
  return from_data(v, shape);
}

std::map<std::string, Example> examples() {
  std::map<std::string, Example> e;
  e["linear"] = {{random({3, 13, 7}, 1), random({9, 7}, 2)},
                 [](const auto& x) { return ops::linear(x[0], x[1]); }};
  e["add"] = {{random({3, 13, 7}, 3), random({3, 13, 7}, 4)},
              [](const auto& x) { return ops::add(x[0], x[1]); }};
  e["mul"] = {{random({3, 13, 7}, 14), random({3, 13, 7}, 15)},
              [](const auto& x) { return ops::mul(x[0], x[1]); }};
  e["gelu"] = {{random({3, 13, 7}, 5)}, [](const auto& x) { return ops::gelu(x[0]); }};
  e["layer_norm"] = {{random({3, 13, 7}, 6), random({7}, 7), random({7}, 8)},
                     [](const auto& x) { return ops::layer_norm(x[0], x[1], x[2]); }};
  e["rms_norm"] = {{random({3, 13, 7}, 16), random({7}, 17)},
                   [](const auto& x) { return ops::rms_norm(x[0], x[1], 1e-5); }};
  e["embedding"] = {{random({11, 7}, 9), ids({3, 13}, 11)},
                    [](const auto& x) { return ops::embedding(x[0], x[1]); }};
  e["attention"] = {
      {random({3, 13, 4, 5}, 10), random({3, 13, 4, 5}, 11), random({3, 13, 4, 5}, 12)},
      [](const auto& x) { return ops::attention(x[0], x[1], x[2], true); }};
  e["cross_entropy"] = {{random({13, 11}, 13), ids({13}, 11)},
                        [](const auto& x) { return ops::cross_entropy(x[0], x[1]); }};
  return e;
}

TEST(OpRules, EverySignatureMatchesTheOpOnFullTensors) {
  const auto ex = examples();
  int checked = 0;
  for (const OpRule& rule : op_rules()) {
    ASSERT_TRUE(ex.count(rule.name)) << "no example for " << rule.name;
    const Example& e = ex.at(rule.name);
    std::vector<Shape> shapes;
    for (const Tensor& t : e.inputs) shapes.push_back(t.shape());
    const Shape out_shape = rule.shape(shapes);
    const Tensor want = e.run(e.inputs);
    // The ranks' pieces (and a Partial's unequal addends, then their sum) reorder the op's sums:
    // the derived bound (tests/common/tolerance.h) for the longest, attention's and
    // cross-entropy's 13, through the op and the collective, times max(1, max |want|) for this
    // max-abs check: 2.4e-6 to 2e-5 (was 1e-5). A wrong piece or a nonlinear op on a Partial
    // input is off by O(1).
    const double tol = tessel::test::reorder_tolerance(DType::F32, 13, 2) *
                       std::max(1.0, tessel::test::max_abs_of(want.to_vector<double>()));
    ASSERT_EQ(want.shape(), out_shape) << rule.name << ": the shape rule disagrees with the op";
    for (const OpSignature& declared : rule.signatures) {
      if (declared.composite) continue;
      const auto sig = find_signature(rule.name, declared.inputs, shapes);
      ASSERT_TRUE(sig.has_value()) << rule.name << " " << declared.use;
      for (int n : {2, 3}) {
        Checks checks;
        run_world(n, [&](dist::CommPtr comm) {
          std::vector<Tensor> local;
          // A pending sum as unequal addends (rank r holds (r + 1) / T of it, T = n (n + 1) / 2),
          // so that a nonlinear op declared on one would fail (zeros on all but one rank
          // would hide it: gelu(0) = 0).
          const double share = double(comm->rank() + 1) / double(n * (n + 1) / 2);
          for (size_t i = 0; i < e.inputs.size(); ++i)
            local.push_back(
                sig->inputs[i].is_partial()
                    ? ops::mul(e.inputs[i], share)
                    : DistTensor::from_global(e.inputs[i], comm, sig->inputs[i]).local());
          const Tensor out = e.run(local);
          const std::string at = rule.name + " " + str(sig->inputs) + " -> " + sig->output.str() +
                                 " (" + declared.use + ") over " + std::to_string(n) + ", rank " +
                                 std::to_string(comm->rank());
          const std::vector<int> sizes{n}, coords{comm->rank()};
          const Placements outp{sig->output};
          checks.expect(out.shape() == local_shape(out_shape, outp, sizes, coords),
                        at + ": local output " + out.shape().str());
          const Tensor full =
              redistribute_local(out, *comm, sig->output, Placement::replicate(), out_shape);
          checks.expect_close(full, want, tol, at);
        });
        checks.verify();
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2 * 27);
}

// Grouped-query attention (12 query heads, 6 K/V heads) split by heads over 2 and 3 ranks, which
// divide both counts: each rank's output heads are its piece of the serial result. Head counts
// that do not divide are refused by the shape rule.
TEST(OpRules, GroupedQueryAttentionSplitsByHeads) {
  const std::vector<Tensor> x = {random({3, 13, 12, 5}, 21), random({3, 13, 6, 5}, 22),
                                 random({3, 13, 6, 5}, 23)};
  const std::vector<Shape> shapes = {x[0].shape(), x[1].shape(), x[2].shape()};
  const Shape out_shape = op_rule("attention").shape(shapes);
  const Tensor want = ops::attention(x[0], x[1], x[2], true);
  ASSERT_EQ(want.shape(), out_shape);
  const Placement H = Placement::shard(2);
  const auto sig = find_signature("attention", std::vector<Placement>{H, H, H}, shapes);
  ASSERT_TRUE(sig.has_value());
  const double tol = tessel::test::reorder_tolerance(DType::F32, 13, 2) *
                     std::max(1.0, tessel::test::max_abs_of(want.to_vector<double>()));
  for (int n : {2, 3}) {
    Checks checks;
    run_world(n, [&](dist::CommPtr comm) {
      std::vector<Tensor> local;
      for (const Tensor& t : x) local.push_back(DistTensor::from_global(t, comm, H).local());
      const Tensor out = ops::attention(local[0], local[1], local[2], true);
      const Tensor full = redistribute_local(out, *comm, H, Placement::replicate(), out_shape);
      checks.expect_close(full, want, tol,
                          "grouped-query heads over " + std::to_string(n) + ", rank " +
                              std::to_string(comm->rank()));
    });
    checks.verify();
  }
  EXPECT_THROW(
      op_rule("attention").shape(std::vector<Shape>{{3, 13, 12, 5}, {3, 13, 5, 5}, {3, 13, 5, 5}}),
      Error);
  EXPECT_THROW(
      op_rule("attention").shape(std::vector<Shape>{{3, 13, 12, 5}, {3, 13, 6, 5}, {3, 13, 6, 4}}),
      Error);
}

TEST(OpRules, StylesAreSignatures) {
  const Placement R = Placement::replicate(), P = Placement::partial();
  const std::vector<Shape> lin = {{3, 13, 7}, {9, 7}};
  EXPECT_EQ(find_signature("linear", std::vector<Placement>{R, Placement::shard(0)}, lin)->output,
            Placement::shard(2));  // Colwise
  EXPECT_EQ(find_signature("linear",
                           std::vector<Placement>{Placement::shard(2), Placement::shard(1)}, lin)
                ->output,
            P);  // Rowwise
  EXPECT_EQ(find_signature("layer_norm", std::vector<Placement>{Placement::shard(1), R, R},
                           std::vector<Shape>{{3, 13, 7}, {7}, {7}})
                ->output,
            Placement::shard(1));  // Sequence
  EXPECT_TRUE(find_signature("embedding", std::vector<Placement>{Placement::shard(0), R},
                             std::vector<Shape>{{11, 7}, {3, 13}})
                  ->composite);  // VocabParallel
  // Not declared: a nonlinear op of a pending sum, a norm over its split dim.
  EXPECT_FALSE(find_signature("gelu", std::vector<Placement>{P}, std::vector<Shape>{{3, 7}}));
  EXPECT_FALSE(find_signature("layer_norm", std::vector<Placement>{Placement::shard(-1), R, R},
                              std::vector<Shape>{{3, 13, 7}, {7}, {7}}));
  EXPECT_THROW(op_rule("conv2d"), Error);
}

}  // namespace
}  // namespace tessel::sharding
