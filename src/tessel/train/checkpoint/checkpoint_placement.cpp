// SPDX-License-Identifier: Apache-2.0
// Local tensors to checkpoint pieces and back (checkpoint_placement.h). A segment's elements lie
// in the local tensor as `outer` runs of length * inner consecutive elements (outer = the product
// of the dims before `dim`, inner = of those after); each run, cut to [begin, end), is a range of
// consecutive elements of the segment's box too.
#include "tessel/train/checkpoint/checkpoint_placement.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::train {

namespace {

struct Run {
  int64_t local = 0;  // first local element (flat)
  int64_t box = 0;    // the same element's index in the segment's box
  int64_t n = 0;
};

// The runs of segment `s` inside local elements [begin, end), in increasing order.
std::vector<Run> segment_runs(const sharding::LocalLayout& p, const Shape& local_shape,
                              const sharding::Segment& s, int64_t begin, int64_t end) {
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < p.dim; ++k) outer *= local_shape[k];
  for (int k = p.dim + 1; k < local_shape.ndim(); ++k) inner *= local_shape[k];
  const int64_t rows = local_shape.ndim() > 0 ? local_shape[p.dim] : 1;
  const int64_t len = s.length * inner;
  std::vector<Run> runs;
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t lo = (o * rows + s.local_start) * inner;
    const int64_t a = std::max(lo, begin), b = std::min(lo + len, end);
    if (b <= a) continue;
    if (!runs.empty() && runs.back().local + runs.back().n == a)
      runs.back().n += b - a;  // the segment spans the whole dim: one run in both orders
    else
      runs.push_back({a, o * len + (a - lo), b - a});
  }
  return runs;
}

PieceRegion segment_box(const sharding::LocalLayout& p, const Shape& local_shape,
                        const sharding::Segment& s) {
  PieceRegion r = PieceRegion::whole(p.global);
  if (p.global.ndim() > 0) {
    r.start[size_t(p.dim)] = s.global_start;
    r.length[size_t(p.dim)] = s.length;
  }
  if (p.block_dim >= 0) {  // the other split: the local rows of that dim are one global block
    r.start[size_t(p.block_dim)] = p.block_start;
    r.length[size_t(p.block_dim)] = local_shape[p.block_dim];
  }
  r.end = r.box_numel();
  return r;
}

void check_placement(const sharding::LocalLayout& p, const Shape& local_shape, int64_t begin,
                     int64_t end, const Tensor& flat, const std::string& name, bool any_float) {
  TESSEL_CHECK(local_shape.ndim() == p.global.ndim() &&
                   (p.global.ndim() == 0 || (p.dim >= 0 && p.dim < p.global.ndim())),
               "checkpoint placement of ", name, ": local shape ", local_shape,
               " does not match global ", p.global, " split along dim ", p.dim);
  for (const auto& s : p.segments) {
    const int64_t local_rows = local_shape.ndim() > 0 ? local_shape[p.dim] : 1;
    const int64_t global_rows = p.global.ndim() > 0 ? p.global[p.dim] : 1;
    TESSEL_CHECK(s.length >= 0 && s.local_start >= 0 && s.local_start + s.length <= local_rows &&
                     s.global_start >= 0 && s.global_start + s.length <= global_rows,
                 "checkpoint placement of ", name, ": segment local ", s.local_start, "+", s.length,
                 " global ", s.global_start, " does not fit ", local_shape, " / ", p.global);
  }
  TESSEL_CHECK(p.block_dim < 0 ||
                   (p.block_dim != p.dim && p.block_dim < p.global.ndim() && p.block_start >= 0 &&
                    p.block_start + local_shape[p.block_dim] <= p.global[p.block_dim]),
               "checkpoint placement of ", name, ": block of dim ", p.block_dim, " at ",
               p.block_start, " does not fit ", local_shape, " / ", p.global);
  TESSEL_CHECK(begin >= 0 && begin <= end && end <= local_shape.numel() && flat.defined() &&
                   flat.numel() == end - begin &&
                   (any_float ? dtype_is_float(flat.dtype()) : flat.dtype() == DType::F32),
               "checkpoint placement of ", name, ": elements [", begin, ", ", end, ") of ",
               local_shape, " with ", flat.defined() ? flat.numel() : 0,
               any_float ? " float values" : " f32 values");
}

}  // namespace

std::vector<Piece> placed_pieces(const std::string& name, const sharding::LocalLayout& placement,
                                 const Shape& local_shape, int64_t begin, int64_t end,
                                 const Tensor& flat) {
  check_placement(placement, local_shape, begin, end, flat, name, /*any_float=*/true);
  std::vector<Piece> out;
  for (const auto& s : placement.segments) {
    const std::vector<Run> runs = segment_runs(placement, local_shape, s, begin, end);
    if (runs.empty()) continue;
    // A view of `flat`: the writer reads the runs from it when the file reaches them.
    Piece piece{name, placement.global, segment_box(placement, local_shape, s), flat, {}};
    piece.region.begin = runs.front().box;
    piece.region.end = runs.back().box + runs.back().n;
    for (const Run& r : runs) piece.runs.emplace_back(r.local - begin, r.n);
    out.push_back(std::move(piece));
  }
  return out;
}

void check_region(const std::string& name, const Shape& shape, const PieceRegion& region) {
  const size_t nd = size_t(shape.ndim());
  TESSEL_CHECK(region.start.size() == nd && region.length.size() == nd && region.begin >= 0 &&
                   region.begin <= region.end && region.end <= region.box_numel(),
               "region ", region.str(), " of '", name, "' ", shape);
  for (size_t d = 0; d < nd; ++d)
    TESSEL_CHECK(region.start[d] >= 0 && region.length[d] >= 0 &&
                     region.start[d] + region.length[d] <= shape[int(d)],
                 "region ", region.str(), " outside '", name, "' ", shape);
}

void for_each_run(const Shape& shape, const PieceRegion& region,
                  const std::function<void(int64_t global, int64_t n, int64_t at)>& fn) {
  const size_t nd = size_t(shape.ndim());
  if (nd == 0) {
    if (region.end > region.begin) fn(0, 1, 0);
    return;
  }
  // Box element k lies in row k / L of the box (L: its last dim's length); a row is consecutive
  // in the global tensor too.
  const int64_t last = region.length[nd - 1];
  std::vector<int64_t> index(nd, 0);
  for (int64_t k = region.begin; k < region.end;) {
    const int64_t row = k / last, col = k % last;
    const int64_t n = std::min(last - col, region.end - k);
    int64_t global = 0, rest = row;
    for (size_t d = nd - 1; d-- > 0;) {
      index[d] = rest % region.length[d];
      rest /= region.length[d];
    }
    for (size_t d = 0; d + 1 < nd; ++d)
      global = global * shape[int(d)] + region.start[d] + index[d];
    global = global * shape[int(nd - 1)] + region.start[nd - 1] + col;
    fn(global, n, k - region.begin);
    k += n;
  }
}

void fill_placed(const RegionSource& source, const std::string& name,
                 const sharding::LocalLayout& placement, const Shape& local_shape, int64_t begin,
                 int64_t end, Tensor flat) {
  check_placement(placement, local_shape, begin, end, flat, name, /*any_float=*/false);
  if (flat.numel() == 0) return;
  // Zeros only where no segment writes (the vocabulary padding): a whole-covering fill would touch
  // every page twice.
  float* dst = flat.data<float>();
  std::vector<char> covered;
  int64_t written = 0;
  for (const auto& s : placement.segments) {
    for (const Run& r : segment_runs(placement, local_shape, s, begin, end)) {
      PieceRegion region = segment_box(placement, local_shape, s);
      region.begin = r.box;
      region.end = r.box + r.n;
      source(name, region, dst + (r.local - begin));
      written += r.n;
    }
  }
  if (written == end - begin) return;
  covered.assign(size_t(end - begin), 0);
  for (const auto& s : placement.segments)
    for (const Run& r : segment_runs(placement, local_shape, s, begin, end))
      std::fill_n(covered.begin() + (r.local - begin), r.n, char(1));
  for (int64_t i = 0; i < end - begin; ++i)
    if (!covered[size_t(i)]) dst[i] = 0.0f;
}

void read_placed(PieceReader& reader, const std::string& name,
                 const sharding::LocalLayout& placement, const Shape& local_shape, int64_t begin,
                 int64_t end, Tensor flat) {
  TESSEL_CHECK(reader.shape(name) == placement.global, "checkpoint: ", name, " has shape ",
               reader.shape(name), ", this run's layout expects ", placement.global);
  fill_placed([&reader](const std::string& n, const PieceRegion& region,
                        float* dst) { reader.read(n, region, dst); },
              name, placement, local_shape, begin, end, std::move(flat));
}

}  // namespace tessel::train
