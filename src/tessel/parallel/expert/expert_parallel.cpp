// SPDX-License-Identifier: Apache-2.0
// Expert parallelism's dispatch and combine. Rows leave the layer grouped by global expert, so the
// rows for rank r's experts are one contiguous block and the dispatch is a single all_to_all_v in
// rank order. They arrive grouped by source rank, then local expert; one gather regroups them by
// local expert (then source rank) so that each local expert's rows are contiguous for the grouped
// GEMM, and the inverse gather restores the arrival order before the combine sends them home.
// Both gathers are ops::embedding, whose backward is the scatter-add: with a permutation, the
// inverse permutation of the gradient.
// When the ranks of a tp group hold the same rows (split_expert_rows_over_tp) each exchange sends
// this tp rank's piece of every block and the tp group gathers the pieces back
// (expert_row_split.h), so the gathered rows, and everything between the two exchanges, are as
// without the split. Under sequence parallelism a layer that routes its own piece of the sequence
// (nn::MoE::routes_pieces) has rows of its own: it sends them whole, over its ep group.
#include "tessel/parallel/expert/expert_parallel.h"

#include <memory>
#include <numeric>
#include <utility>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/ops/embedding.h"
#include "tessel/parallel/expert/expert_row_split.h"

namespace tessel::parallel {
namespace {

Tensor i64_tensor(const std::vector<int64_t>& values) {
  return from_data(values, Shape{int64_t(values.size())});
}

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t(0));
}

// The exchange itself, not recorded: rows of x to their ranks.
Tensor exchange_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, dist::Communicator& comm) {
  int64_t width = 1;  // elements per row
  for (int d = 1; d < x.ndim(); ++d) width *= x.size(d);
  Shape shape = x.shape();
  shape[0] = total(recv_rows);
  std::vector<int64_t> in_counts(send_rows.size()), out_counts(recv_rows.size());
  for (size_t r = 0; r < send_rows.size(); ++r) in_counts[r] = send_rows[r] * width;
  for (size_t r = 0; r < recv_rows.size(); ++r) out_counts[r] = recv_rows[r] * width;
  Tensor y = empty(shape, x.dtype());
  comm.all_to_all_v(x, in_counts, y, out_counts);
  return y;
}

class AllToAllRowsBackward final : public autograd::Node {
 public:
  AllToAllRowsBackward(dist::Communicator& comm, std::vector<int64_t> send,
                       std::vector<int64_t> recv)
      : comm_(comm), send_(std::move(send)), recv_(std::move(recv)) {}
  std::string_view name() const override { return "all_to_all_rows_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {exchange_rows(grads[0], recv_, send_, comm_)};
  }

 private:
  dist::Communicator& comm_;  // the ep communicator outlives the graph
  std::vector<int64_t> send_, recv_;
};

// One MoE layer's experts over the ep ranks.
class ExpertParallelDispatch final : public nn::ExpertDispatch {
 public:
  explicit ExpertParallelDispatch(dist::CommPtr ep) : ep_(std::move(ep)) {}
  void split_rows_over(dist::CommPtr tp) { tp_ = std::move(tp); }

  Tensor run(nn::ExpertMLPs& experts, const Tensor& xs, const nn::Routing& r) override {
    const int n = ep_->size();
    const int64_t local = experts.experts();
    TESSEL_CHECK(r.experts == local * n && experts.first_expert() == local * ep_->rank(),
                 "expert parallel: the layer routes to ", r.experts, " experts, but rank ",
                 ep_->rank(), " of ", n, " holds experts [", experts.first_expert(), ", ",
                 experts.first_expert() + local, ")");
    // Each rank learns how many rows of each of its experts every rank sends.
    std::vector<int64_t> count(size_t(r.experts));
    for (int64_t e = 0; e < r.experts; ++e)
      count[size_t(e)] = r.offsets[size_t(e + 1)] - r.offsets[size_t(e)];
    Tensor got = empty(Shape{r.experts}, DType::I64);
    ep_->all_to_all(i64_tensor(count), got);
    const std::vector<int64_t> incoming = got.to_vector<int64_t>();  // [source rank, local expert]
    std::vector<int64_t> send_rows(size_t(n), 0), recv_rows(size_t(n), 0);
    for (int s = 0; s < n; ++s)
      for (int64_t j = 0; j < local; ++j) {
        send_rows[size_t(s)] += count[size_t(s * local + j)];
        recv_rows[size_t(s)] += incoming[size_t(s * local + j)];
      }
    // Under a tp split each tp rank sends its piece of every block and the tp group gathers the
    // pieces that arrived (expert_row_split.h); the gathered rows are the whole exchange's. A
    // routed piece of a sequence (r.piece) holds rows no tp peer holds: it sends them all.
    const bool split = tp_ && !r.piece;
    const int parts = split ? tp_->size() : 1, part = split ? tp_->rank() : 0;
    const RowPieces out_pieces(send_rows, parts), in_pieces(recv_rows, parts);
    const auto exchange = [&](const Tensor& rows, const RowPieces& from, const RowPieces& to) {
      if (!split) return all_to_all_rows(rows, from.piece_blocks(0), to.piece_blocks(0), *ep_);
      Tensor sent = all_to_all_rows(scatter_rows_to_tp(rows, from, *tp_), from.piece_blocks(part),
                                    to.piece_blocks(part), *ep_);
      return gather_rows_from_tp(sent, to, *tp_);
    };
    Tensor arrived = exchange(xs, out_pieces, in_pieces);

    // Arrival order (source, expert) -> expert order (expert, source) for the grouped GEMM.
    std::vector<int64_t> start(incoming.size(), 0);
    for (size_t b = 1; b < incoming.size(); ++b) start[b] = start[b - 1] + incoming[b - 1];
    std::vector<int64_t> order, offsets{0}, expert_of_row;
    for (int64_t j = 0; j < local; ++j) {
      for (int s = 0; s < n; ++s) {
        const size_t b = size_t(s * local + j);
        for (int64_t i = 0; i < incoming[b]; ++i) order.push_back(start[b] + i);
      }
      expert_of_row.resize(order.size(), j);
      offsets.push_back(int64_t(order.size()));
    }
    // Nothing arrived: the (empty) rows go back as they came, so the combine and its backward
    // still take part in the exchange every other rank makes.
    Tensor back = arrived;
    if (!order.empty()) {
      std::vector<int64_t> inverse(order.size());
      for (size_t k = 0; k < order.size(); ++k) inverse[size_t(order[k])] = int64_t(k);
      Tensor grouped = ops::embedding(arrived, i64_tensor(order));
      Tensor out = experts.forward(grouped, i64_tensor(offsets), i64_tensor(expert_of_row));
      back = ops::embedding(out, i64_tensor(inverse));
    }
    return exchange(back, in_pieces, out_pieces);
  }

 private:
  dist::CommPtr ep_;
  dist::CommPtr tp_;  // set: the rows are split over these ranks, which hold the same tokens
};

}  // namespace

Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, dist::Communicator& comm) {
  TESSEL_CHECK(x.defined() && x.ndim() >= 1, "all_to_all_rows: the input must have a row dim");
  TESSEL_CHECK(int(send_rows.size()) == comm.size() && int(recv_rows.size()) == comm.size(),
               "all_to_all_rows: ", send_rows.size(), " send and ", recv_rows.size(),
               " receive counts for ", comm.size(), " ranks of '", comm.label(), "'");
  TESSEL_CHECK(total(send_rows) == x.size(0), "all_to_all_rows: the send counts add up to ",
               total(send_rows), " rows, the input has ", x.size(0));
  Tensor y = exchange_rows(x.detach(), send_rows, recv_rows, comm);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<AllToAllRowsBackward>(comm, send_rows, recv_rows), {x}, {y});
  return y;
}

std::string expert_parallel_error(const nn::MoEConfig& config, int ep, const std::string& layer) {
  if (ep < 1) return "expert parallel: --ep must be >= 1, got " + std::to_string(ep);
  if (config.num_experts % ep != 0)
    return "expert parallel: layer '" + layer + "' has " + std::to_string(config.num_experts) +
           " experts, which --ep " + std::to_string(ep) +
           " ranks cannot split evenly (the expert count must be divisible by ep)";
  return "";
}

ExpertParallelResult parallelize_experts(nn::Module& root, dist::CommPtr ep) {
  TESSEL_CHECK(ep != nullptr, "expert parallel: the ep communicator is null");
  const int n = ep->size(), rank = ep->rank();
  ExpertParallelResult result;
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    const std::string error = expert_parallel_error(moe->config(), n, name);
    TESSEL_CHECK(error.empty(), error);
    const int64_t experts = moe->config().num_experts, local = experts / n;
    moe->experts->keep_experts(rank * local, local);
    moe->set_dispatch(std::make_shared<ExpertParallelDispatch>(ep));
    const std::string prefix = (name.empty() ? "" : name + ".") + "experts.";
    for (const auto& [param, t] : moe->experts->named_parameters()) {
      result.params.push_back(prefix + param);
      result.experts.push_back(experts);
    }
    ++result.layers;
  }
  TESSEL_CHECK(result.layers > 0, "expert parallel: --ep ", n, " needs a mixture-of-experts ",
               "model; ", root.type_name(), " has no MoE layer");
  return result;
}

void split_expert_rows_over_tp(nn::Module& root, dist::CommPtr tp) {
  TESSEL_CHECK(tp != nullptr, "expert parallel: the tp communicator is null");
  int64_t layers = 0;
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    auto* dispatch = dynamic_cast<ExpertParallelDispatch*>(moe->dispatch());
    TESSEL_CHECK(dispatch != nullptr, "expert parallel: layer '", name,
                 "' is not split over ep, so it has no exchange to split over tp");
    dispatch->split_rows_over(tp);
    ++layers;
  }
  TESSEL_CHECK(layers > 0, "expert parallel: ", root.type_name(), " has no MoE layer");
}

}  // namespace tessel::parallel
