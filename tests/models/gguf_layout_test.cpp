// SPDX-License-Identifier: Apache-2.0
// Family::gguf_layout (models/gguf_layout.h): every parameter of a GPT-2 and a LLaMA written by
// save_gguf_model maps to its GGUF tensor, the tied head's second copy is skipped, LLaMA's q and k
// carry their head counts, and gguf_stored_row undoes the export's interleaved-RoPE reordering row
// for row; a file of another shape is one Error naming the tensor and both shapes.
#include "tessel/models/gguf_layout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tessel/core/error.h"
#include "tessel/core/rng.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/models/llama/llama_gguf.h"

namespace tessel::models {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() /
          ("tessel_gguf_layout_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

LlamaConfig small_llama(int64_t hidden) {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden = hidden;
  c.intermediate_size = 13;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 3;
  c.num_key_value_heads = 1;
  c.head_dim = hidden / 3;
  c.max_position_embeddings = 33;
  c.attention_bias = true;
  c.bos_token_id = std::nullopt;
  c.eos_token_ids = {};
  return c;
}

TEST(GgufLayout, StoredRowUndoesTheRopeReordering) {
  // 3 heads of 6 rows: each row holds its own index, reordered as the export does.
  std::vector<float> rows(18);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i);
  const Tensor stored = llama_permute_rope_rows(from_data(rows, Shape({18, 1})), 3, true);
  for (int64_t r = 0; r < 18; ++r)
    EXPECT_EQ(stored.data<float>()[gguf_stored_row(r, 18, 3)], float(r)) << "row " << r;
  EXPECT_EQ(gguf_stored_row(7, 18, 0), 7);
}

TEST(GgufLayout, Gpt2AndLlamaNameEveryParameter) {
  GPT2Config g;
  g.vocab_size = 37;
  g.n_positions = 33;
  g.n_embd = 21;
  g.n_head = 3;
  g.n_layer = 2;
  Generator gen(3);
  auto gpt2 = GPT2::random(g, gen);
  const std::string gpt2_path = temp_path("gpt2.gguf");
  save_gguf_model(*gpt2, gpt2_path, {});
  const io::GgufFile gpt2_file = io::GgufFile::open(gpt2_path);
  const GgufLayout a = gpt2->model_config().family().gguf_layout(*gpt2, gpt2_file);
  EXPECT_EQ(a.tensors.size(), gpt2->state_dict().size());
  EXPECT_EQ(a.tensors.at("h.1.attn.c_attn.weight").name, "blk.1.attn_qkv.weight");
  EXPECT_EQ(a.tensors.at("h.1.attn.c_attn.weight").rope_heads, 0);
  EXPECT_EQ(a.skip, std::set<std::string>({"output.weight"}));  // the tied head's copy

  auto llama = Llama::random(small_llama(18), gen);
  const std::string llama_path = temp_path("llama.gguf");
  save_gguf_model(*llama, llama_path, {});
  const io::GgufFile llama_file = io::GgufFile::open(llama_path);
  const GgufLayout b = llama->model_config().family().gguf_layout(*llama, llama_file);
  EXPECT_EQ(b.tensors.size(), llama->state_dict().size());
  EXPECT_EQ(b.tensors.at("layers.0.self_attn.q_proj.weight").name, "blk.0.attn_q.weight");
  EXPECT_EQ(b.tensors.at("layers.0.self_attn.q_proj.bias").rope_heads, 3);
  EXPECT_EQ(b.tensors.at("layers.0.self_attn.k_proj.weight").rope_heads, 1);
  EXPECT_EQ(b.tensors.at("layers.0.self_attn.v_proj.weight").rope_heads, 0);

  // The same names in another width: one Error naming a tensor and both shapes.
  auto wider = Llama::random(small_llama(24), gen);
  try {
    wider->model_config().family().gguf_layout(*wider, llama_file);
    ADD_FAILURE() << "an 18-wide file laid out for a 24-wide model";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("blk.0.attn_q.weight (expected [24, 24], got [18, 18])"), std::string::npos)
        << m;
  }
  fs::remove(gpt2_path);
  fs::remove(llama_path);
}

}  // namespace
}  // namespace tessel::models
