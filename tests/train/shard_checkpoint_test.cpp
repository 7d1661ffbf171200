// SPDX-License-Identifier: Apache-2.0
// Per-rank ZeRO checkpoint shards: written by 3 thread-ranks (stage 2, buckets that cut through
// parameters and need padding), reassembled into exactly the full parameters and the moments that
// gathered_state() gives; an index that disagrees with the files is refused with its name.
#include "tessel/train/shard_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "../dist/common/thread_checks.h"
#include "tessel/autograd/engine.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/zero_optimizer.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

// Two odd-sized layers; 1000-byte buckets: {fc2.bias, fc2.weight} (238 elements), {fc1.bias}
// (33), {fc1.weight} (429).
class Mlp : public nn::Module {
 public:
  Mlp() : Module("Mlp") {
    Generator g(7);
    fc1 = register_module("fc1",
                          std::make_shared<nn::Linear>(13, 33, true, nn::Init::normal(&g, 0.3)));
    fc2 = register_module("fc2",
                          std::make_shared<nn::Linear>(33, 7, true, nn::Init::normal(&g, 0.3)));
  }
  Tensor loss(int rank) const {
    Generator g(100 + uint64_t(rank));
    Tensor x = randn({5, 13}, DType::F32, &g);
    std::vector<int64_t> t = {0, 3, 6, 1, 4};
    return ops::cross_entropy(fc2->forward(ops::tanh(fc1->forward(x))), from_data(t, {5}));
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

bool same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(ShardCheckpoint, ReassemblesFullParametersAndMoments) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessel_shard_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mutex mu;
  parallel::NamedTensors want_moments, want_params;
  tessel::test::run_thread_world(3, [&](dist::CommPtr comm) {
    Mlp m;
    parallel::DataParallel dp(
        m.named_parameters(), comm,
        {.bucket_bytes = 1000, .reduction = parallel::GradReduction::ReduceScatter});
    parallel::ZeroAdamW z(dp, {.stage = 2, .weight_decay = 0.1});
    for (int step = 0; step < 2; ++step) {
      m.zero_grad();
      autograd::backward(m.loss(comm->rank()));
      dp.finish_gradient_sync();
      z.step(0.01);
    }
    const auto gathered = z.gathered_state();
    write_zero_shard(dir.string(), dp, 2, parameter_blocks(dp), z.local_state());
    if (comm->rank() == 0) {
      write_zero_index(dir.string(), dp, 2);
      std::lock_guard lock(mu);
      want_moments = gathered;
      for (const auto& [name, t] : m.named_parameters()) want_params.emplace_back(name, t.clone());
    }
    comm->barrier();
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(fs::exists(dir / zero_shard_file_name(r, 3)));
  ASSERT_TRUE(has_zero_shards(dir.string()));

  const AssembledState a = assemble_zero_shards(dir.string());
  EXPECT_EQ(a.dp, 3);
  EXPECT_EQ(a.stage, 2);
  ASSERT_EQ(a.params.size(), want_params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].first, want_params[i].first);
    EXPECT_TRUE(same(a.params[i].second, want_params[i].second)) << a.params[i].first;
  }
  ASSERT_EQ(a.moments.size(), want_moments.size());
  for (size_t i = 0; i < a.moments.size(); ++i) {
    EXPECT_EQ(a.moments[i].first, want_moments[i].first);
    EXPECT_TRUE(same(a.moments[i].second, want_moments[i].second)) << a.moments[i].first;
  }

  // An index whose block size disagrees with the files is refused, naming the file.
  std::string text;
  {
    std::ifstream in(dir / kZeroIndexFile);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    const std::string key = "\"dp\": 3";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos);
    std::ofstream(dir / kZeroIndexFile)
        << text.substr(0, at) + "\"dp\": 2" + text.substr(at + key.size());
  }
  try {
    assemble_zero_shards(dir.string());
    ADD_FAILURE() << "an index for dp 2 over 3 shard files was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero_index.json"), std::string::npos) << e.what();
  }
  fs::remove(dir / zero_shard_file_name(1, 3));
  std::ofstream(dir / kZeroIndexFile) << text;
  EXPECT_THROW(assemble_zero_shards(dir.string()), Error);  // a shard file missing
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::train
