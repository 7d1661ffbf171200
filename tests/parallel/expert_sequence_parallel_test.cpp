// SPDX-License-Identifier: Apache-2.0
// MoE layers under sequence parallelism on in-process thread worlds: each tp rank routes only its
// piece of the sequence (2 rows of 13 positions over tp 2 and 3: pieces 7 + 6 and 5 + 4 + 4), with
// whole experts and over ep 2 (tp fastest, as the trainer's mesh), against the serial layer on the
// whole sequence: each rank's output and input gradient equal the serial ones' piece, the
// auxiliary loss, the drops and the loads are the whole call's, and the router's and experts'
// gradients summed over tp are the serial ones (f64, 1e-12). The counted expert rows show the
// work: each rank's experts compute its piece's rows only, so the rows summed over tp are the
// serial layer's (not tp times them). With router jitter each rank draws its piece's elements of
// the whole call's noise, so the pieces route as the serial layer does; expert tensor parallelism
// keeps the gathering form.
#include "tessel/parallel/expert/expert_sequence_parallel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/thread_checks.h"
#include "moe_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/expert/expert_parallel.h"
#include "tessel/parallel/expert/expert_tensor_parallel.h"
#include "tessel/sharding/placement.h"
#include "tessel/tensor/default_device.h"

namespace tessel::parallel {
namespace {

using tessel::test::run_thread_world;
using tessel::test::ThreadChecks;
using test_util::grad_or_zeros;

constexpr int64_t kBatch = 2, kLength = 13, kHidden = 6;

nn::MoEConfig config() {
  nn::MoEConfig c;
  c.hidden = kHidden;
  c.ffn_hidden = 5;
  c.num_experts = 4;
  c.top_k = 2;
  c.capacity_factor = 1.0;  // drops pairs
  c.z_loss_coef = 0.01;
  return c;
}

std::shared_ptr<nn::MoE> layer(const nn::MoEConfig& c, Generator* noise = nullptr) {
  Generator g(11);
  return std::make_shared<nn::MoE>(c, nn::Init::normal(&g, 0.5, DType::F64), noise);
}

// Counts the rows the layer's own experts compute.
class CountingDispatch final : public nn::ExpertDispatch {
 public:
  Tensor run(nn::ExpertMLPs& experts, const Tensor& xs, const nn::Routing& r) override {
    rows += xs.size(0);
    return experts.forward(xs, from_data(r.offsets, Shape{int64_t(r.offsets.size())}),
                           from_data(r.expert_of_row, Shape{int64_t(r.expert_of_row.size())}));
  }
  int64_t rows = 0;
};

// Positions [start, start + size) of every row of the [kBatch, kLength, kHidden] sequence whose
// values are `seed`'s; a leaf requiring grad.
Tensor tokens(int seed, int64_t start, int64_t size) {
  std::vector<double> v;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = start; t < start + size; ++t)
      for (int64_t c = 0; c < kHidden; ++c)
        v.push_back(std::sin(0.37 * double((b * kLength + t) * kHidden + c + 1) + 1.3 * seed));
  Tensor x = from_data(v, Shape{kBatch, size, kHidden});
  x.set_requires_grad(true);
  return x;
}

// The same projection of the whole output on every layout (a piece takes its positions' weights),
// plus the auxiliary loss.
Tensor objective(const nn::MoE::Output& out, int64_t start) {
  const int64_t size = out.output.size(1);
  std::vector<double> w;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = start; t < start + size; ++t)
      for (int64_t c = 0; c < kHidden; ++c)
        w.push_back(std::cos(0.11 * double((b * kLength + t) * kHidden + c)));
  return ops::add(ops::sum(ops::mul(out.output, from_data(w, out.output.shape()))), out.aux_loss);
}

Tensor summed(const Tensor& t, dist::Communicator& comm) {
  Tensor s = t.clone();
  comm.all_reduce(s);
  return s;
}

// `jitter`: router jitter, the serial layer and every piece drawing from one seed.
void check_layout(int tp_size, int ep_size, double jitter = 0) {
  ThreadChecks checks;
  nn::MoEConfig c = config();
  c.jitter = jitter;
  run_thread_world(tp_size * ep_size, [&](dist::CommPtr world) {
    const int r = world->rank(), tp_rank = r % tp_size, ep_rank = r / tp_size;
    const std::string what = "rank " + std::to_string(r) + " (tp " + std::to_string(tp_size) +
                             " x ep " + std::to_string(ep_size) + ")";
    dist::CommPtr tp = world->split(ep_rank, tp_rank, "tp");
    dist::CommPtr ep = world->split(tp_rank, ep_rank, "ep");
    const int64_t start = sharding::shard_offset(kLength, tp_size, tp_rank);
    const int64_t size = sharding::shard_size(kLength, tp_size, tp_rank);

    Generator serial_noise(23), split_noise(23);
    auto serial = layer(c, &serial_noise);
    auto serial_rows = std::make_shared<CountingDispatch>();
    serial->set_dispatch(serial_rows);
    Tensor xs = tokens(ep_rank, 0, kLength);  // the tp group's whole sequence
    const nn::MoE::Output want = serial->forward(xs);
    autograd::backward(objective(want, 0));

    auto split = layer(c, &split_noise);
    auto sequence = std::make_shared<SequenceState>();
    sequence->length = kLength;
    checks.expect(gather_moe_tokens_over_sequence(*split, tp, sequence) == 1, what + ": one layer");
    std::shared_ptr<CountingDispatch> split_rows;
    if (ep_size > 1) {
      parallelize_experts(*split, ep);
      split_expert_rows_over_tp(*split, tp);  // unused by a routed piece
    } else {
      split_rows = std::make_shared<CountingDispatch>();
      split->set_dispatch(split_rows);
    }
    checks.expect(split->routes_pieces() && moe_parameter_names(*split).empty() &&
                      moe_parameter_names(*split, true).size() == split->named_parameters().size(),
                  what + ": the layer routes its piece; its gradients are addends");
    Tensor xp = tokens(ep_rank, start, size);
    const nn::MoE::Output got = split->forward(xp);
    autograd::backward(objective(got, start));

    checks.expect_close(got.output, want.output.slice(1, start, start + size), 1e-12,
                        what + ": output piece");
    checks.expect_close(got.aux_loss, want.aux_loss, 1e-12, what + ": aux loss (whole call's)");
    const nn::MoEStats &s = split->last_stats(), &w = serial->last_stats();
    checks.expect(s.tokens == w.tokens && s.dropped == w.dropped && w.dropped > 0 &&
                      s.tokens_per_expert == w.tokens_per_expert && s.capacity == w.capacity,
                  what + ": the whole call's routing and drops");
    checks.expect_close(xp.grad(), xs.grad().slice(1, start, start + size), 1e-12,
                        what + ": input gradient piece");
    checks.expect_close(summed(split->router->weight.grad(), *tp), serial->router->weight.grad(),
                        1e-12, what + ": router gradient summed over tp");

    // The rows: this rank's piece's kept pairs only; over the tp group, the serial layer's.
    Tensor rows = from_data(std::vector<double>{double(s.rows)}, Shape{1});
    tp->all_reduce(rows);
    const double group_rows = rows.to_vector<double>()[0];
    checks.expect(group_rows == double(w.rows) && s.rows < w.rows,
                  what + ": " + std::to_string(s.rows) + " expert rows here, " +
                      std::to_string(group_rows) + " over tp, the serial layer's " +
                      std::to_string(w.rows) + " (each row computed once)");
    if (split_rows) {
      checks.expect(split_rows->rows == s.rows && serial_rows->rows == w.rows,
                    what + ": the experts computed " + std::to_string(split_rows->rows) +
                        " rows, routed " + std::to_string(s.rows));
      for (const auto& [name, p] : serial->experts->named_parameters())
        for (const auto& [name2, q] : split->experts->named_parameters())
          if (name2 == name)
            checks.expect_close(summed(grad_or_zeros(q), *tp), grad_or_zeros(p), 1e-12,
                                what + ": " + name + " summed over tp");
    } else {
      // Each rank's experts: rows of the serial gradients summed over the ep ranks' sequences.
      const int64_t local = 4 / ep_size;
      for (const auto& [name, p] : serial->experts->named_parameters()) {
        Tensor mine = summed(grad_or_zeros(p), *ep).narrow(0, ep_rank * local, local).clone();
        for (const auto& [name2, q] : split->experts->named_parameters())
          if (name2 == name)
            checks.expect_close(summed(grad_or_zeros(q), *tp), mine, 1e-12,
                                what + ": " + name + " summed over tp");
      }
    }
  });
  checks.verify();
}

TEST(ExpertSequenceParallel, TwoTpRanksRouteTheirPiecesAsOneProcess) {
  check_layout(2, 1);
}

TEST(ExpertSequenceParallel, ThreeTpRanksRouteUnevenPieces) {
  check_layout(3, 1);
}

TEST(ExpertSequenceParallel, PiecesOverExpertParallelism) {
  check_layout(2, 2);
}

// Jitter 0.3 on every layout above: a piece that drew the first elements of the call's range
// (its own token indices, not its places in the call) fails here.
TEST(ExpertSequenceParallel, JitteredPiecesDrawTheirElementsOfTheWholeCall) {
  check_layout(2, 1, 0.3);
  check_layout(3, 1, 0.3);
  check_layout(2, 2, 0.3);
}

TEST(ExpertSequenceParallel, ExpertTensorParallelismGathersTheSequence) {
  ThreadChecks checks;
  run_thread_world(2, [&](dist::CommPtr tp) {
    auto sequence = std::make_shared<SequenceState>();
    sequence->length = kLength;
    auto columns = layer(config());
    parallelize_expert_ffn(*columns, tp);
    gather_moe_tokens_over_sequence(*columns, tp, sequence);
    checks.expect(!columns->routes_pieces() &&
                      moe_parameter_names(*columns).size() == columns->named_parameters().size(),
                  "rank " + std::to_string(tp->rank()) + ": it gathers the sequence");
  });
  checks.verify();
}

// A shape-only run (the planner's, on meta communicators) has no values to gather: each peer's
// piece is laid out as its own meta routing of its token count (token t of a piece to experts
// t k, ..., t k + k - 1 mod E), so the layer routes the whole call of 2 x 13 tokens on every rank
// of tp 3 (pieces 5, 4, 4), 3 experts so that the pieces' counts differ.
TEST(ExpertSequenceParallel, OnMetaEachPeersPieceIsItsMetaRouting) {
  DefaultDeviceScope meta(Device::meta());
  nn::MoEConfig c = config();
  c.num_experts = 3;
  const int tp_size = 3;
  std::vector<int64_t> routed(3, 0);
  for (int p = 0; p < tp_size; ++p)
    for (int64_t t = 0; t < kBatch * sharding::shard_size(kLength, tp_size, p); ++t)
      for (int64_t j = 0; j < c.top_k; ++j) ++routed[size_t((t * c.top_k + j) % c.num_experts)];
  for (int rank = 0; rank < tp_size; ++rank) {
    auto piece = std::make_shared<nn::MoE>(c, nn::Init::none());
    auto sequence = std::make_shared<SequenceState>();
    sequence->length = kLength;
    gather_moe_tokens_over_sequence(*piece, dist::make_meta_communicator(tp_size, rank, "tp"),
                                    sequence);
    ASSERT_TRUE(piece->routes_pieces());
    const int64_t size = sharding::shard_size(kLength, tp_size, rank);
    const nn::MoE::Output out = piece->forward(empty({kBatch, size, kHidden}, DType::F32));
    EXPECT_EQ(out.output.shape(), (Shape{kBatch, size, kHidden})) << "rank " << rank;
    const nn::MoEStats& s = piece->last_stats();
    EXPECT_EQ(s.tokens, kBatch * kLength) << "rank " << rank << ": the whole call";
    EXPECT_EQ(s.routed_per_expert, routed) << "rank " << rank;
  }
}

}  // namespace
}  // namespace tessel::parallel
