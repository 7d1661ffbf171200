// SPDX-License-Identifier: Apache-2.0
// Older llama.cpp Mixtral files keep one tensor per expert (blk.N.ffn_gate.E.weight, dims
// [in, out]) where newer ones stack them (blk.N.ffn_gate_exps.weight). A random Mixtral exported
// stacked (F32, F16, Q8_0) is rewritten with each stack split into its experts' tensors, in an
// order that keeps no stack's experts adjacent (gate, down, up of expert 0, then expert 1, ...):
// both files load to bitwise the same logits, the quantized stacks kept as blocks. A range within
// one expert is a view of its tensor, across experts a copy of the stack's bytes. A missing expert
// and experts of two types are refused naming the tensor.
#include "tessel/models/gguf_expert_stack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "common/error_text.h"
#include "common/per_test_dir.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/llama/llama.h"

namespace tessel::models {
namespace {

namespace fs = std::filesystem;

class GgufExpertStack : public ::tessel::test::PerTestDir {
 protected:
  GgufExpertStack() : PerTestDir("tessel_gguf_experts") {}
};

// 3 experts of 64 rows x 32 (whole Q8_0 blocks), 2 layers.
LlamaConfig mixtral() {
  LlamaConfig c;
  c.variant = LlamaVariant::Mixtral;
  c.vocab_size = 53;
  c.hidden = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.initializer_range = 0.3;
  c.num_local_experts = 3;
  c.num_experts_per_tok = 2;
  return c;
}

// `from` rewritten in the per-expert layout: each stack's expert e becomes blk.N.X.e.weight, the
// layer's experts written expert by expert after its first stack's place. `edit` may change the
// tensors before they are written.
void split_experts(const std::string& from, const std::string& to,
                   const std::function<void(std::vector<io::GgufTensorOut>&)>& edit = {}) {
  const io::GgufFile file = io::GgufFile::open(from);
  static const std::regex kStack(R"(blk\.(\d+)\.(\w+)_exps\.weight)");
  std::vector<io::GgufTensorOut> out;
  std::map<std::string, std::vector<const io::GgufTensorInfo*>> stacks;  // by layer
  for (const io::GgufTensorInfo& info : file.tensors()) {
    std::smatch m;
    if (std::regex_match(info.name, m, kStack)) stacks[m[1].str()].push_back(&info);
  }
  std::set<std::string> written;
  for (const io::GgufTensorInfo& info : file.tensors()) {
    std::smatch m;
    const std::span<const uint8_t> raw = file.raw(info.name);
    if (!std::regex_match(info.name, m, kStack)) {
      io::GgufTensorOut t;
      t.name = info.name;
      t.dims = info.dims;
      t.type = info.type;
      t.bytes.assign(raw.begin(), raw.end());
      out.push_back(std::move(t));
      continue;
    }
    if (!written.insert(m[1].str()).second) continue;
    const int64_t experts = int64_t(info.dims[2]);
    for (int64_t e = 0; e < experts; ++e)
      for (const io::GgufTensorInfo* s : stacks[m[1].str()]) {
        std::smatch sm;
        std::regex_match(s->name, sm, kStack);
        const std::span<const uint8_t> bytes = file.raw(s->name);
        const size_t each = bytes.size() / size_t(experts);
        io::GgufTensorOut t;
        t.name = "blk." + sm[1].str() + "." + sm[2].str() + "." + std::to_string(e) + ".weight";
        t.dims = {s->dims[0], s->dims[1]};
        t.type = s->type;
        t.bytes.assign(bytes.begin() + e * each, bytes.begin() + (e + 1) * each);
        out.push_back(std::move(t));
      }
  }
  if (edit) edit(out);
  io::save_gguf(to, file.metadata(), out);
}

Tensor some_ids() {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 13; ++i) v.push_back((i * 7 + 3) % 53);
  return from_data(v, Shape{1, 13});
}

TEST_F(GgufExpertStack, PerExpertTensorsLoadAsTheStackedFile) {
  autograd::NoGradGuard no_grad;
  Generator gen(11);
  auto model = mixtral().build_random(gen);
  for (const std::string type : {"f32", "f16", "q8_0"}) {
    const std::string stacked = path(type + ".gguf"), split = path(type + "-split.gguf");
    save_gguf_model(*model, stacked, {type, "m", nullptr});
    split_experts(stacked, split);
    const io::GgufFile f = io::GgufFile::open(split);
    ASSERT_FALSE(f.contains("blk.1.ffn_up_exps.weight"));
    ASSERT_EQ(f.info("blk.1.ffn_up.2.weight").dims, (std::vector<uint64_t>{32, 64}));
    ASSERT_EQ(f.info("blk.1.ffn_down.0.weight").dims, (std::vector<uint64_t>{64, 32}));
    auto a = load_gguf_model(stacked), b = load_gguf_model(split);
    EXPECT_EQ(is_quantized_model(*a), is_quantized_model(*b)) << type;
    for (auto& [name, t] : b->state_dict()) {
      if (type != "f32" && name.find(".experts.") != std::string::npos) {
        EXPECT_EQ(t.dtype(), DType::I8) << type << " " << name;
      }
    }
    const Tensor ids = some_ids();
    const Tensor want = a->forward(ids), got = b->forward(ids);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0) << type;
  }
}

TEST_F(GgufExpertStack, RangesWithinOneExpertAreViewsAcrossExpertsCopies) {
  Generator gen(12);
  auto model = mixtral().build_random(gen);
  save_gguf_model(*model, path("s.gguf"), {"q8_0", "m", nullptr});
  split_experts(path("s.gguf"), path("e.gguf"));
  const io::GgufFile stacked = io::GgufFile::open(path("s.gguf"));
  const io::GgufFile split = io::GgufFile::open(path("e.gguf"));
  std::set<std::string> wanted;
  std::vector<std::string> missing, mismatched;
  const std::optional<GgufStored> stored = find_gguf_stored(
      split, "blk.0.ffn_down_exps.weight", Shape({3, 32, 64}), wanted, missing, mismatched);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->experts,
            (std::vector<std::string>{"blk.0.ffn_down.0.weight", "blk.0.ffn_down.1.weight",
                                      "blk.0.ffn_down.2.weight"}));
  EXPECT_EQ(wanted.size(), 3u);
  const io::GgufTensorInfo info = gguf_stored_info(split, *stored);
  const io::GgufTensorInfo& want = stacked.info("blk.0.ffn_down_exps.weight");
  EXPECT_EQ(info.dims, want.dims);
  EXPECT_EQ(info.type, want.type);
  EXPECT_EQ(info.nbytes, want.nbytes);
  const std::span<const uint8_t> all = stacked.raw(want.name);
  const uint64_t each = want.nbytes / 3;
  // Within expert 1: its tensor's bytes, no copy.
  const io::GgufBytes inside = gguf_stored_bytes(split, *stored, each + 5, each - 9);
  EXPECT_EQ(inside.bytes.data(), split.raw("blk.0.ffn_down.1.weight").data() + 5);
  EXPECT_EQ(std::memcmp(inside.bytes.data(), all.data() + each + 5, each - 9), 0);
  // Experts 0 to 2 from the middle of 0: a copy equal to the stack's bytes.
  const io::GgufBytes across = gguf_stored_bytes(split, *stored, 7, 2 * each);
  EXPECT_EQ(std::memcmp(across.bytes.data(), all.data() + 7, 2 * each), 0);
  const io::GgufBytes whole = gguf_stored_bytes(split, *stored);
  ASSERT_EQ(whole.bytes.size(), all.size());
  EXPECT_EQ(std::memcmp(whole.bytes.data(), all.data(), all.size()), 0);
  EXPECT_TRUE(gguf_expert_names("output.weight", 3).empty());
}

TEST_F(GgufExpertStack, AMissingExpertOrTwoTypesAreRefusedByName) {
  Generator gen(13);
  auto model = mixtral().build_random(gen);
  save_gguf_model(*model, path("s.gguf"), {"f16", "m", nullptr});
  split_experts(path("s.gguf"), path("missing.gguf"), [](std::vector<io::GgufTensorOut>& t) {
    std::erase_if(t, [](const io::GgufTensorOut& x) { return x.name == "blk.1.ffn_up.2.weight"; });
  });
  test::expect_error([&] { load_gguf_model(path("missing.gguf")); },
                     {"missing",
                      "blk.1.ffn_up.2.weight [64, 32] (expert of "
                      "blk.1.ffn_up_exps.weight)"});
  split_experts(path("s.gguf"), path("mixed.gguf"), [](std::vector<io::GgufTensorOut>& t) {
    for (io::GgufTensorOut& x : t)
      if (x.name == "blk.0.ffn_gate.1.weight") {  // F32 (zeros) among F16 experts
        x.type = io::ggml::kF32;
        x.bytes.assign(x.bytes.size() * 2, 0);
      }
  });
  test::expect_error([&] { load_gguf_model(path("mixed.gguf")); },
                     {"blk.0.ffn_gate.1.weight (F32 where blk.0.ffn_gate.0.weight is F16"});
}

}  // namespace
}  // namespace tessel::models
