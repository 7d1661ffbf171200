// SPDX-License-Identifier: Apache-2.0
// Streamed safetensors writing (checkpoints write each tensor from where it lives): a file whose
// tensors are produced in odd-sized chunks is byte-for-byte the serialized image of the same
// tensors; a producer that passes too few or too many bytes is an Error and leaves no file; the
// Read load mode gives the same values as the mapped one, copied out (never a view of the file),
// maps nothing of the file, loads into existing tensors in place and refuses truncated files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/scratch_dir.h"
#include "tessel/io/safetensors.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& tag) {
  return tessel::test::scratch_path("tessel_st_stream_" + tag);
}

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

Tensor ramp(const Shape& shape, DType dtype, double scale) {
  Tensor t = empty(shape, DType::F64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = scale * double(i % 97) - 3.5;
  return t.to(dtype);
}

// Produces t's bytes in chunks of `chunk` bytes (7 and 13: never aligned to an element).
StreamedTensor chunked(const std::string& name, const Tensor& t, size_t chunk) {
  return {name, t.dtype(), t.shape(), [t, chunk](const ByteSink& sink) {
            const auto* p = static_cast<const uint8_t*>(t.data_ptr());
            for (size_t at = 0; at < t.nbytes(); at += chunk)
              sink(p + at, std::min(chunk, t.nbytes() - at));
          }};
}

TEST(SafetensorsStream, ChunkedProducersWriteTheSerializedImage) {
  const fs::path dir = scratch("image");
  const NamedTensors tensors = {{"b", ramp({13, 7}, DType::F32, 0.25)},
                                {"a", ramp({33}, DType::BF16, 0.5)},
                                {"c", ramp({7, 13, 2}, DType::F64, 1.0)},
                                {"empty", ramp({0, 3}, DType::F32, 1.0)}};
  std::vector<StreamedTensor> streamed;
  for (size_t i = 0; i < tensors.size(); ++i)
    streamed.push_back(chunked(tensors[i].first, tensors[i].second, i % 2 ? 13 : 7));
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  write_safetensors_streamed((dir / "s.safetensors").string(), streamed, meta);
  EXPECT_EQ(slurp(dir / "s.safetensors"), serialize_safetensors(tensors, meta));
  save_safetensors((dir / "v.safetensors").string(), tensors, meta);
  EXPECT_EQ(slurp(dir / "v.safetensors"), serialize_safetensors(tensors, meta));
}

TEST(SafetensorsStream, WrongByteCountIsAnErrorAndLeavesNoFile) {
  const fs::path dir = scratch("count");
  const Tensor t = ramp({13}, DType::F32, 1.0);
  for (const int64_t delta : {-1, 1}) {
    StreamedTensor bad{"t", DType::F32, Shape{13}, [t, delta](const ByteSink& sink) {
                         std::vector<uint8_t> bytes(size_t(int64_t(t.nbytes()) + delta));
                         sink(bytes.data(), bytes.size());
                       }};
    try {
      write_safetensors_streamed((dir / "bad.safetensors").string(), {bad});
      ADD_FAILURE() << "no error for a producer " << delta << " byte off";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 't'"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_empty(dir)) << "a temporary or partial file was left";
  }
}

TEST(SafetensorsStream, ReadModeCopiesOutTheSameValues) {
  const fs::path dir = scratch("read");
  const NamedTensors tensors = {{"w", ramp({7, 13}, DType::F32, 0.125)},
                                {"h", ramp({33}, DType::BF16, 0.5)}};
  save_safetensors((dir / "m.safetensors").string(), tensors);
  const SafetensorsFile mapped = SafetensorsFile::open((dir / "m.safetensors").string());
  const SafetensorsFile read =
      SafetensorsFile::open((dir / "m.safetensors").string(), SafetensorsLoad::Read);
  for (const auto& [name, t] : tensors) {
    for (const DType want : {t.dtype(), DType::F64}) {
      const Tensor a = mapped.load(name, want), b = read.load(name, want);
      ASSERT_EQ(a.shape(), b.shape());
      ASSERT_EQ(b.dtype(), want);
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << name;
      EXPECT_FALSE(read.is_zero_copy(b)) << name;
    }
  }
  EXPECT_TRUE(mapped.is_zero_copy(mapped.load("w")));
}

// Whether this process has `path` mapped (a line of /proc/self/maps names it).
bool is_mapped(const fs::path& path) {
  std::ifstream maps("/proc/self/maps");
  const std::string name = fs::canonical(path).string();
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= name.size() &&
        line.compare(line.size() - name.size(), name.size(), name) == 0)
      return true;
  return false;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsStream, ReadModeMapsNothingAndLoadsInto) {
  const fs::path dir = scratch("into");
  const fs::path file = dir / "m.safetensors";
  // "big" has more BF16 values than one 1 MiB staging buffer holds, so a converting load_into
  // takes several stretches.
  const NamedTensors tensors = {{"w", ramp({7, 13}, DType::F32, 0.125)},
                                {"h", ramp({33}, DType::BF16, 0.5)},
                                {"big", ramp({1'000'003}, DType::BF16, 0.25)},
                                {"i", ramp({13}, DType::I32, 1.0)}};
  save_safetensors(file.string(), tensors);
  {
    const SafetensorsFile read = SafetensorsFile::open(file.string(), SafetensorsLoad::Read);
    EXPECT_FALSE(read.is_mapped());
    EXPECT_FALSE(is_mapped(file)) << "Read mode mapped " << file;
    const SafetensorsFile mapped = SafetensorsFile::open(file.string());
    EXPECT_TRUE(mapped.is_mapped());
    EXPECT_TRUE(is_mapped(file)) << "the check cannot see a mapping";
    for (const auto& [name, t] : tensors) {
      // Into tensors that already exist, as stored and widened: the same bytes as the mapped
      // load, written where the tensor's memory is.
      const std::vector<DType> wants = dtype_is_float(t.dtype())
                                           ? std::vector<DType>{t.dtype(), DType::F64}
                                           : std::vector<DType>{t.dtype(), DType::I64};
      for (const DType want : wants) {
        for (const SafetensorsFile* f : {&read, &mapped}) {
          const Tensor dst = zeros(t.shape(), want);
          const void* before = dst.data_ptr();
          f->load_into(name, dst);
          const Tensor ref = mapped.load(name, want);
          EXPECT_EQ(dst.data_ptr(), before);
          EXPECT_EQ(std::memcmp(dst.data_ptr(), ref.data_ptr(), ref.nbytes()), 0)
              << name << " as " << dtype_name(want) << (f == &read ? " (read)" : " (mapped)");
        }
      }
    }
    // A stretch of a tensor: elements [first, first + numel) of the whole.
    const Tensor whole = mapped.load("big", DType::F32);
    for (const int64_t first : {int64_t(0), int64_t(7), int64_t(524'281), int64_t(999'970)}) {
      const Tensor part = zeros({33}, DType::F32);
      read.load_into("big", part, first);
      EXPECT_EQ(std::memcmp(part.data_ptr(), whole.data<float>() + first, part.nbytes()), 0)
          << "first " << first;
    }
    EXPECT_NE(error_of([&] {
                read.load_into("big", zeros({33}), 999'971);
              }).find("elements [999971, 1000004) of tensor 'big'"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                read.load_into("w", zeros({91}, DType::I32));
              }).find("converting it to i32 is not supported"),
              std::string::npos)
        << error_of([&] { read.load_into("w", zeros({91}, DType::I32)); });
  }
  // Truncated files are refused when opened, by the sizes, as a mapped open refuses them.
  const uint64_t size = fs::file_size(file);
  for (const uint64_t keep : {size - 1, uint64_t(5)}) {
    const fs::path cut = dir / ("cut" + std::to_string(keep) + ".safetensors");
    fs::copy_file(file, cut);
    fs::resize_file(cut, keep);
    const std::string read_error =
        error_of([&] { SafetensorsFile::open(cut.string(), SafetensorsLoad::Read); });
    const std::string map_error = error_of([&] { SafetensorsFile::open(cut.string()); });
    EXPECT_FALSE(read_error.empty()) << keep;
    EXPECT_EQ(read_error, map_error) << keep;
  }
  // A file cut after it was opened: the read that runs past its end names it.
  const fs::path late = dir / "late.safetensors";
  fs::copy_file(file, late);
  const SafetensorsFile read = SafetensorsFile::open(late.string(), SafetensorsLoad::Read);
  fs::resize_file(late, size - 8);
  const std::string late_error = error_of([&] { read.load("h"); });
  EXPECT_NE(late_error.find("truncated?"), std::string::npos) << late_error;
}

}  // namespace
}  // namespace tessel::io
