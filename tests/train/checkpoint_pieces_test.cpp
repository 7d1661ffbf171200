// SPDX-License-Identifier: Apache-2.0
// Layout-independent checkpoint pieces: three thread-ranks each write their pieces of odd-sized
// tensors (column shards, per-block rows, flat ranges cut through rows and through segments),
// rank 0 indexes them, and every rank reads them back whole and in another layout, bit for bit.
// A missing piece file, a missing piece and a corrupted file are refused with their names.
#include "tessel/train/checkpoint/checkpoint_pieces.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/scratch_dir.h"
#include "common/thread_checks.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& tag) {
  return tessel::test::scratch_path("tessel_pieces_" + tag).string();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data<float>(), b.data<float>(), size_t(a.numel()) * sizeof(float)) == 0;
}

Tensor global(uint64_t seed, const Shape& shape) {
  Generator g(seed);
  return randn(shape, DType::F32, &g);
}

// The local tensor a placement describes, cut from the global one (zeros outside the segments).
Tensor local_of(const Tensor& full, const sharding::LocalLayout& p, const Shape& local_shape) {
  Tensor out = zeros(local_shape, DType::F32);
  const Shape& g = full.shape();
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < p.dim; ++k) outer *= g[k];
  for (int k = p.dim + 1; k < g.ndim(); ++k) inner *= g[k];
  for (const auto& s : p.segments)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.data<float>() + (o * local_shape[p.dim] + s.local_start) * inner,
                  full.data<float>() + (o * g[p.dim] + s.global_start) * inner,
                  size_t(s.length * inner) * sizeof(float));
  return out;
}

// Columns of A [13, 7] in widths 2, 3, 2; rows {r, r + 3} along dim 1 of C [5, 6, 7]; B [33]
// whole on every rank (the writer takes a flat third).
sharding::LocalLayout a_placement(int rank) {
  const int64_t starts[] = {0, 2, 5}, widths[] = {2, 3, 2};
  sharding::LocalLayout p;
  p.global = Shape({13, 7});
  p.dim = 1;
  p.segments.push_back({0, starts[rank], widths[rank]});
  return p;
}

sharding::LocalLayout c_placement(int rank) {
  sharding::LocalLayout p;
  p.global = Shape({5, 6, 7});
  p.dim = 1;
  p.segments = {{0, rank, 1}, {1, rank + 3, 1}};
  return p;
}

void add(std::vector<Piece>& out, std::vector<Piece> more) {
  for (Piece& p : more) out.push_back(std::move(p));
}

// Every rank of a world of 3 writes its pieces of A, B and C; rank 0 indexes them.
void write_three_ranks(const std::string& dir, const Tensor& a, const Tensor& b, const Tensor& c,
                       bool skip_last_b = false) {
  test::run_thread_world(3, [&](dist::CommPtr world) {
    const int r = world->rank();
    std::vector<Piece> pieces;
    const Shape la({13, a_placement(r).segments[0].length});
    add(pieces, placed_pieces("A", a_placement(r), la, 0, la.numel(),
                              local_of(a, a_placement(r), la).flatten()));
    if (!(skip_last_b && r == 2))
      add(pieces, placed_pieces("B", sharding::LocalLayout::whole(b.shape()), b.shape(), 11 * r,
                                11 * r + 11, b.flatten().narrow(0, 11 * r, 11)));
    // C's local [5, 2, 7] in two flat halves cut at an odd element (through a row and through
    // the second segment's rows).
    const Shape lc({5, 2, 7});
    const Tensor local = local_of(c, c_placement(r), lc).flatten();
    add(pieces, placed_pieces("C", c_placement(r), lc, 0, 31, local.narrow(0, 0, 31)));
    add(pieces, placed_pieces("C", c_placement(r), lc, 31, 70, local.narrow(0, 31, 39)));
    write_piece_file(dir, r, 3, pieces);
    world->barrier();
    if (r == 0) write_piece_index(dir, 3, R"({"test":true})");
  });
}

TEST(CheckpointPieces, CopyOverlapMatchesElementwise) {
  std::mt19937 rng(5);
  const Shape shape({5, 3, 7});
  const Tensor full = global(1, shape);
  auto random_region = [&]() {
    PieceRegion r;
    for (int k = 0; k < 3; ++k) {
      const int64_t lo = int64_t(rng() % uint32_t(shape[k]));
      r.start.push_back(lo);
      r.length.push_back(1 + int64_t(rng() % uint32_t(shape[k] - lo)));
    }
    const int64_t n = r.box_numel();
    r.begin = int64_t(rng() % uint32_t(n));
    r.end = r.begin + 1 + int64_t(rng() % uint32_t(n - r.begin));
    return r;
  };
  // The region's values, and the global flat index of each, element by element.
  auto values = [&](const PieceRegion& r, std::vector<int64_t>* where) {
    Tensor t = empty({r.numel()}, DType::F32);
    for (int64_t e = r.begin; e < r.end; ++e) {
      const int64_t i2 = e % r.length[2], i1 = (e / r.length[2]) % r.length[1],
                    i0 = e / (r.length[2] * r.length[1]);
      const int64_t g = ((r.start[0] + i0) * 3 + r.start[1] + i1) * 7 + r.start[2] + i2;
      t.data<float>()[e - r.begin] = full.data<float>()[g];
      where->push_back(g);
    }
    return t;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const PieceRegion from = random_region(), to = random_region();
    std::vector<int64_t> gf, gt;
    const Tensor src = values(from, &gf);
    values(to, &gt);
    std::vector<float> dst(size_t(to.numel()), -1.0f);
    const int64_t n = copy_overlap(shape, from, src.data<float>(), to, dst.data());
    int64_t want = 0;
    for (size_t j = 0; j < gt.size(); ++j) {
      const bool shared = std::find(gf.begin(), gf.end(), gt[j]) != gf.end();
      want += shared;
      const float expect = shared ? full.data<float>()[gt[j]] : -1.0f;
      ASSERT_EQ(std::memcmp(&dst[j], &expect, sizeof(float)), 0)
          << "trial " << trial << " from " << from.str() << " to " << to.str() << " element " << j;
    }
    ASSERT_EQ(n, want) << "trial " << trial;
  }
}

TEST(CheckpointPieces, ThreeRanksReassembleBitwiseInAnyLayout) {
  const std::string dir = temp_dir("roundtrip");
  const Tensor a = global(2, Shape({13, 7})), b = global(3, Shape({33})),
               c = global(4, Shape({5, 6, 7}));
  write_three_ranks(dir, a, b, c);
  test::ThreadChecks checks;
  test::run_thread_world(3, [&](dist::CommPtr world) {
    PieceReader reader(dir);
    checks.expect(reader.names().size() == 3, "three tensors indexed");
    checks.expect(same_bits(reader.read_full("A"), a), "A whole");
    checks.expect(same_bits(reader.read_full("B"), b), "B whole");
    checks.expect(same_bits(reader.read_full("C"), c), "C whole");
    // Another layout: A split in 2 by rows (7 + 6), then this rank's flat third of that shard.
    const int r = world->rank();
    sharding::LocalLayout rows;
    rows.global = Shape({13, 7});
    rows.dim = 0;
    rows.segments.push_back({0, r % 2 == 0 ? 0 : 7, r % 2 == 0 ? 7 : 6});
    const Shape local({rows.segments[0].length, 7});
    const int64_t n = local.numel(), begin = n * r / 3, end = n * (r + 1) / 3;
    Tensor got = empty({end - begin}, DType::F32);
    read_placed(reader, "A", rows, local, begin, end, got);
    const Tensor want = local_of(a, rows, local).flatten().narrow(0, begin, end - begin);
    checks.expect(same_bits(got, want), "A as a row shard's flat range, rank " + std::to_string(r));
    // C read as rank r's per-block rows of a 3-way split gives back that rank's local tensor.
    const Shape lc({5, 2, 7});
    Tensor c_local = empty({lc.numel()}, DType::F32);
    read_placed(reader, "C", c_placement(r), lc, 0, lc.numel(), c_local);
    checks.expect(same_bits(c_local, local_of(c, c_placement(r), lc).flatten()), "C blocks");
  });
  checks.verify();
  fs::remove_all(dir);
}

TEST(CheckpointPieces, MissingFileOrPieceRefused) {
  const std::string dir = temp_dir("missing");
  const Tensor a = global(2, Shape({13, 7})), b = global(3, Shape({33})),
               c = global(4, Shape({5, 6, 7}));
  // Rank 2 wrote no piece of B: the index refuses to describe a checkpoint with a hole.
  try {
    write_three_ranks(dir, a, b, c, /*skip_last_b=*/true);
    FAIL() << "an index over incomplete pieces was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the pieces of B hold 22 elements"), std::string::npos)
        << e.what();
  }
  write_three_ranks(dir, a, b, c);
  fs::remove(fs::path(dir) / piece_file_name(1, 3));
  PieceReader reader(dir);
  // B's first third is in rank 0's file: readable alone; the whole needs rank 1's file.
  Tensor first = empty({11}, DType::F32);
  PieceRegion r = PieceRegion::whole(Shape({33}));
  r.end = 11;
  reader.read("B", r, first);
  EXPECT_TRUE(same_bits(first, b.flatten().narrow(0, 0, 11)));
  EXPECT_EQ(reader.files_opened(), 1);  // only the file holding the overlapping piece
  try {
    reader.read_full("B");
    FAIL() << "read a tensor whose piece file is missing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(piece_file_name(1, 3)), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(CheckpointPieces, CorruptedPieceFileFailsTheManifest) {
  const std::string run = temp_dir("corrupt");
  const Tensor a = global(2, Shape({13, 7})), b = global(3, Shape({33})),
               c = global(4, Shape({5, 6, 7}));
  std::string path;
  {
    CheckpointWriter writer(run, 7);
    write_three_ranks(writer.dir(), a, b, c);
    path = writer.commit(0);
  }
  verify_checkpoint(path);
  const fs::path victim = fs::path(path) / piece_file_name(2, 3);
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  try {
    verify_checkpoint(path);
    FAIL() << "a corrupted piece file verified";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(piece_file_name(2, 3)), std::string::npos) << e.what();
  }
  fs::remove_all(run);
}

}  // namespace
}  // namespace tessel::train
