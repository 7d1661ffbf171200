// SPDX-License-Identifier: Apache-2.0
// The vocab-parallel embedding and cross-entropy and the sequence-parallel MLP on thread worlds of
// 2, 3 and 4 ranks against one process (odd sizes: vocabulary 37, sequence 13, features 7 and 33):
// loss, logits gradients and gathered weight gradients equal (relative error <= 1e-5), padding
// columns never contribute, ignored rows are skipped, and the collectives are exactly those the
// styles promise (the flight recorder counts them).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/dist/record.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/tensor/tensor_parallel.h"
#include "tessel/parallel/tensor/vocab_parallel.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/regions.h"
#include "tessel/sharding/shard_layout.h"

namespace tessel::parallel {
namespace {

using namespace test_util;

constexpr int64_t kVocab = 37, kDim = 7, kBatch = 2, kSeq = 13, kHidden = 33;
// Vocab and sequence pieces summed over ranks in another order than one process: the derived
// bound (tests/common/tolerance.h) for the longest reduction, kBatch * kSeq = 26 tokens or kHidden
// = 33 terms, through 2 stages is 3.9e-6; 1e-5 is above it for every vector width, and far below
// a missing piece or a wrong logsumexp (O(1e-2) and more).
constexpr double kTol = 1e-5;

// Kinds of the calls issued on `comm` since `before`, gathers of either form as "all_gather".
std::map<std::string, int> calls_since(dist::Communicator& comm, uint64_t before) {
  const uint64_t n = comm.context().issued_count() - before;
  std::map<std::string, int> out;
  if (n == 0) return out;
  for (const auto& r : comm.context().recent(size_t(n))) {
    switch (r.kind) {
      case dist::OpKind::AllReduce:
        ++out["all_reduce"];
        break;
      case dist::OpKind::AllGather:
      case dist::OpKind::AllGatherV:
        ++out["all_gather"];
        break;
      case dist::OpKind::ReduceScatter:
        ++out["reduce_scatter"];
        break;
      default:
        ++out["other"];
    }
  }
  return out;
}

std::string str(const std::map<std::string, int>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += k + "=" + std::to_string(v) + " ";
  return s.empty() ? "none" : s;
}

Tensor ids_tensor(uint64_t salt) {
  std::vector<int64_t> v(size_t(kBatch * kSeq));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 11 + salt * 5 + 3) % kVocab);
  return from_data(v, {kBatch, kSeq});
}

// Embedding -> logits against the same weight (tied head) -> cross-entropy, one process.
struct Serial {
  double loss = 0;
  std::vector<double> weight_grad;
};

Tensor targets_with_ignored() {
  Tensor t = ids_tensor(2);
  t.data<int64_t>()[4] = -100;  // ignored rows count neither in the sum nor in the mean
  t.data<int64_t>()[17] = -100;
  return t;
}

Serial serial(const Tensor& w0) {
  nn::Embedding emb(kVocab, kDim, nn::Init::none());
  emb.weight.copy_from(w0);
  Tensor x = emb.forward(ids_tensor(1));
  Tensor logits = ops::linear(x, emb.weight);
  Tensor loss = ops::cross_entropy(ops::reshape(logits, {kBatch * kSeq, kVocab}),
                                   targets_with_ignored().reshape({kBatch * kSeq}));
  autograd::backward(loss);
  return {loss.item(), emb.weight.grad().to_vector<double>()};
}

class VocabParallelWorld : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(VocabParallelWorld, EmbeddingAndCrossEntropyEqualOneProcess) {
  const auto [n, sp] = GetParam();
  Generator g(9);
  const Tensor w0 = randn({kVocab, kDim}, DType::F32, &g);
  const Serial want = serial(w0);
  Checks checks;
  run_world(n, [&](dist::CommPtr tp) {
    const std::string at =
        "tp " + std::to_string(n) + (sp ? " sp" : "") + " rank " + std::to_string(tp->rank());
    nn::Embedding emb(kVocab, kDim, nn::Init::none());
    emb.weight.copy_from(w0);
    TpOptions o;
    o.sequence_parallel = sp;
    o.sequence = std::make_shared<SequenceState>();
    parallelize_vocab_embedding(emb, tp, o);
    const int64_t padded = padded_vocab_size(kVocab, n), rows = padded / n;
    checks.expect(emb.weight.shape() == Shape({rows, kDim}),
                  at + ": weight " + emb.weight.shape().str());
    uint64_t before = tp->context().issued_count();
    Tensor x = emb.forward(ids_tensor(1));
    const auto fwd = calls_since(*tp, before);
    const std::map<std::string, int> want_fwd = {{sp ? "reduce_scatter" : "all_reduce", 1}};
    checks.expect(fwd == want_fwd, at + ": embedding forward issued " + str(fwd));
    if (sp) {
      const int64_t piece = sharding::shard_size(kSeq, n, tp->rank());
      checks.expect(x.shape() == Shape({kBatch, piece, kDim}) && o.sequence->length == kSeq,
                    at + ": sequence piece " + x.shape().str());
      x = sharding::gather_from_region(x, *tp, 1, kSeq);  // what the LM head's input does
    } else {
      x = sharding::copy_to_region(x, *tp);
    }
    Tensor logits = ops::linear(x, emb.weight);  // this rank's (padded) vocabulary columns
    before = tp->context().issued_count();
    Tensor loss = vocab_parallel_cross_entropy(logits, targets_with_ignored(), *tp, kVocab,
                                               int64_t(tp->rank()) * rows);
    const auto ce = calls_since(*tp, before);
    checks.expect(ce == std::map<std::string, int>{{"all_reduce", 2}},
                  at + ": cross-entropy forward issued " + str(ce));
    const double el = std::abs(loss.item() - want.loss) / std::abs(want.loss);
    checks.expect(el <= kTol, at + ": loss relative error " + std::to_string(el));
    autograd::backward(loss);
    const sharding::ShardLayout spec{0, kVocab, padded};
    Tensor full_grad = sharding::gather_tensor(emb.weight.grad(), spec, *tp);
    const double eg = rel_err(full_grad.to_vector<double>(), want.weight_grad);
    checks.expect(eg <= kTol, at + ": embedding gradient relative error " + std::to_string(eg));
    // Padding rows: zero weights, zero gradients.
    const auto local_grad = emb.weight.grad().to_vector<double>();
    const auto local_w = emb.weight.to_vector<double>();
    for (int64_t r = 0; r < rows; ++r) {
      if (int64_t(tp->rank()) * rows + r < kVocab) continue;
      for (int64_t j = 0; j < kDim; ++j) {
        checks.expect(local_w[size_t(r * kDim + j)] == 0 && local_grad[size_t(r * kDim + j)] == 0,
                      at + ": padding row " + std::to_string(r) + " is not zero");
      }
    }
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Worlds, VocabParallelWorld,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()));

// Colwise -> GELU -> Rowwise with sequence parallelism: the input and output are sequence pieces;
// forward all-gathers once and reduce-scatters once, backward the reverse.
class Mlp : public nn::Module {
 public:
  Mlp() : Module("Mlp") {
    Generator g(21);
    fc = register_module(
        "fc", std::make_shared<nn::Linear>(kDim, kHidden, true, nn::Init::normal(&g, 0.3)));
    proj = register_module(
        "proj", std::make_shared<nn::Linear>(kHidden, kDim, true, nn::Init::normal(&g, 0.3)));
    Generator gb(22);
    fc->bias.copy_from(randn({kHidden}, DType::F32, &gb));
    proj->bias.copy_from(randn({kDim}, DType::F32, &gb));
  }
  Tensor forward(const Tensor& x) { return proj->forward(ops::gelu(fc->forward(x))); }
  std::shared_ptr<nn::Linear> fc, proj;
};

TEST(SequenceParallelMlp, EqualsOneProcessWithOneGatherAndOneReduceScatterEachWay) {
  Generator g(31);
  const Tensor x0 = randn({kBatch, kSeq, kDim}, DType::F32, &g);
  const Tensor mix = randn({kBatch, kSeq, kDim}, DType::F32, &g);
  Mlp ref;
  Tensor xr = x0.clone().set_requires_grad(true);
  Tensor yr = ref.forward(xr);
  autograd::backward(ops::sum(ops::mul(yr, mix)));
  for (int n : {2, 3, 4}) {
    Checks checks;
    run_world(n, [&](dist::CommPtr tp) {
      const int r = tp->rank();
      const std::string at = "tp " + std::to_string(n) + " rank " + std::to_string(r);
      Mlp m;
      TpOptions o;
      o.sequence_parallel = true;
      o.sequence = std::make_shared<SequenceState>();
      o.sequence->length = kSeq;  // as a sequence-splitting embedding would record
      parallelize_colwise(*m.fc, tp, o);
      parallelize_rowwise(*m.proj, tp, true, o);
      const int64_t off = sharding::shard_offset(kSeq, n, r),
                    len = sharding::shard_size(kSeq, n, r);
      Tensor x = ops::slice(x0, 1, off, off + len).set_requires_grad(true);
      uint64_t before = tp->context().issued_count();
      Tensor y = m.forward(x);
      const auto fwd = calls_since(*tp, before);
      before = tp->context().issued_count();
      autograd::backward(ops::sum(ops::mul(y, ops::slice(mix, 1, off, off + len))));
      const auto bwd = calls_since(*tp, before);
      const std::map<std::string, int> one_each = {{"all_gather", 1}, {"reduce_scatter", 1}};
      checks.expect(fwd == one_each, at + ": forward issued " + str(fwd));
      checks.expect(bwd == one_each, at + ": backward issued " + str(bwd));
      const double ey =
          rel_err(y.to_vector<double>(), ops::slice(yr, 1, off, off + len).to_vector<double>());
      checks.expect(ey <= kTol, at + ": output piece relative error " + std::to_string(ey));
      const double ex = rel_err(x.grad().to_vector<double>(),
                                ops::slice(xr.grad(), 1, off, off + len).to_vector<double>());
      checks.expect(ex <= kTol, at + ": input gradient relative error " + std::to_string(ex));
      const double ew = rel_err(gather_full_weight(*m.fc, *tp, true).to_vector<double>(),
                                ref.fc->weight.grad().to_vector<double>());
      checks.expect(ew <= kTol, at + ": fc weight gradient relative error " + std::to_string(ew));
      // The Rowwise bias met only this rank's sequence piece: its gradient sums over the ranks.
      Tensor bias_grad = m.proj->bias.grad().clone();
      tp->all_reduce(bias_grad);
      const double eb =
          rel_err(bias_grad.to_vector<double>(), ref.proj->bias.grad().to_vector<double>());
      checks.expect(eb <= kTol, at + ": summed Rowwise bias gradient error " + std::to_string(eb));
    });
    checks.verify();
  }
}

TEST(ShardLayout, FusedBlocksAndPaddingRoundTrip) {
  // A fused [3 x 4 heads x 2, 5] weight: rank r holds its heads' rows of each block, in order.
  Generator g(3);
  const Tensor w = randn({24, 5}, DType::F32, &g);
  const sharding::ShardLayout fused{0, 24, 0, 3, 2};
  for (int n : {1, 2, 4}) {
    Checks checks;
    run_world(n, [&](dist::CommPtr tp) {
      const int r = tp->rank();
      Tensor piece = sharding::shard_tensor(w, fused, n, r);
      const int64_t per = 8 / n;  // rows per block on one rank
      for (int64_t b = 0; b < 3; ++b) {
        Tensor want = w.slice(0, b * 8 + r * per, b * 8 + (r + 1) * per);
        Tensor got = piece.slice(0, b * per, (b + 1) * per);
        checks.expect(got.to_vector<double>() == want.to_vector<double>(),
                      "rank " + std::to_string(r) + " block " + std::to_string(b));
      }
      checks.expect(
          sharding::gather_tensor(piece, fused, *tp).to_vector<double>() == w.to_vector<double>(),
          "fused round trip over " + std::to_string(n));
    });
    checks.verify();
  }
  // 7 rows padded to 9 over 3 ranks: rank 2 holds row 6 and two zero rows; gathering drops them.
  const sharding::ShardLayout pad{0, 7, 9};
  const Tensor v = randn({7, 2}, DType::F32, &g);
  const std::vector<double> all = v.to_vector<double>();
  EXPECT_EQ(sharding::shard_tensor(v, pad, 3, 2).to_vector<double>(),
            std::vector<double>({all[12], all[13], 0, 0, 0, 0}));
  EXPECT_THROW(sharding::shard_ranges(sharding::ShardLayout{0, 24, 0, 3, 2}, 3, 0),
               Error);  // 4 heads over 3 ranks
}

}  // namespace
}  // namespace tessel::parallel
