// SPDX-License-Identifier: Apache-2.0
// Regions of tensors read from whole tensors in safetensors files (safetensors_regions.h).
#include "tessel/train/checkpoint/safetensors_regions.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::train {

namespace {

// Elements [first, first + n) of float tensor `name` of `file` as f32 (f16, bf16 and f64 widened
// through a buffer of at most 256 KiB): pread of exactly their bytes.
void read_f32(const io::SafetensorsFile& file, const io::FileReader& reader,
              const std::string& name, int64_t first, int64_t n, float* dst) {
  const io::SafetensorsEntry& e = file.entry(name);
  const std::optional<DType> stored = io::dtype_from_safetensors(e.dtype);
  TESSEL_CHECK(stored.has_value() && dtype_is_float(*stored), file.path(), ": tensor '", name,
               "' has dtype ", e.dtype, "; only float tensors load into parameters");
  TESSEL_CHECK(first >= 0 && n >= 0 && first + n <= e.shape.numel(), file.path(), ": elements [",
               first, ", ", first + n, ") of tensor '", name, "', which has ", e.shape.numel());
  if (n == 0) return;
  const uint64_t size = dtype_size(*stored), at = file.file_offset(name) + uint64_t(first) * size;
  if (*stored == DType::F32) {
    reader.read_at(at, dst, size_t(n) * size);
    return;
  }
  constexpr int64_t kChunk = int64_t(1) << 15;
  std::vector<uint64_t> staged((size_t(std::min(n, kChunk)) * size + 7) / 8);  // aligned
  for (int64_t k = 0; k < n; k += kChunk) {
    const int64_t m = std::min(kChunk, n - k);
    reader.read_at(at + uint64_t(k) * size, staged.data(), size_t(m) * size);
    convert_elements(staged.data(), *stored, dst + k, DType::F32, size_t(m));
  }
}

struct Reader {
  std::shared_ptr<const io::SafetensorsCheckpoint> checkpoint;
  std::vector<io::FileReader> files;  // one per checkpoint file, in its order
  std::map<std::string, size_t> file_of;
  models::HfLayout layout;
  std::map<std::string, std::vector<std::string>> copies;  // tessel name -> tied stored tensors

  void read_stored(const std::string& stored, int64_t first, int64_t n, float* out) const {
    auto it = file_of.find(stored);
    TESSEL_CHECK(it != file_of.end(), "checkpoint has no tensor named '", stored, "'");
    read_f32(checkpoint->files()[it->second], files[it->second], stored, first, n, out);
  }

  // Stored elements [first, first + n) of `stored` into `out`, and the same elements of every
  // tensor tied to it, which must be equal.
  void read_run(const std::string& name, const std::string& stored, int64_t first, int64_t n,
                float* out) const {
    read_stored(stored, first, n, out);
    auto it = copies.find(name);
    if (it == copies.end()) return;
    std::vector<float> copy(static_cast<size_t>(n));
    for (const std::string& tied : it->second) {
      read_stored(tied, first, n, copy.data());
      TESSEL_CHECK(std::memcmp(copy.data(), out, size_t(n) * sizeof(float)) == 0,
                   "checkpoint: ", tied, " differs from ", stored, " (elements ", first, "..",
                   first + n, "), but the model ties them (tie_word_embeddings is true)");
    }
  }

  // tessel's [E, ...] from E stored tensors of shape [...]: a run of the region is split where
  // it crosses from one stored tensor into the next.
  void read_stacked(const std::string& name, const std::vector<std::string>& parts,
                    const PieceRegion& region, float* dst) const {
    const Shape part = checkpoint->entry(parts[0]).shape;
    for (const std::string& p : parts) {
      TESSEL_CHECK(checkpoint->entry(p).shape == part, "checkpoint: ", p, " has shape ",
                   checkpoint->entry(p).shape, ", but '", name, "' stacks tensors of shape ", part);
    }
    std::vector<int64_t> dims = {int64_t(parts.size())};
    for (int64_t d = 0; d < part.ndim(); ++d) dims.push_back(part[d]);
    const Shape shape(dims);
    check_region(name, shape, region);
    if (region.numel() == 0) return;
    const int64_t inner = part.numel();
    for_each_run(shape, region, [&](int64_t global, int64_t n, int64_t at) {
      while (n > 0) {
        const int64_t e = global / inner, offset = global % inner;
        const int64_t k = std::min(n, inner - offset);
        read_stored(parts[size_t(e)], offset, k, dst + at);
        global += k;
        at += k;
        n -= k;
      }
    });
  }

  void read(const std::string& name, const PieceRegion& region, float* dst) const {
    auto it = layout.tensors.find(name);
    TESSEL_CHECK(it != layout.tensors.end(), "checkpoint: no stored tensor for '", name, "'");
    const models::HfStored& stored = it->second;
    if (!stored.stacked.empty()) {
      read_stacked(name, stored.stacked, region, dst);
      return;
    }
    Shape shape = checkpoint->entry(stored.name).shape;
    TESSEL_CHECK(!stored.transposed || shape.ndim() == 2, "checkpoint: ", stored.name, " of shape ",
                 shape, " is stored transposed, which needs two dimensions");
    if (stored.transposed) shape = Shape{shape[1], shape[0]};
    check_region(name, shape, region);
    if (region.numel() == 0) return;
    if (!stored.transposed) {
      for_each_run(shape, region, [&](int64_t global, int64_t n, int64_t at) {
        read_run(name, stored.name, global, n, dst + at);
      });
      return;
    }
    // tessel's [R, C] is stored as [C, R]: the region's column j is a stretch of stored row
    // start[1] + j. Box element k is (k / cols, k % cols); column j holds the rows i with
    // begin <= i * cols + j < end.
    const int64_t rows = shape[0], cols = region.length[1];
    std::vector<float> run;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t lo = std::max<int64_t>(0, (region.begin - j + cols - 1) / cols);
      const int64_t hi = (region.end - j + cols - 1) / cols;
      if (hi <= lo) continue;
      run.resize(size_t(hi - lo));
      read_run(name, stored.name, (region.start[1] + j) * rows + region.start[0] + lo, hi - lo,
               run.data());
      for (int64_t i = lo; i < hi; ++i) dst[i * cols + j - region.begin] = run[size_t(i - lo)];
    }
  }
};

}  // namespace

RegionSource safetensors_region_source(std::shared_ptr<const io::SafetensorsCheckpoint> checkpoint,
                                       models::HfLayout layout) {
  auto reader = std::make_shared<Reader>();
  for (const auto& [stored, name] : layout.equal) {
    TESSEL_CHECK(layout.tensors.count(name), "checkpoint: ", stored, " is tied to '", name,
                 "', which the layout does not name");
    reader->copies[name].push_back(stored);
  }
  for (size_t i = 0; i < checkpoint->files().size(); ++i) {
    const io::SafetensorsFile& f = checkpoint->files()[i];
    reader->files.emplace_back(f.path());
    for (const std::string& name : f.names()) reader->file_of.emplace(name, i);
  }
  reader->checkpoint = std::move(checkpoint);
  reader->layout = std::move(layout);
  return [reader](const std::string& name, const PieceRegion& region, float* dst) {
    reader->read(name, region, dst);
  };
}

models::HfLayout same_name_layout(const io::SafetensorsCheckpoint& checkpoint) {
  models::HfLayout layout;
  for (const std::string& name : checkpoint.names())
    layout.tensors.emplace(name, models::HfStored{name, false});
  return layout;
}

}  // namespace tessel::train
