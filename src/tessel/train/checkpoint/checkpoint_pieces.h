// SPDX-License-Identifier: Apache-2.0
// Layout-independent checkpoint pieces. Every rank writes the parts of the global tensors it owns
// (parameters and AdamW moments, whatever its dp/tp/pp/ZeRO placement) into one file of its own;
// each part is stored with the global tensor's name and shape and the region of it that it holds.
// Rank 0 then writes an index of every piece and the file holding it. A rank of any other layout
// reads back only the pieces overlapping the regions it needs, and never a whole tensor it does
// not hold (the idea of torch.distributed.checkpoint's per-shard metadata and resharding load).
//
// A region is a box (start and length per dimension) and an element range [begin, end) of that
// box in row-major order: a tensor-parallel shard is a whole box (begin = 0, end = its element
// count), a ZeRO flat shard is a range of a box (the whole tensor, or the tp shard it is cut from).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/io/safetensors.h"
#include "tessel/tensor/tensor.h"

namespace tessel::train {

inline constexpr const char* kPieceIndexFile = "pieces_index.json";

struct PieceRegion {
  std::vector<int64_t> start, length;  // the box, one entry per dimension (none for a scalar)
  int64_t begin = 0, end = 0;          // its elements [begin, end), row-major

  int64_t box_numel() const;
  int64_t numel() const { return end - begin; }
  static PieceRegion whole(const Shape& shape);
  std::string str() const;  // "[0:4, 6:12] elements 0..36"
};

struct Piece {
  std::string name;  // of the global tensor: "h.0.attn.c_attn.weight", "exp_avg.wte.weight"
  Shape shape;       // of the global tensor
  PieceRegion region;
  Tensor data;  // region.numel() elements, read in row-major order (stored as f32)
};

// "pieces_00001_of_00004.safetensors"
std::string piece_file_name(int rank, int world);

// Writes this rank's pieces into dir/piece_file_name(rank, world), their regions in the file's
// metadata. A rank without pieces writes an empty file (the index expects one per rank).
void write_piece_file(const std::string& dir, int rank, int world,
                      const std::vector<Piece>& pieces);

// Rank 0, once every rank's file is on disk: reads the files' headers and writes the index
// (kPieceIndexFile). `layout_json` (a JSON object, e.g. {"dp":2,"tp":1,"pp":1,"zero_stage":3})
// records the writer's layout for people. An Error when a file is missing or unreadable, when
// two files disagree on a tensor's shape, or when a tensor's pieces do not add up to its size.
void write_piece_index(const std::string& dir, int world, const std::string& layout_json);

bool has_piece_index(const std::string& dir);

class PieceReader {
 public:
  // Reads the index only; files are opened (mapped) when a read first needs one of their pieces.
  explicit PieceReader(const std::string& dir);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const Shape& shape(const std::string& name) const;
  const std::vector<std::string>& names() const { return order_; }  // as the index lists them
  const std::string& layout_json() const { return layout_; }

  // Fills `dst` (f32, region.numel() elements) with `region` of tensor `name` from the pieces
  // overlapping it. An Error when part of the region is in no piece (a piece file is missing or
  // lacks an entry) or covered twice, or a file disagrees with the index.
  void read(const std::string& name, const PieceRegion& region, Tensor dst);
  Tensor read_full(const std::string& name);  // the whole tensor in its shape

  int64_t files_opened() const { return int64_t(open_.size()); }

 private:
  struct Entry {
    size_t file = 0;
    std::string key;
    PieceRegion region;
  };
  const io::SafetensorsFile& file(size_t index);

  std::string dir_, layout_;
  std::vector<std::string> files_;
  std::vector<std::string> order_;
  std::map<std::string, Shape> tensors_;
  std::map<std::string, std::vector<Entry>> pieces_;
  std::map<size_t, io::SafetensorsFile> open_;
};

// Copies the elements shared by `src` (values of region `from`) and `dst` (values of region `to`,
// both regions of a tensor of `shape`) from src into dst; returns how many. Exposed for tests.
int64_t copy_overlap(const Shape& shape, const PieceRegion& from, const float* src,
                     const PieceRegion& to, float* dst);

}  // namespace tessel::train
