// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel inference from GGUF files under `mpirun -np 2`: each rank loads its share
// (train/model_tp_load_gguf.h), quantized matrices kept as blocks, and the logits of a prompt and
// 16 greedy tokens equal one process running the same file (models::load_gguf_model).
// Models: a GPT-2 (fused qkv split per head, tied head, vocabulary 263 padded to 264), a LLaMA
// with grouped-query heads and an untied head, a LLaMA with one KV head (replicated over the
// ranks), a tied head, q/k biases (their rows are stored in interleaved-RoPE order, reordered
// within each rank's heads) and a padded vocabulary, and a wider LLaMA for the k-quants' 256-weight
// blocks. Types: F32, F16, Q8_0, Q4_0 and Q4_K_M. Column-parallel products use exactly one
// process's rows, so only the row-parallel sums' order can differ: the logits must agree within
// a bound per type, the tokens exactly. A row-parallel split inside a block (96 weights over 2
// ranks in Q8_0's blocks of 32, 256 in Q4_K's of 256) is refused on both ranks with one Error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/core/rng.h"
#include "tessel/dist/world.h"
#include "tessel/models/generation.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/train/model_tensor_parallel.h"
#include "tessel/train/model_tp_load_gguf.h"

using namespace tessel;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}

std::shared_ptr<models::CausalLM> gpt2() {
  models::GPT2Config c;
  c.vocab_size = 263;
  c.n_positions = 97;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_layer = 2;
  c.initializer_range = 0.2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  Generator g(21);
  return models::GPT2::random(c, g);
}

struct LlamaShape {
  int64_t vocab = 264, hidden = 64, intermediate = 192, heads = 4, kv_heads = 2, layers = 2;
  bool tied = false, bias = false;
};

std::shared_ptr<models::CausalLM> llama(const LlamaShape& s) {
  models::LlamaConfig c;
  c.vocab_size = s.vocab;
  c.hidden = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.max_position_embeddings = 97;
  c.initializer_range = 0.2;
  c.tie_word_embeddings = s.tied;
  c.attention_bias = s.bias;
  c.bos_token_id = std::nullopt;
  c.eos_token_ids = {};
  Generator g(22);
  return models::Llama::random(c, g);
}

std::vector<int64_t> prompt(int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 13; ++i) ids.push_back((i * 37 + 5) % vocab);
  return ids;
}

// Rank 0 writes the file, every rank then reads it.
std::string write_gguf(const dist::CommPtr& world, const std::string& dir, const std::string& name,
                       const models::CausalLM& model, const std::string& type) {
  const std::string path = dir + "/" + name + "-" + type + ".gguf";
  if (world->rank() == 0) {
    models::GgufExportOptions o;
    o.type = type;
    o.name = name;
    models::save_gguf_model(model, path, o);
  }
  world->barrier();
  return path;
}

Tensor prompt_logits(models::CausalLM& model, const std::vector<int64_t>& ids,
                     const train::ModelTensorParallel* tp) {
  autograd::NoGradGuard no_grad;
  const Tensor x = from_data(ids, Shape({1, int64_t(ids.size())}));
  const Tensor local = model.forward(x);
  return (tp ? train::model_tp_full_logits(*tp, local) : local).to(DType::F32);
}

std::vector<int64_t> greedy(models::CausalLM& model, const std::vector<int64_t>& ids,
                            const std::shared_ptr<train::ModelTensorParallel>& tp, int64_t vocab) {
  models::GenerationOptions o;
  o.max_new_tokens = 16;
  o.sampling.temperature = 0.0;
  o.vocab_limit = vocab;
  if (tp)
    o.full_logits = [tp](const Tensor& local) { return train::model_tp_full_logits(*tp, local); };
  return models::generate(model, ids, o).tokens;
}

// `bound`: the largest |logit difference| allowed, relative to the largest |logit|.
void run_case(const dist::CommPtr& world, const std::string& dir, const std::string& name,
              const std::shared_ptr<models::CausalLM>& source, const std::string& type,
              double bound) {
  const std::string label = name + " " + type;
  const std::string path = write_gguf(world, dir, name, *source, type);
  const int64_t vocab = source->model_config().vocabulary_size();
  const std::vector<int64_t> ids = prompt(vocab);
  auto whole = models::load_gguf_model(path);
  const Tensor want = prompt_logits(*whole, ids, nullptr);
  const std::vector<int64_t> want_tokens = greedy(*whole, ids, nullptr, vocab);

  train::TpGgufLoaded loaded = train::load_gguf_model_tp(path, world);
  const Tensor got = prompt_logits(*loaded.model, ids, loaded.tp.get());
  const std::vector<int64_t> got_tokens = greedy(*loaded.model, ids, loaded.tp, vocab);

  check(got.shape() == want.shape(),
        label + ": logits " + got.shape().str() + " expected " + want.shape().str());
  double worst = 0, scale = 0;
  if (got.shape() == want.shape()) {
    const float *a = got.data<float>(), *b = want.data<float>();
    for (int64_t i = 0; i < want.numel(); ++i) {
      worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
      scale = std::max(scale, std::abs(double(b[i])));
    }
  }
  check(scale > 0 && worst <= bound * scale,
        label + ": largest logit difference " + std::to_string(worst) + " of max|logit| " +
            std::to_string(scale) + " (bound " + std::to_string(bound) + " relative)");
  check(got_tokens == want_tokens, label + ": tp 2 greedy tokens differ from one process's");
  check(std::set<int64_t>(want_tokens.begin(), want_tokens.end()).size() >= 3,
        label + ": fewer than 3 distinct greedy tokens (a degenerate model tests little)");
  // Each rank reads its share of the file: less than all of it, the two together most of it.
  Tensor read = from_data(std::vector<int64_t>{loaded.bytes_read}, Shape{1});
  world->all_reduce(read);
  check(loaded.bytes_read < loaded.file_bytes && read.data<int64_t>()[0] > loaded.file_bytes / 2,
        label + ": rank read " + std::to_string(loaded.bytes_read) + " bytes, both " +
            std::to_string(read.data<int64_t>()[0]) + ", of the file's " +
            std::to_string(loaded.file_bytes));
  if (type != "f32")  // the first rank's column-parallel rows are the mapping itself
    check(world->rank() != 0 || loaded.views > 0, label + ": no matrix bound as a view");
  if (world->rank() == 0)
    std::printf(
        "%s: logits within %.3g of max|logit| %.3g, 16 greedy tokens equal; rank 0 read "
        "%lld of %lld bytes, %lld views, %lld copies\n",
        label.c_str(), worst, scale, static_cast<long long>(loaded.bytes_read),
        static_cast<long long>(loaded.file_bytes), static_cast<long long>(loaded.views),
        static_cast<long long>(loaded.copies));
}

void refuses_split_inside_block(const dist::CommPtr& world, const std::string& dir,
                                const std::string& name, const LlamaShape& shape,
                                const std::string& type, const std::string& expected) {
  const std::string path = write_gguf(world, dir, name, *llama(shape), type);
  std::string message;
  try {
    train::load_gguf_model_tp(path, world);
  } catch (const Error& e) {
    message = e.what();
  }
  check(message.find(expected) != std::string::npos && message.find("tp = 2") != std::string::npos,
        name + ": expected an error containing '" + expected + "' and 'tp = 2', got '" + message +
            "'");
  if (world->rank() == 0) std::printf("%s: refused: %s\n", name.c_str(), message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    dist::CommPtr world = dist::init_world();
    if (world->size() != 2 || argc != 2) {
      std::fprintf(stderr, "serve_gguf_tp: run as mpirun -np 2 serve_gguf_tp WORKDIR (%d ranks)\n",
                   world->size());
      return 2;
    }
    const std::string dir = argv[1];
    if (world->rank() == 0) std::filesystem::create_directories(dir);
    world->barrier();
    // f32 / f16 weights: the row-parallel sums' order alone; 8- and 4-bit: an activation whose
    // f32 value moved in its last bit can round to the neighbouring 8-bit code in the next
    // quantized product (as with --weights int8 under tp).
    const std::vector<std::pair<std::string, double>> types = {
        {"f32", 1e-5}, {"f16", 1e-5}, {"q8_0", 1e-4}, {"q4_0", 1e-4}};
    LlamaShape gqa;
    LlamaShape mqa;
    mqa.vocab = 263;
    mqa.kv_heads = 1;
    mqa.tied = true;
    mqa.bias = true;
    for (const auto& [type, bound] : types) {
      run_case(world, dir, "gpt2", gpt2(), type, bound);
      run_case(world, dir, "llama-gqa", llama(gqa), type, bound);
      run_case(world, dir, "llama-mqa-tied-bias", llama(mqa), type, bound);
    }
    // k-quants: rows of 512 split at 256 (Q4_K, and Q6_K for v / down / the head).
    LlamaShape wide;
    wide.hidden = 512;
    wide.intermediate = 512;
    wide.heads = 8;
    wide.layers = 1;
    run_case(world, dir, "llama-wide", llama(wide), "q4_k_m", 1e-4);
    LlamaShape narrow_mlp;
    narrow_mlp.intermediate = 96;
    refuses_split_inside_block(world, dir, "llama-mlp96", narrow_mlp, "q8_0",
                               "blk.0.ffn_down.weight (q8_0, rows of 96 weights in blocks of 32)");
    LlamaShape narrow = wide;  // attention output rows of 256: one Q4_K block, split at 128
    narrow.hidden = 256;
    narrow.heads = 4;
    refuses_split_inside_block(world, dir, "llama-hidden256", narrow, "q4_k_m",
                               "blk.0.attn_output.weight (q4_K, rows of 256 weights in blocks of "
                               "256)");
    world->barrier();
    if (world->rank() == 0) std::filesystem::remove_all(dir);
    Tensor failures = from_data(std::vector<int64_t>{g_failures}, Shape{1});
    world->all_reduce(failures);
    return failures.data<int64_t>()[0] == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_gguf_tp: %s\n", e.what());
    dist::abort_job(1, e.what());
  }
}
