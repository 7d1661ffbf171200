// SPDX-License-Identifier: Apache-2.0
// Writing and reassembling per-rank ZeRO checkpoint shards (see shard_checkpoint.h). The index is
// JSON so that a person (or another tool) can read the layout without tessel.
#include "tessel/train/shard_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
#include "tessel/io/safetensors.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexFormat = "tessel-zero-index";

std::string bucket_key(const char* prefix, size_t b) {
  return std::string(prefix) + "b" + std::to_string(b);
}

struct BucketLayout {
  int64_t numel = 0, padded = 0, shard = 0;
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<int64_t> offsets;
};

// Copies elements [offset, offset + n) of a flat bucket, spread over the ranks' blocks, into dst.
void copy_range(const std::vector<io::SafetensorsFile>& files, const std::string& key,
                int64_t block, int64_t offset, int64_t n, Tensor dst) {
  int64_t done = 0;
  while (done < n) {
    const int64_t x = offset + done;
    const size_t r = size_t(x / block);
    const int64_t in_block = x - int64_t(r) * block;
    const int64_t len = std::min(n - done, block - in_block);
    const Tensor src = files[r].load(key, DType::F32);
    TESSEL_CHECK(src.numel() == block, "checkpoint shard ", files[r].path(), ": '", key, "' holds ",
                 src.numel(), " elements, the index says ", block);
    dst.narrow(0, done, len).copy_from(src.narrow(0, in_block, len));
    done += len;
  }
}

}  // namespace

std::string zero_shard_file_name(int rank, int size) {
  char name[64];
  std::snprintf(name, sizeof name, "zero_shard_%05d_of_%05d.safetensors", rank, size);
  return name;
}

std::vector<Tensor> parameter_blocks(const parallel::DataParallel& dp) {
  const int64_t rank = dp.comm().rank();
  const auto places = dp.places();
  std::vector<Tensor> out;
  for (int64_t b = 0; b < dp.bucket_count(); ++b) {
    const int64_t size = dp.shard_numel(b), lo = rank * size;
    Tensor block = zeros({size}, DType::F32);
    for (const auto& p : places) {
      if (p.bucket != b) continue;
      const int64_t begin = std::max(p.offset, lo);
      const int64_t end = std::min(p.offset + p.param.numel(), lo + size);
      if (end > begin)
        block.narrow(0, begin - lo, end - begin)
            .copy_from(p.param.detach().flatten().narrow(0, begin - p.offset, end - begin));
    }
    out.push_back(block);
  }
  return out;
}

void write_zero_shard(const std::string& dir, const parallel::DataParallel& dp, int stage,
                      const std::vector<Tensor>& param_blocks, const ShardTensors& local_moments) {
  TESSEL_CHECK(int64_t(param_blocks.size()) == dp.bucket_count(),
               "write_zero_shard: ", param_blocks.size(), " parameter blocks for ",
               dp.bucket_count(), " buckets");
  io::NamedTensors tensors;
  for (size_t b = 0; b < param_blocks.size(); ++b)
    tensors.emplace_back(bucket_key("param.", b), param_blocks[b]);
  for (const auto& m : local_moments) tensors.push_back(m);
  const int rank = dp.comm().rank(), size = dp.comm().size();
  io::save_safetensors((fs::path(dir) / zero_shard_file_name(rank, size)).string(), tensors,
                       {{"format", "tessel-zero-shard"},
                        {"rank", std::to_string(rank)},
                        {"dp", std::to_string(size)},
                        {"stage", std::to_string(stage)}});
}

void write_zero_index(const std::string& dir, const parallel::DataParallel& dp, int stage) {
  nlohmann::json buckets = nlohmann::json::array();
  const auto places = dp.places();
  for (int64_t b = 0; b < dp.bucket_count(); ++b) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : places) {
      if (p.bucket != b) continue;
      params.push_back({{"name", p.name}, {"shape", p.param.shape().dims()}, {"offset", p.offset}});
    }
    buckets.push_back({{"numel", dp.bucket_numel(b)},
                       {"padded", dp.bucket_padded_numel(b)},
                       {"shard", dp.shard_numel(b)},
                       {"params", params}});
  }
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < dp.comm().size(); ++r)
    files.push_back(zero_shard_file_name(r, dp.comm().size()));
  nlohmann::json order = nlohmann::json::array();
  for (const auto& p : places) order.push_back(p.name);
  const nlohmann::json index{{"format", kIndexFormat}, {"version", 1},   {"dp", dp.comm().size()},
                             {"stage", stage},         {"files", files}, {"parameters", order},
                             {"buckets", buckets}};
  const std::string text = index.dump(1) + "\n";
  io::write_file_atomic((fs::path(dir) / kZeroIndexFile).string(), text.data(), text.size());
}

bool has_zero_shards(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / kZeroIndexFile);
}

AssembledState assemble_zero_shards(const std::string& dir) {
  const fs::path index_path = fs::path(dir) / kZeroIndexFile;
  std::ifstream in(index_path);
  TESSEL_CHECK(in.good(), "checkpoint ", dir, ": cannot read ", kZeroIndexFile);
  const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
  TESSEL_CHECK(!index.is_discarded() && index.value("format", "") == kIndexFormat &&
                   index.value("version", 0) == 1,
               "checkpoint ", dir, ": ", kZeroIndexFile, " is not a ", kIndexFormat,
               " version 1 file");
  AssembledState out;
  std::vector<BucketLayout> buckets;
  std::vector<io::SafetensorsFile> files;
  try {
    out.dp = index.at("dp").get<int>();
    out.stage = index.at("stage").get<int>();
    for (const auto& b : index.at("buckets")) {
      BucketLayout l;
      l.numel = b.at("numel").get<int64_t>();
      l.padded = b.at("padded").get<int64_t>();
      l.shard = b.at("shard").get<int64_t>();
      TESSEL_CHECK(l.shard * out.dp == l.padded && l.padded >= l.numel, "bucket ", buckets.size(),
                   ": padded ", l.padded, " is not dp x shard = ", out.dp, " x ", l.shard);
      for (const auto& p : b.at("params")) {
        l.names.push_back(p.at("name").get<std::string>());
        l.shapes.push_back(Shape(p.at("shape").get<std::vector<int64_t>>()));
        l.offsets.push_back(p.at("offset").get<int64_t>());
        TESSEL_CHECK(l.offsets.back() >= 0 && l.offsets.back() + l.shapes.back().numel() <= l.numel,
                     "parameter ", l.names.back(), " lies outside its bucket");
      }
      buckets.push_back(std::move(l));
    }
    const auto names = index.at("files").get<std::vector<std::string>>();
    TESSEL_CHECK(int(names.size()) == out.dp, names.size(), " shard files listed for dp ", out.dp);
    for (int r = 0; r < out.dp; ++r) {
      TESSEL_CHECK(names[size_t(r)] == zero_shard_file_name(r, out.dp), "shard file ", r, " is '",
                   names[size_t(r)], "', expected ", zero_shard_file_name(r, out.dp));
      files.push_back(io::SafetensorsFile::open((fs::path(dir) / names[size_t(r)]).string()));
    }
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("checkpoint ", dir, ": ", kZeroIndexFile, " is malformed: ", e.what());
  } catch (const Error& e) {
    TESSEL_FAIL("checkpoint ", dir, ": ", kZeroIndexFile,
                " and the shard files disagree: ", e.what());
  }
  std::map<std::string, Tensor> params, avg, avg_sq;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const BucketLayout& l = buckets[b];
    for (size_t i = 0; i < l.names.size(); ++i) {
      const int64_t n = l.shapes[i].numel();
      Tensor p = empty({n}), m = empty({n}), v = empty({n});
      copy_range(files, bucket_key("param.", b), l.shard, l.offsets[i], n, p);
      copy_range(files, bucket_key("exp_avg.", b), l.shard, l.offsets[i], n, m);
      copy_range(files, bucket_key("exp_avg_sq.", b), l.shard, l.offsets[i], n, v);
      params[l.names[i]] = p.reshape(l.shapes[i]);
      avg[l.names[i]] = m.reshape(l.shapes[i]);
      avg_sq[l.names[i]] = v.reshape(l.shapes[i]);
    }
  }
  for (const auto& name : index.at("parameters").get<std::vector<std::string>>()) {
    TESSEL_CHECK(params.count(name), "checkpoint ", dir, ": parameter ", name,
                 " is in no bucket of ", kZeroIndexFile);
    out.params.emplace_back(name, params.at(name));
  }
  for (const auto& [name, t] : out.params)
    out.moments.emplace_back("exp_avg." + name, avg.at(name));
  for (const auto& [name, t] : out.params)
    out.moments.emplace_back("exp_avg_sq." + name, avg_sq.at(name));
  return out;
}

}  // namespace tessel::train
