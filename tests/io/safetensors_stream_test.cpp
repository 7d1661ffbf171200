// SPDX-License-Identifier: Apache-2.0
// Streamed safetensors writing (checkpoints write each tensor from where it lives): a file whose
// tensors are produced in odd-sized chunks is byte-for-byte the serialized image of the same
// tensors; a producer that passes too few or too many bytes is an Error and leaves no file; the
// Read load mode gives the same values as the mapped one, copied out (never a view of the file).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace tessel::io
