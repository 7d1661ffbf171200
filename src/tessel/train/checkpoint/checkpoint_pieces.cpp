// SPDX-License-Identifier: Apache-2.0
// Writing, indexing and reading layout-independent checkpoint pieces (checkpoint_pieces.h). The
// piece files are safetensors whose metadata lists each entry's global tensor and region; the
// index is JSON so that a person (or another tool) can see which file holds what without tessel.
#include "tessel/train/checkpoint/checkpoint_pieces.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFileFormat = "tessel-pieces";
constexpr const char* kIndexFormat = "tessel-pieces-index";

std::vector<int64_t> dims_of(const Shape& s) {
  return std::vector<int64_t>(s.dims().begin(), s.dims().end());
}

nlohmann::json region_json(const PieceRegion& r) {
  return {{"start", r.start}, {"length", r.length}, {"begin", r.begin}, {"end", r.end}};
}

PieceRegion region_from(const nlohmann::json& j) {
  PieceRegion r;
  r.start = j.at("start").get<std::vector<int64_t>>();
  r.length = j.at("length").get<std::vector<int64_t>>();
  r.begin = j.at("begin").get<int64_t>();
  r.end = j.at("end").get<int64_t>();
  return r;
}

// An Error unless `r` is a region of a tensor of `shape`.
void check_region(const Shape& shape, const PieceRegion& r, const std::string& what) {
  bool ok = int(r.start.size()) == shape.ndim() && r.length.size() == r.start.size();
  for (size_t k = 0; ok && k < r.start.size(); ++k)
    ok = r.start[k] >= 0 && r.length[k] >= 0 && r.start[k] + r.length[k] <= shape[int(k)];
  ok = ok && r.begin >= 0 && r.begin <= r.end && r.end <= r.box_numel();
  TESSEL_CHECK(ok, what, ": region ", r.str(), " is not a region of a tensor of shape ", shape);
}

// The rows along dim 0 that a region's element range touches: [first, last).
std::pair<int64_t, int64_t> row_span(const PieceRegion& r) {
  const int64_t stride = std::max<int64_t>(1, r.box_numel() / std::max<int64_t>(1, r.length[0]));
  return {r.start[0] + r.begin / stride, r.start[0] + (r.end + stride - 1) / stride};
}

// False when the regions certainly share no element (their boxes, or the rows their element
// ranges touch, are disjoint): such a piece's file is not even opened.
bool regions_may_meet(const PieceRegion& a, const PieceRegion& b) {
  for (size_t k = 0; k < a.start.size(); ++k)
    if (std::max(a.start[k], b.start[k]) >=
        std::min(a.start[k] + a.length[k], b.start[k] + b.length[k]))
      return false;
  if (a.start.empty()) return true;
  const auto [a0, a1] = row_span(a);
  const auto [b0, b1] = row_span(b);
  return std::max(a0, b0) < std::min(a1, b1);
}

}  // namespace

int64_t PieceRegion::box_numel() const {
  int64_t n = 1;
  for (int64_t l : length) n *= l;
  return n;
}

PieceRegion PieceRegion::whole(const Shape& shape) {
  PieceRegion r;
  r.start.assign(size_t(shape.ndim()), 0);
  r.length.assign(shape.dims().begin(), shape.dims().end());
  r.end = shape.numel();
  return r;
}

std::string PieceRegion::str() const {
  std::string s = "[";
  for (size_t k = 0; k < start.size(); ++k)
    s += (k ? ", " : "") + std::to_string(start[k]) + ":" + std::to_string(start[k] + length[k]);
  return s + "] elements " + std::to_string(begin) + ".." + std::to_string(end);
}

std::string piece_file_name(int rank, int world) {
  char name[64];
  std::snprintf(name, sizeof name, "pieces_%05d_of_%05d.safetensors", rank, world);
  return name;
}

int64_t copy_overlap(const Shape& shape, const PieceRegion& from, const float* src,
                     const PieceRegion& to, float* dst) {
  const int n = shape.ndim();
  if (n == 0) {
    if (from.begin > 0 || from.end < 1 || to.begin > 0 || to.end < 1) return 0;
    dst[0] = src[0];
    return 1;
  }
  std::vector<int64_t> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
  for (size_t k = 0; k < size_t(n); ++k) {
    lo[k] = std::max(from.start[k], to.start[k]);
    hi[k] = std::min(from.start[k] + from.length[k], to.start[k] + to.length[k]);
    if (hi[k] <= lo[k]) return 0;
  }
  // The rows along dim 0 that each element range can touch (a ZeRO range covers a few rows of a
  // large tensor): the loop below then visits only those.
  for (const PieceRegion* r : {&from, &to}) {
    const int64_t stride = r->box_numel() / r->length[0];
    lo[0] = std::max(lo[0], r->start[0] + r->begin / stride);
    hi[0] = std::min(hi[0], r->start[0] + (r->end + stride - 1) / stride);
  }
  if (hi[0] <= lo[0]) return 0;
  const size_t last = size_t(n - 1);
  const int64_t run = hi[last] - lo[last];
  std::vector<int64_t> idx = lo;  // the current row's first element
  auto flat = [&](const PieceRegion& r) {
    int64_t f = 0;
    for (size_t k = 0; k < size_t(n); ++k) f = f * r.length[k] + (idx[k] - r.start[k]);
    return f;
  };
  int64_t copied = 0;
  for (;;) {
    const int64_t pf = flat(from), tf = flat(to);
    const int64_t j0 = std::max({int64_t(0), from.begin - pf, to.begin - tf});
    const int64_t j1 = std::min({run, from.end - pf, to.end - tf});
    if (j1 > j0) {
      std::memcpy(dst + (tf + j0 - to.begin), src + (pf + j0 - from.begin),
                  size_t(j1 - j0) * sizeof(float));
      copied += j1 - j0;
    }
    int k = int(last) - 1;
    for (; k >= 0; --k) {
      if (++idx[size_t(k)] < hi[size_t(k)]) break;
      idx[size_t(k)] = lo[size_t(k)];
    }
    if (k < 0) break;
  }
  return copied;
}

int64_t Piece::values() const {
  if (runs.empty()) return data.defined() ? data.numel() : 0;
  int64_t n = 0;
  for (const auto& [first, count] : runs) n += count;
  return n;
}

namespace {

// Passes elements [first, first + count) of `t` to `sink` as f32: from t's memory when it holds
// f32, else converted through `staging` (at most kCheckpointStagingBytes).
void emit_f32(const Tensor& t, int64_t first, int64_t count, const io::ByteSink& sink,
              std::vector<float>& staging) {
  const auto* base = static_cast<const uint8_t*>(t.data_ptr()) + size_t(first) * t.element_size();
  if (t.dtype() == DType::F32) {
    if (count > 0) sink(base, size_t(count) * sizeof(float));
    return;
  }
  const int64_t chunk = int64_t(kCheckpointStagingBytes / sizeof(float));
  for (int64_t at = 0; at < count; at += chunk) {
    const int64_t n = std::min(chunk, count - at);
    staging.resize(size_t(std::max<int64_t>(n, int64_t(staging.size()))));
    convert_elements(base + size_t(at) * t.element_size(), t.dtype(), staging.data(), DType::F32,
                     size_t(n));
    sink(staging.data(), size_t(n) * sizeof(float));
  }
}

}  // namespace

void write_piece_file(const std::string& dir, int rank, int world, const std::vector<Piece>& pieces,
                      const BeforePiece& before) {
  std::vector<io::StreamedTensor> tensors;
  nlohmann::json entries = nlohmann::json::array();
  auto staging = std::make_shared<std::vector<float>>();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    check_region(p.shape, p.region, "checkpoint piece of " + p.name);
    TESSEL_CHECK(
        p.data.defined() && dtype_is_float(p.data.dtype()) && p.values() == p.region.numel(),
        "checkpoint piece of ", p.name, " ", p.region.str(), ": ", p.values(), " values for ",
        p.region.numel(), " elements");
    for (const auto& [first, count] : p.runs)
      TESSEL_CHECK(first >= 0 && count >= 0 && first + count <= p.data.numel(),
                   "checkpoint piece of ", p.name, ": run [", first, ", ", first + count,
                   ") outside its tensor of ", p.data.numel(), " elements");
    const std::string key = p.name + "#" + std::to_string(i);
    // Written from where the values live when the file reaches them: no copy of the state.
    tensors.push_back(
        {key, DType::F32, Shape{p.region.numel()}, [&p, &before, i, staging](const auto& sink) {
           if (before) before(i);
           if (p.runs.empty()) emit_f32(p.data, 0, p.data.numel(), sink, *staging);
           for (const auto& [first, count] : p.runs) emit_f32(p.data, first, count, sink, *staging);
         }});
    nlohmann::json e = region_json(p.region);
    e["key"] = key;
    e["tensor"] = p.name;
    e["shape"] = dims_of(p.shape);
    entries.push_back(std::move(e));
  }
  io::write_safetensors_streamed((fs::path(dir) / piece_file_name(rank, world)).string(), tensors,
                                 {{"format", kFileFormat},
                                  {"rank", std::to_string(rank)},
                                  {"world", std::to_string(world)},
                                  {"pieces", entries.dump()}});
}

void write_piece_index(const std::string& dir, int world, const std::string& layout_json) {
  nlohmann::json files = nlohmann::json::array(), pieces = nlohmann::json::array();
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::pair<Shape, int64_t>> seen;  // shape, elements stored
  for (int r = 0; r < world; ++r) {
    const std::string name = piece_file_name(r, world);
    // Only the header is needed: read, not mapped (a mapping takes the file's address space).
    const io::SafetensorsFile file =
        io::SafetensorsFile::open((fs::path(dir) / name).string(), io::SafetensorsLoad::Read);
    const auto& meta = file.metadata();
    TESSEL_CHECK(meta.count("format") && meta.at("format") == kFileFormat && meta.count("pieces"),
                 "checkpoint piece file ", file.path(), " is not a ", kFileFormat, " file");
    const nlohmann::json entries = nlohmann::json::parse(meta.at("pieces"), nullptr, false);
    TESSEL_CHECK(entries.is_array(), "checkpoint piece file ", file.path(),
                 ": its piece list is malformed");
    for (const auto& e : entries) {
      const std::string tensor = e.at("tensor").get<std::string>();
      const std::string key = e.at("key").get<std::string>();
      const Shape shape(e.at("shape").get<std::vector<int64_t>>());
      const PieceRegion region = region_from(e);
      check_region(shape, region, file.path() + ": piece " + key);
      TESSEL_CHECK(file.contains(key) && file.entry(key).shape.numel() == region.numel(),
                   file.path(), ": piece ", key, " has no entry of ", region.numel(), " values");
      auto [it, fresh] = seen.try_emplace(tensor, shape, 0);
      TESSEL_CHECK(it->second.first == shape, file.path(), ": ", tensor, " has shape ", shape,
                   ", another file says ", it->second.first);
      if (fresh) tensors.push_back({{"name", tensor}, {"shape", dims_of(shape)}});
      it->second.second += region.numel();
      nlohmann::json p = region_json(region);
      p["tensor"] = tensor;
      p["file"] = r;
      p["key"] = key;
      pieces.push_back(std::move(p));
    }
    files.push_back(name);
  }
  for (const auto& [tensor, s] : seen)
    TESSEL_CHECK(s.second == s.first.numel(), "checkpoint ", dir, ": the pieces of ", tensor,
                 " hold ", s.second, " elements, the tensor has ", s.first.numel(),
                 " (a rank wrote too few or too many)");
  nlohmann::json layout = nlohmann::json::parse(layout_json, nullptr, false);
  if (layout.is_discarded()) layout = nullptr;
  const nlohmann::ordered_json index{
      {"format", kIndexFormat}, {"version", 1},       {"world", world},  {"layout", layout},
      {"files", files},         {"tensors", tensors}, {"pieces", pieces}};
  const std::string text = index.dump(1) + "\n";
  io::write_file_atomic((fs::path(dir) / kPieceIndexFile).string(), text.data(), text.size());
}

bool has_piece_index(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / kPieceIndexFile);
}

PieceReader::PieceReader(const std::string& dir) : dir_(dir) {
  const fs::path path = fs::path(dir) / kPieceIndexFile;
  std::ifstream in(path);
  TESSEL_CHECK(in.good(), "checkpoint ", dir, ": cannot read ", kPieceIndexFile);
  const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
  TESSEL_CHECK(!index.is_discarded() && index.is_object() &&
                   index.value("format", "") == kIndexFormat && index.value("version", 0) == 1,
               "checkpoint ", dir, ": ", kPieceIndexFile, " is not a ", kIndexFormat,
               " version 1 file");
  try {
    layout_ = index.at("layout").dump();
    files_ = index.at("files").get<std::vector<std::string>>();
    for (const std::string& f : files_)
      TESSEL_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "..", "bad file name '",
                   f, "'");
    for (const auto& t : index.at("tensors")) {
      const std::string name = t.at("name").get<std::string>();
      TESSEL_CHECK(tensors_.emplace(name, Shape(t.at("shape").get<std::vector<int64_t>>())).second,
                   "tensor ", name, " is listed twice");
      order_.push_back(name);
    }
    for (const auto& p : index.at("pieces")) {
      Entry e;
      const std::string tensor = p.at("tensor").get<std::string>();
      e.file = p.at("file").get<size_t>();
      e.key = p.at("key").get<std::string>();
      e.region = region_from(p);
      TESSEL_CHECK(tensors_.count(tensor) && e.file < files_.size(), "piece ", e.key,
                   " names an unlisted tensor or file");
      check_region(tensors_.at(tensor), e.region, "piece " + e.key);
      pieces_[tensor].push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("checkpoint ", dir, ": ", kPieceIndexFile, " is malformed: ", e.what());
  } catch (const Error& e) {
    TESSEL_FAIL("checkpoint ", dir, ": ", kPieceIndexFile, ": ", e.what());
  }
}

const Shape& PieceReader::shape(const std::string& name) const {
  auto it = tensors_.find(name);
  TESSEL_CHECK(it != tensors_.end(), "checkpoint ", dir_, " holds no tensor ", name);
  return it->second;
}

PieceReader::OpenFile& PieceReader::file(size_t index) {
  auto it = open_.find(index);
  if (it == open_.end()) {
    const std::string path = (fs::path(dir_) / files_[index]).string();
    it = open_
             .emplace(index, OpenFile{io::SafetensorsFile::open(path, io::SafetensorsLoad::Read),
                                      io::FileReader(path)})
             .first;
  }
  return it->second;
}

namespace {

// Row 0's start and the elements per row of a region's box (a scalar: 0 and 1).
std::pair<int64_t, int64_t> row_origin(const PieceRegion& r) {
  if (r.start.empty()) return {0, 1};
  return {r.start[0], r.length[0] > 0 ? r.box_numel() / r.length[0] : 0};
}

// Whether the boxes agree in every dimension after the first: then an element's index in either
// is its global row-major index less a constant, and the overlap is one range in both.
bool rows_alike(const PieceRegion& a, const PieceRegion& b) {
  for (size_t k = 1; k < a.start.size(); ++k)
    if (a.start[k] != b.start[k] || a.length[k] != b.length[k]) return false;
  return true;
}

}  // namespace

void PieceReader::read(const std::string& name, const PieceRegion& region, Tensor dst) {
  TESSEL_CHECK(dst.dtype() == DType::F32 && dst.numel() == region.numel(), "checkpoint read of ",
               name, " ", region.str(), " into a ", dtype_name(dst.dtype()), " tensor of ",
               dst.numel(), " elements");
  read(name, region, dst.numel() > 0 ? dst.data<float>() : nullptr);
}

void PieceReader::read(const std::string& name, const PieceRegion& region, float* dst) {
  const Shape& s = shape(name);
  check_region(s, region, "checkpoint " + dir_ + ": reading " + name);
  int64_t copied = 0;
  for (const Entry& e : pieces_[name]) {
    if (!regions_may_meet(e.region, region)) continue;
    OpenFile& f = file(e.file);
    const io::SafetensorsEntry& stored = f.header.entry(e.key);
    TESSEL_CHECK(stored.dtype == "F32" && stored.shape.numel() == e.region.numel(), f.header.path(),
                 ": piece ", e.key, " holds ", stored.shape.numel(), " ", stored.dtype,
                 " values, the index says ", e.region.numel(), " F32");
    const uint64_t base = f.header.file_offset(e.key);
    const auto [p_row, stride] = row_origin(e.region);
    const int64_t p_first = p_row * stride + e.region.begin;  // global index of its first value
    if (rows_alike(e.region, region)) {
      const int64_t t_first =
          region.start.empty() ? region.begin : region.start[0] * stride + region.begin;
      const int64_t lo = std::max(p_first, t_first);
      const int64_t hi = std::min(p_first + e.region.numel(), t_first + region.numel());
      if (hi > lo) {
        f.data.read_at(base + uint64_t(lo - p_first) * sizeof(float), dst + (lo - t_first),
                       size_t(hi - lo) * sizeof(float));
        copied += hi - lo;
      }
      continue;
    }
    // Cut differently (a column shard from whole rows, a block of columns): the piece's values in
    // the rows the region touches, a buffer at a time.
    const auto [a0, a1] = row_span(e.region);
    const auto [b0, b1] = row_span(region);
    const int64_t first = std::max(e.region.begin, (std::max(a0, b0) - p_row) * stride);
    const int64_t last = std::min(e.region.end, (std::min(a1, b1) - p_row) * stride);
    const int64_t chunk = int64_t(kCheckpointStagingBytes / sizeof(float));
    for (int64_t at = first; at < last; at += chunk) {
      const int64_t n = std::min(chunk, last - at);
      if (int64_t(staging_.size()) < n) staging_.resize(size_t(n));
      f.data.read_at(base + uint64_t(at - e.region.begin) * sizeof(float), staging_.data(),
                     size_t(n) * sizeof(float));
      PieceRegion part = e.region;
      part.begin = at;
      part.end = at + n;
      copied += copy_overlap(s, part, staging_.data(), region, dst);
    }
  }
  TESSEL_CHECK(copied == region.numel(), "checkpoint ", dir_, ": the pieces of ", name, " cover ",
               copied, " of the ", region.numel(), " elements of ", region.str(),
               copied < region.numel() ? " (a piece is missing)" : " (pieces overlap)");
}

Tensor PieceReader::read_full(const std::string& name) {
  const Shape& s = shape(name);
  Tensor out = empty(s, DType::F32);
  read(name, PieceRegion::whole(s), out);
  return out;
}

}  // namespace tessel::train
