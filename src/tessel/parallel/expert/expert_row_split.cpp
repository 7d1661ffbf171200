// SPDX-License-Identifier: Apache-2.0
// Expert rows split over tp: the pieces, and the two differentiable functions that move them.
#include "tessel/parallel/expert/expert_row_split.h"

#include <memory>
#include <numeric>
#include <utility>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/sharding/placement.h"

namespace tessel::parallel {

RowPieces::RowPieces(std::vector<int64_t> blocks, int parts)
    : blocks_(std::move(blocks)), starts_(blocks_.size(), 0), parts_(parts) {
  TESSEL_CHECK(parts_ >= 1, "expert rows over tp: ", parts_, " parts");
  for (size_t b = 0; b < blocks_.size(); ++b) {
    TESSEL_CHECK(blocks_[b] >= 0, "expert rows over tp: block ", b, " has ", blocks_[b], " rows");
    starts_[b] = total_;
    total_ += blocks_[b];
  }
}

std::vector<int64_t> RowPieces::piece_blocks(int part) const {
  std::vector<int64_t> rows(blocks_.size());
  for (size_t b = 0; b < blocks_.size(); ++b)
    rows[b] = sharding::shard_size(blocks_[b], parts_, part);
  return rows;
}

int64_t RowPieces::piece_rows(int part) const {
  const std::vector<int64_t> rows = piece_blocks(part);
  return std::accumulate(rows.begin(), rows.end(), int64_t(0));
}

Tensor RowPieces::take(const Tensor& whole, int part) const {
  TESSEL_CHECK(whole.size(0) == total_, "expert rows over tp: ", whole.size(0),
               " rows, the pieces cover ", total_);
  Shape shape = whole.shape();
  shape[0] = piece_rows(part);
  Tensor piece = empty(shape, whole.dtype());
  int64_t at = 0;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const int64_t n = sharding::shard_size(blocks_[b], parts_, part);
    if (n == 0) continue;
    const int64_t from = starts_[b] + sharding::shard_offset(blocks_[b], parts_, part);
    piece.narrow(0, at, n).copy_from(whole.narrow(0, from, n));
    at += n;
  }
  return piece;
}

void RowPieces::put(const Tensor& piece, int part, const Tensor& whole) const {
  TESSEL_CHECK(whole.size(0) == total_ && piece.size(0) == piece_rows(part),
               "expert rows over tp: a piece of ", piece.size(0), " rows into ", whole.size(0),
               " (expected ", piece_rows(part), " of ", total_, ")");
  int64_t at = 0;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const int64_t n = sharding::shard_size(blocks_[b], parts_, part);
    if (n == 0) continue;
    const int64_t to = starts_[b] + sharding::shard_offset(blocks_[b], parts_, part);
    whole.narrow(0, to, n).copy_from(piece.narrow(0, at, n));
    at += n;
  }
}

namespace {

// Every rank's piece gathered into the whole rows, not recorded.
Tensor gather_pieces(const Tensor& piece, const RowPieces& pieces, dist::Communicator& tp) {
  const int n = tp.size();
  TESSEL_CHECK(pieces.parts() == n, "expert rows over tp: pieces for ", pieces.parts(),
               " ranks on '", tp.label(), "' of ", n);
  int64_t width = 1;  // elements per row
  for (int d = 1; d < piece.ndim(); ++d) width *= piece.size(d);
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) counts[size_t(t)] = pieces.piece_rows(t) * width;
  Shape shape = piece.shape();
  shape[0] = pieces.total();
  Tensor gathered = empty(shape, piece.dtype());
  tp.all_gather_v(piece, gathered, counts);
  // Gathered in rank order (each rank's part of every block); the whole is in block order.
  Tensor whole = empty(shape, piece.dtype());
  int64_t at = 0;
  for (int t = 0; t < n; ++t) {
    const int64_t rows = pieces.piece_rows(t);
    pieces.put(gathered.narrow(0, at, rows), t, whole);
    at += rows;
  }
  return whole;
}

class ScatterRowsBackward final : public autograd::Node {
 public:
  ScatterRowsBackward(RowPieces pieces, dist::Communicator& tp)
      : pieces_(std::move(pieces)), tp_(tp) {}
  std::string_view name() const override { return "scatter_rows_to_tp_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {gather_pieces(grads[0], pieces_, tp_)};
  }

 private:
  RowPieces pieces_;
  dist::Communicator& tp_;  // the tp communicator outlives the graph
};

class GatherRowsBackward final : public autograd::Node {
 public:
  GatherRowsBackward(RowPieces pieces, dist::Communicator& tp)
      : pieces_(std::move(pieces)), tp_(tp) {}
  std::string_view name() const override { return "gather_rows_from_tp_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {pieces_.take(grads[0], tp_.rank())};
  }

 private:
  RowPieces pieces_;
  dist::Communicator& tp_;
};

}  // namespace

Tensor scatter_rows_to_tp(const Tensor& x, const RowPieces& pieces, dist::Communicator& tp) {
  TESSEL_CHECK(x.defined() && x.ndim() >= 1 && pieces.parts() == tp.size(),
               "scatter_rows_to_tp: pieces for ", pieces.parts(), " ranks on '", tp.label(),
               "' of ", tp.size());
  Tensor y = pieces.take(x.detach(), tp.rank());
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<ScatterRowsBackward>(pieces, tp), {x}, {y});
  return y;
}

Tensor gather_rows_from_tp(const Tensor& piece, const RowPieces& pieces, dist::Communicator& tp) {
  TESSEL_CHECK(piece.defined() && piece.ndim() >= 1 &&
                   piece.size(0) == pieces.piece_rows(tp.rank()),
               "gather_rows_from_tp: rank ", tp.rank(), " of '", tp.label(), "' holds ",
               piece.defined() ? piece.size(0) : -1, " rows, its piece has ",
               pieces.piece_rows(tp.rank()));
  Tensor y = gather_pieces(piece.detach(), pieces, tp);
  if (autograd::needs_grad({piece}))
    autograd::record(std::make_shared<GatherRowsBackward>(pieces, tp), {piece}, {y});
  return y;
}

}  // namespace tessel::parallel
