// SPDX-License-Identifier: Apache-2.0
// RequestSampler's log-probabilities against PyTorch (torch_logprobs.py): several requests with
// penalties and filters run for a few steps on odd vocabularies; every reported logprob (the
// chosen token's and the top alternatives') must equal torch.log_softmax of the penalised logits
// at the request's temperature, and the alternatives must be the most likely ids in order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "sampler_reference.h"
#include "tessel/serve/sampler.h"

#ifndef TESSEL_TORCH_PYTHON
#error "TESSEL_TORCH_PYTHON (an interpreter with PyTorch) must be defined by the build"
#endif
#ifndef TESSEL_SOURCE_DIR
#error "TESSEL_SOURCE_DIR must be defined by the build"
#endif

namespace tessel::serve {
namespace {

namespace fs = std::filesystem;

struct Step {
  std::vector<float> logits;
  std::vector<int64_t> prompt, generated;
  SamplingParams params;
  SampledToken got;
};

template <typename T>
std::string json_list(const std::vector<T>& v) {
  std::ostringstream s;
  s << std::setprecision(17) << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str() + "]";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RequestSamplerTorch, LogprobsMatchTorchLogSoftmax) {
  std::vector<SamplingParams> requests(4);
  requests[1].temperature = 0.7;
  requests[1].repetition_penalty = 1.2;
  requests[1].presence_penalty = 0.5;
  requests[1].frequency_penalty = 0.25;
  requests[2].temperature = 0;  // greedy: logprobs at temperature 1
  requests[2].repetition_penalty = 0.8;
  requests[2].frequency_penalty = -0.4;
  requests[3].temperature = 1.5;
  requests[3].top_k = 4;
  requests[3].top_p = 0.8;
  requests[3].min_p = 0.05;
  requests[3].presence_penalty = 1.0;
  std::vector<Step> steps;
  for (size_t vocab : {7, 13, 33}) {
    for (size_t r = 0; r < requests.size(); ++r) {
      SamplingParams p = requests[r];
      p.logprobs = 20;
      const std::vector<int64_t> prompt = {int64_t(vocab) - 1, 2, 2, 0};
      RequestSampler sampler(p, 10 * r + vocab, prompt);
      std::vector<int64_t> generated;
      for (int i = 0; i < 6; ++i) {
        Step s{testing::random_logits(vocab, 1000 * r + 10 * vocab + uint64_t(i)),
               prompt,
               generated,
               p,
               {}};
        s.got = sampler.sample(s.logits);
        generated.push_back(s.got.token);
        steps.push_back(std::move(s));
      }
    }
  }

  const fs::path dir = tessel::test::scratch_path("tessel_sampler_torch");
  {
    std::ofstream in(dir / "in.json");
    in << std::setprecision(17) << "{\"cases\":[";
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      in << (i ? "," : "") << "{\"logits\":" << json_list(s.logits)
         << ",\"prompt\":" << json_list(s.prompt) << ",\"generated\":" << json_list(s.generated)
         << ",\"repetition_penalty\":" << s.params.repetition_penalty
         << ",\"presence_penalty\":" << s.params.presence_penalty
         << ",\"frequency_penalty\":" << s.params.frequency_penalty
         << ",\"temperature\":" << s.params.temperature << "}";
    }
    in << "]}";
  }
  const std::string python = TESSEL_TORCH_PYTHON;
  const fs::path log = dir / "python.log";
  const std::string cmd = python + " '" + TESSEL_SOURCE_DIR + "/tests/serve/torch_logprobs.py' '" +
                          (dir / "in.json").string() + "' '" + (dir / "out.bin").string() +
                          "' > '" + log.string() + "' 2>&1";
  // No torch, no comparison: a failure with the script's output, never a skip.
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << "torch_logprobs.py failed (PyTorch from Debian's python3-torch is needed):\n"
      << read_text(log);

  std::ifstream out(dir / "out.bin", std::ios::binary);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    std::vector<double> want(s.logits.size());
    out.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * sizeof(double)));
    ASSERT_TRUE(out.good()) << "out.bin ends before case " << i;
    const std::string what = "case " + std::to_string(i) + " vocab " +
                             std::to_string(s.logits.size()) + " token " +
                             std::to_string(s.got.token);
    EXPECT_NEAR(s.got.logprob, want[size_t(s.got.token)], 1e-10) << what;
    // The alternatives: the most likely ids (ties: lower id first) with torch's values.
    std::vector<int64_t> order(want.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = int64_t(j);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return want[size_t(a)] > want[size_t(b)]; });
    ASSERT_EQ(s.got.top.size(), std::min<size_t>(20, want.size())) << what;
    for (size_t j = 0; j < s.got.top.size(); ++j) {
      EXPECT_EQ(s.got.top[j].first, order[j]) << what << " rank " << j;
      EXPECT_NEAR(s.got.top[j].second, want[size_t(order[j])], 1e-10) << what << " rank " << j;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::serve
