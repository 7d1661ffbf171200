// SPDX-License-Identifier: Apache-2.0
// Layout-independent checkpoint pieces. Every rank writes the parts of the global tensors it owns
// (parameters and AdamW moments, whatever its dp/tp/pp/ZeRO placement) into one file of its own;
// each part is stored with the global tensor's name and shape and the region of it that it holds.
// Rank 0 then writes an index of every piece and the file holding it. A rank of any other layout
// reads back only the pieces overlapping the regions it needs, and never a whole tensor it does
// not hold (the idea of torch.distributed.checkpoint's per-shard metadata and resharding load).
//
// Memory: saving writes each piece from the tensor it lives in and reading fills the destination
// with pread, so neither holds a copy of the state; where values must pass through a buffer (a
// dtype conversion, a piece cut differently from the region read) it is at most
// kCheckpointStagingBytes.
//
// A region is a box (start and length per dimension) and an element range [begin, end) of that
// box in row-major order: a tensor-parallel shard is a whole box (begin = 0, end = its element
// count), a ZeRO flat shard is a range of a box (the whole tensor, or the tp shard it is cut from).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessel/io/safetensors.h"
#include "tessel/tensor/tensor.h"

namespace tessel::train {

inline constexpr const char* kPieceIndexFile = "pieces_index.json";
// The most bytes a piece writer or reader buffers at once (docs/TRAINING.md, Checkpoints).
inline constexpr size_t kCheckpointStagingBytes = size_t(16) << 20;

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
  // The region's values in row-major order (any float dtype; stored as f32): data's elements, or,
  // when `runs` is given, the concatenation of data's flat elements [first, first + count) of
  // each run, so that a piece can be a view of the local tensor it is cut from.
  Tensor data;
  std::vector<std::pair<int64_t, int64_t>> runs;

  int64_t values() const;  // how many values data (and runs) hold
};

// "pieces_00001_of_00004.safetensors"
std::string piece_file_name(int rank, int world);

// Called with a piece's index just before its values are written, in the pieces' order: lets
// the caller bring the bytes a piece views into memory only when the file reaches them (the
// chunks of an offloaded run).
using BeforePiece = std::function<void(size_t piece)>;

// Writes this rank's pieces into dir/piece_file_name(rank, world), their regions in the file's
// metadata. A rank without pieces writes an empty file (the index expects one per rank).
void write_piece_file(const std::string& dir, int rank, int world, const std::vector<Piece>& pieces,
                      const BeforePiece& before = {});

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
  // Reads with pread straight into `dst` where the piece and the region are laid out alike (the
  // same layout, whole tensors, row ranges), else through a buffer of kCheckpointStagingBytes.
  void read(const std::string& name, const PieceRegion& region, Tensor dst);
  void read(const std::string& name, const PieceRegion& region, float* dst);
  Tensor read_full(const std::string& name);  // the whole tensor in its shape

  int64_t files_opened() const { return int64_t(open_.size()); }

 private:
  struct Entry {
    size_t file = 0;
    std::string key;
    PieceRegion region;
  };
  struct OpenFile {
    io::SafetensorsFile header;  // read with pread (SafetensorsLoad::Read): nothing mapped
    io::FileReader data;
  };
  OpenFile& file(size_t index);

  std::string dir_, layout_;
  std::vector<std::string> files_;
  std::vector<std::string> order_;
  std::map<std::string, Shape> tensors_;
  std::map<std::string, std::vector<Entry>> pieces_;
  std::map<size_t, OpenFile> open_;
  std::vector<float> staging_;
};

// Copies the elements shared by `src` (values of region `from`) and `dst` (values of region `to`,
// both regions of a tensor of `shape`) from src into dst; returns how many. Exposed for tests.
int64_t copy_overlap(const Shape& shape, const PieceRegion& from, const float* src,
                     const PieceRegion& to, float* dst);

}  // namespace tessel::train
