// SPDX-License-Identifier: Apache-2.0
// DataParallel on in-process worlds of 2, 3 and 4 thread-ranks: each rank runs its shard of a
// batch, and after finish_gradient_sync() every gradient equals the single-process gradient of the
// mean loss over the whole batch. Also: no-sync accumulation, bucket formation, overlap on/off
// giving the same bits, parameter broadcast, unused parameters, a tiny GPT-2, and refusals.
#include "tessel/parallel/data/data_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "common/tolerance.h"
#include "parallel_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/autograd/meta.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"

namespace tessel::parallel {
namespace {

using namespace test_util;

constexpr int64_t kIn = 13, kHidden = 33, kClasses = 7;

// fc1 -> tanh -> fc2 (+ `extra` on the input when `use_extra`): extra is a parameter that some
// ranks, or all, never use.
class Mlp : public nn::Module {
 public:
  explicit Mlp(uint64_t seed, bool with_extra = false) : Module("Mlp") {
    Generator g(seed);
    fc1 = register_module(
        "fc1", std::make_shared<nn::Linear>(kIn, kHidden, true, nn::Init::normal(&g, 0.3)));
    fc2 = register_module(
        "fc2", std::make_shared<nn::Linear>(kHidden, kClasses, true, nn::Init::normal(&g, 0.3)));
    if (with_extra) {
      extra = register_module(
          "extra", std::make_shared<nn::Linear>(kIn, kClasses, true, nn::Init::normal(&g, 0.3)));
    }
  }
  Tensor forward(const Tensor& x, bool use_extra = false) {
    Tensor y = fc2->forward(ops::tanh(fc1->forward(x)));
    return use_extra ? ops::add(y, extra->forward(x)) : y;
  }
  // Mean cross-entropy over the rows [begin, begin + rows) of the batch, times `scale`.
  Tensor loss(const Tensor& x, const Tensor& targets, int64_t begin, int64_t rows,
              double scale = 1.0, bool use_extra = false) {
    Tensor l = ops::cross_entropy(forward(x.narrow(0, begin, rows), use_extra),
                                  targets.narrow(0, begin, rows));
    return scale == 1.0 ? l : ops::mul(l, scale);
  }
  std::shared_ptr<nn::Linear> fc1, fc2, extra;
};

struct Batch {
  Tensor x, targets;
};

Batch make_batch(int64_t rows, uint64_t seed) {
  Generator g(seed);
  Batch b;
  b.x = randn({rows, kIn}, DType::F32, &g);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) t[size_t(i)] = (i * 5 + 3) % kClasses;
  b.targets = from_data(t, {rows});
  return b;
}

Grads grads_of(const nn::Module& m) {
  Grads out;
  for (const auto& [name, p] : m.named_parameters()) {
    Tensor g = p.grad();
    out.push_back(g.defined() ? g.to_vector<double>() : std::vector<double>(size_t(p.numel()), 0));
  }
  return out;
}

constexpr uint64_t kModelSeed = 11, kDataSeed = 29;

// The ranks sum the batch's rows in another order than one process does (and every vector width
// sums a product's terms in its own order): the derived bound of tests/common/tolerance.h for the
// longest reduction, the batch's rows or fc2's kHidden inputs, through the two layers. About
// 4e-6 (65 u); a rank's share missing or counted twice is off by 1/n, a bucket mix-up by O(1).
double tol_for(int64_t rows) {
  return test::reorder_tolerance(DType::F32, std::max(rows, kHidden), 2);
}

// The single-process gradient of the mean loss over all rows.
Grads reference_grads(int64_t rows) {
  Mlp m(kModelSeed);
  Batch b = make_batch(rows, kDataSeed);
  autograd::backward(m.loss(b.x, b.targets, 0, rows));
  return grads_of(m);
}

class DataParallelWorld : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelWorld, GradientsEqualFullBatch) {
  const int n = GetParam();
  const int64_t per_rank = 5, rows = per_rank * n;
  const Grads want = reference_grads(rows);
  Checks checks;
  run_world(n, [&](dist::CommPtr comm) {
    Mlp m(kModelSeed);
    Batch b = make_batch(rows, kDataSeed);
    // 1000 bytes: {fc2.bias, fc2.weight}, {fc1.bias}, {fc1.weight}.
    DataParallel dp(m.named_parameters(), comm, {.bucket_bytes = 1000});
    checks.expect(dp.bucket_count() == 3, "bucket count " + std::to_string(dp.bucket_count()));
    for (int step = 0; step < 2; ++step) {  // the second step reuses the bucket views
      m.zero_grad();
      const uint64_t issued = comm->context().issued_count();
      autograd::backward(m.loss(b.x, b.targets, comm->rank() * per_rank, per_rank));
      dp.finish_gradient_sync();
      checks.expect_grads(grads_of(m), want, tol_for(rows), "step " + std::to_string(step));
      const auto s = dp.last_stats();
      checks.expect(s.collectives == dp.bucket_count(), "collectives per step");
      checks.expect(int64_t(comm->context().issued_count() - issued) == dp.bucket_count(),
                    "recorder: one all_reduce per bucket");
      checks.expect(s.bytes == 4 * (kIn * kHidden + kHidden + kHidden * kClasses + kClasses),
                    "bytes " + std::to_string(s.bytes));
      checks.expect(s.wait_ms >= 0 && s.comm_ms >= 0, "timings are durations");
    }
  });
  checks.verify();
}

TEST_P(DataParallelWorld, NoSyncAccumulationEqualsFullBatch) {
  const int n = GetParam();
  const int64_t micro = 3, per_micro = 3, per_rank = micro * per_micro, rows = per_rank * n;
  const Grads want = reference_grads(rows);
  Checks checks;
  run_world(n, [&](dist::CommPtr comm) {
    Mlp m(kModelSeed);
    Batch b = make_batch(rows, kDataSeed);
    DataParallel dp(m.named_parameters(), comm, {.bucket_bytes = 300});
    m.zero_grad();
    for (int64_t k = 0; k < micro; ++k) {
      const bool last = k == micro - 1;
      dp.set_sync(last);
      const uint64_t issued = comm->context().issued_count();
      const int64_t begin = comm->rank() * per_rank + k * per_micro;
      autograd::backward(m.loss(b.x, b.targets, begin, per_micro, 1.0 / double(micro)));
      if (!last) {
        checks.expect(comm->context().issued_count() == issued, "a no-sync backward communicated");
        checks.expect(dp.last_stats().collectives == 0, "no step finished yet");
      }
    }
    dp.finish_gradient_sync();
    checks.expect(dp.last_stats().collectives == dp.bucket_count(), "one all_reduce per bucket");
    checks.expect_grads(grads_of(m), want, tol_for(rows), "accumulated");
  });
  checks.verify();
}

TEST_P(DataParallelWorld, OverlapOffGivesTheSameBits) {
  const int n = GetParam();
  const int64_t per_rank = 7, rows = per_rank * n;
  Checks checks;
  run_world(n, [&](dist::CommPtr comm) {
    Batch b = make_batch(rows, kDataSeed);
    std::vector<std::vector<float>> results[2];
    for (int overlap = 0; overlap < 2; ++overlap) {
      Mlp m(kModelSeed);
      DataParallel dp(m.named_parameters(), comm, {.bucket_bytes = 200, .overlap = overlap == 1});
      const uint64_t issued = comm->context().issued_count();
      autograd::backward(m.loss(b.x, b.targets, comm->rank() * per_rank, per_rank));
      // With overlap every bucket was launched inside backward; without, none was.
      const int64_t launched = int64_t(comm->context().issued_count() - issued);
      checks.expect(launched == (overlap == 1 ? dp.bucket_count() : 0),
                    "launched during backward: " + std::to_string(launched));
      dp.finish_gradient_sync();
      checks.expect(dp.last_stats().collectives == dp.bucket_count(), "collectives per step");
      for (const Tensor& p : m.parameters())
        results[overlap].push_back(p.grad().to_vector<float>());
    }
    bool same = results[0].size() == results[1].size();
    for (size_t i = 0; same && i < results[0].size(); ++i) {
      same = std::memcmp(results[0][i].data(), results[1][i].data(),
                         results[0][i].size() * sizeof(float)) == 0;
    }
    checks.expect(same, "overlap on and off differ on rank " + std::to_string(comm->rank()));
  });
  checks.verify();
}

TEST_P(DataParallelWorld, BroadcastMakesReplicasEqual) {
  const int n = GetParam();
  const int root = n - 1;
  const std::vector<float> want = [&] {
    std::vector<float> all;
    Mlp m(kModelSeed + uint64_t(root));
    for (const Tensor& p : m.parameters())
      for (float v : p.to_vector<float>()) all.push_back(v);
    return all;
  }();
  Checks checks;
  run_world(n, [&](dist::CommPtr comm) {
    Mlp m(kModelSeed + uint64_t(comm->rank()));  // different on every rank
    DataParallel dp(m.named_parameters(), comm, {.bucket_bytes = 500});
    const uint64_t issued = comm->context().issued_count();
    dp.broadcast_parameters(root);
    checks.expect(int64_t(comm->context().issued_count() - issued) == dp.bucket_count(),
                  "one broadcast per bucket");
    std::vector<float> got;
    for (const Tensor& p : m.parameters())
      for (float v : p.to_vector<float>()) got.push_back(v);
    checks.expect(got == want, "rank " + std::to_string(comm->rank()) + " differs from root");
  });
  checks.verify();
}

// `extra` comes last in model order, so it sits in bucket 0: on ranks that do not use it no hook
// fires for it and every bucket waits for finish, while ranks that use it launch them during
// backward. Launching a ready bucket before an earlier one would be caught here as a mismatch.
TEST_P(DataParallelWorld, UnusedParameters) {
  const int n = GetParam();
  const int64_t per_rank = 5, rows = per_rank * n;
  for (bool used_by_some : {false, true}) {
    auto uses_extra = [&](int rank) { return used_by_some && rank % 2 == 1; };
    // The average of every rank's local gradient, computed in one process.
    Grads want;
    for (int r = 0; r < n; ++r) {
      Mlp m(kModelSeed, true);
      Batch b = make_batch(rows, kDataSeed);
      autograd::backward(m.loss(b.x, b.targets, r * per_rank, per_rank, 1.0, uses_extra(r)));
      Grads g = grads_of(m);
      if (want.empty()) want.assign(g.size(), {});
      for (size_t i = 0; i < g.size(); ++i) {
        want[i].resize(g[i].size());
        for (size_t j = 0; j < g[i].size(); ++j) want[i][j] += g[i][j] / n;
      }
    }
    Checks checks;
    run_world(n, [&](dist::CommPtr comm) {
      Mlp m(kModelSeed, true);
      Batch b = make_batch(rows, kDataSeed);
      DataParallel dp(m.named_parameters(), comm, {.bucket_bytes = 400});
      autograd::backward(
          m.loss(b.x, b.targets, comm->rank() * per_rank, per_rank, 1.0, uses_extra(comm->rank())));
      dp.finish_gradient_sync();
      checks.expect(m.extra->weight.grad().defined(), "unused parameter has a gradient");
      checks.expect(dp.last_stats().collectives == dp.bucket_count(), "collectives per step");
      const std::string what = used_by_some ? "used by odd ranks" : "unused everywhere";
      Grads got = grads_of(m);
      for (size_t i = 0; i < want.size(); ++i) {
        double norm = 0;
        for (double v : want[i]) norm += v * v;
        if (norm == 0) {  // unused everywhere: exactly zero
          bool zero = true;
          for (double v : got[i]) zero = zero && v == 0;
          checks.expect(zero, what + ": parameter " + std::to_string(i) + " not zero");
        } else {
          checks.expect(rel_err(got[i], want[i]) <= tol_for(rows),
                        what + ": parameter " + std::to_string(i));
        }
      }
    });
    checks.verify();
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelWorld, ::testing::Values(2, 3, 4));

TEST(DataParallel, BucketsFollowReverseModelOrderAndSizeLimit) {
  // Bytes: fc1.weight 1716, fc1.bias 132, fc2.weight 924, fc2.bias 28.
  struct Case {
    int64_t bucket_bytes;
    std::vector<std::vector<std::string>> buckets;
  };
  const std::vector<Case> cases = {
      {1 << 20, {{"fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"}}},
      {1100, {{"fc2.bias", "fc2.weight", "fc1.bias"}, {"fc1.weight"}}},
      {1000, {{"fc2.bias", "fc2.weight"}, {"fc1.bias"}, {"fc1.weight"}}},
      {1, {{"fc2.bias"}, {"fc2.weight"}, {"fc1.bias"}, {"fc1.weight"}}},
  };
  run_world(1, [&](dist::CommPtr comm) {
    for (const Case& c : cases) {
      Mlp m(kModelSeed);
      DataParallel dp(m.named_parameters(), comm, {.bucket_bytes = c.bucket_bytes});
      ASSERT_EQ(dp.bucket_count(), int64_t(c.buckets.size())) << c.bucket_bytes;
      for (int64_t i = 0; i < dp.bucket_count(); ++i) {
        EXPECT_EQ(dp.bucket_parameters(i), c.buckets[size_t(i)]) << c.bucket_bytes;
      }
    }
  });
}

TEST(DataParallel, RemovesItsHooks) {
  Mlp m(kModelSeed);
  run_world(1, [&](dist::CommPtr comm) {
    DataParallel dp(m.named_parameters(), comm);
    EXPECT_EQ(autograd::autograd_meta(m.fc1->weight)->grad_ready_hooks.size(), 1u);
  });
  for (const Tensor& p : m.parameters()) {
    EXPECT_TRUE(autograd::autograd_meta(p)->grad_ready_hooks.empty());
  }
}

TEST(DataParallel, RefusesWhatItCannotReduce) {
  run_world(1, [&](dist::CommPtr comm) {
    Tensor f64 = nn::make_parameter(zeros({7}, DType::F64));
    EXPECT_THROW(
        {
          try {
            DataParallel dp({{"w", f64}}, comm);
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("'w' is f64; only f32"), std::string::npos)
                << e.what();
            throw;
          }
        },
        Error);
    Tensor plain = zeros({7});
    EXPECT_THROW(DataParallel({{"plain", plain}}, comm), Error);
    Tensor w = nn::make_parameter(zeros({7}));
    EXPECT_THROW(DataParallel({{"a", w}, {"b", w}}, comm), Error);
    EXPECT_THROW(DataParallel({}, comm), Error);
    DataParallel dp({{"w", w}}, comm);
    dp.set_sync(false);
    EXPECT_THROW(dp.finish_gradient_sync(), Error);
    // A synced backward must be finished before sync is turned off.
    dp.set_sync(true);
    autograd::backward(ops::sum(ops::mul(w, w)));
    EXPECT_THROW(dp.set_sync(false), Error);
    dp.finish_gradient_sync();
    dp.set_sync(false);
    EXPECT_EQ(dp.last_stats().collectives, 1);
  });
}

// A tiny GPT-2 (tied embeddings) on 3 ranks, one sequence each, against the full batch; with
// activation recomputation the blocks' gradients come from nested backwards, whose grad-ready hooks
// must launch the buckets just the same.
class TinyGpt2 : public ::testing::TestWithParam<nn::Recompute> {};

TEST_P(TinyGpt2, MatchesFullBatch) {
  const int n = 3;
  const TinyGpt2Case tiny(n);
  Grads want;
  {
    auto model = tiny.model();
    autograd::backward(model->loss(tiny.ids, tiny.targets));
    want = grads_of(*model);
  }
  Checks checks;
  run_world(n, [&](dist::CommPtr comm) {
    auto model = tiny.model();
    for (auto& block : model->blocks) block->set_recompute(GetParam());
    DataParallel dp(model->named_parameters(), comm, {.bucket_bytes = 4096});
    checks.expect(dp.bucket_count() > 3, "several buckets");
    const int r = comm->rank();
    const uint64_t issued = comm->context().issued_count();
    autograd::backward(model->loss(tiny.ids.narrow(0, r, 1), tiny.targets.narrow(0, r, 1)));
    checks.expect(int64_t(comm->context().issued_count() - issued) == dp.bucket_count(),
                  "every bucket launched inside backward");
    dp.finish_gradient_sync();
    // The derived bound for the batch's n * 13 tokens through n_layer + 2 stages (6e-6; AVX2
    // measured below 2e-6).
    checks.expect_grads(grads_of(*model), want,
                        test::reorder_tolerance(DType::F32, n * 13, tiny.config.n_layer + 2),
                        "gpt2");
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Recompute, TinyGpt2,
                         ::testing::Values(nn::Recompute::None, nn::Recompute::Selective,
                                           nn::Recompute::Full),
                         [](const auto& info) {
                           return std::string(nn::recompute_name(info.param));
                         });

}  // namespace
}  // namespace tessel::parallel
