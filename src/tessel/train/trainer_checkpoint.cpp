// SPDX-License-Identifier: Apache-2.0
// What a training checkpoint holds and how the trainer restores it. Beside the model in the
// Hugging Face layout (config.json + model.safetensors, so `tessel generate` loads the directory
// as it is, with the tokenizer files copied in), it stores everything a resumed run needs to
// continue bit for bit: the parameters and AdamW moments as layout-independent pieces, one file
// per rank plus an index (checkpoint_pieces.h), and in state.json the step, the optimizer's step
// count, the tokens seen, the skip counters, the dropout generator's state and
// the data loader's position; plus the resolved configuration (train.toml).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tessel/core/log.h"
#include "tessel/core/threads.h"
#include "tessel/io/mapped_file.h"
#include "tessel/io/safetensors.h"
#include "tessel/models/family.h"
#include "tessel/tensor/device_memory.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/checkpoint/checkpoint_pieces.h"
#include "tessel/train/checkpoint/safetensors_regions.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = "state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kConfigFile = "train.toml";

void write_text(const fs::path& path, const std::string& text) {
  io::write_file_atomic(path.string(), text.data(), text.size());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "checkpoint: cannot read ", path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::string Trainer::save_checkpoint() {
  // Every rank writes the pieces it owns (trainer_checkpoint_pieces.cpp) into rank 0's temporary
  // directory, all at once; rank 0 then indexes them, assembles the HF-layout model from them and
  // commits, so the manifest covers every rank's file. No tensor is gathered over the network.
  const CheckpointMemory before = checkpoint_memory_before();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Piece> pieces = checkpoint_pieces();
  // A CUDA run writes host copies (the pieces view its device tensors).
  for (Piece& p : pieces)
    if (p.data.defined() && !p.data.device().is_cpu()) p.data = to_device(p.data, Device::cpu());
  std::unique_ptr<CheckpointWriter> writer;
  if (leader()) writer = std::make_unique<CheckpointWriter>(run_dir_, step_);
  const std::string dir = share_leader_string(writer ? writer->dir() : "");
  if (offload_) {
    // The pieces view the chunks; each is brought into memory when the file reaches it.
    OffloadCheckpointAccess hold(offload_.get());
    write_piece_file(dir, layout_.world_rank(), layout_.world_size(), pieces, [&](size_t i) {
      offload_->hold_for_checkpoint(pieces[i].data, memory::AccessMode::Read);
    });
  } else {
    write_piece_file(dir, layout_.world_rank(), layout_.world_size(), pieces);
  }
  barrier_world();  // every piece is on disk before rank 0 reads and seals them
  std::string path;
  if (leader()) {
    // The drill: a save as slow as a big model's, before the commit a kill would prevent.
    if (config_.fault.save_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(config_.fault.save_delay_ms));
    path = write_checkpoint(*writer);
  }
  barrier_world();  // no rank runs ahead of a checkpoint that is not yet committed
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_record(checkpoint_record("save", seconds * 1e3, before));
  check_save_time(seconds);
  return path;
}

std::string Trainer::share_leader_string(const std::string& text) const {
  if (!layout_.mesh) return text;
  dist::Communicator& world = layout_.mesh->world();
  Tensor size = full({1}, double(text.size()), DType::I32);
  world.broadcast(size, 0);
  const int64_t n = int64_t(size.data<int32_t>()[0]);
  Tensor bytes = zeros({std::max<int64_t>(n, 1)}, DType::I32);
  if (leader())
    for (int64_t i = 0; i < n; ++i) bytes.data<int32_t>()[i] = (unsigned char)text[size_t(i)];
  world.broadcast(bytes, 0);
  std::string out;
  for (int64_t i = 0; i < n; ++i) out.push_back(char(bytes.data<int32_t>()[i]));
  return out;
}

void Trainer::barrier_world() const {
  if (layout_.mesh) layout_.mesh->world().barrier();
}

std::string Trainer::write_checkpoint(CheckpointWriter& writer) {
  const fs::path dir = writer.dir();
  write_piece_index(dir.string(), layout_.world_size(), checkpoint_layout_json());
  write_checkpoint_model(dir.string());
  const io::LoaderPosition pos = loader_->position();
  nlohmann::json state{
      {"format", "tessel-train-state"},
      {"version", 1},
      {"step", step_},
      {"optimizer_step", optimizer_steps()},
      {"tokens", tokens_},
      {"global_batch", config_.train.global_batch},
      {"skipped_steps", skipped_},
      {"bad_in_a_row", bad_in_a_row_},
      {"loss_scale", nlohmann::json::parse(precision_ ? precision_->state_json() : "null")},
      {"rng", {{"seed", rng_.seed()}, {"offset", rng_.offset()}}},
      {"loader", nlohmann::json::parse(pos.to_json())},
      {"threads", num_threads()},
      {"val_loss", last_val_loss_ ? nlohmann::json(*last_val_loss_) : nlohmann::json(nullptr)}};
  write_text(dir / kStateFile, state.dump(2) + "\n");
  // Drills apply to the run that was given them: a resumed run must not repeat the kill.
  TrainConfig stored = config_;
  stored.fault = FaultSection{};
  write_text(dir / kConfigFile, stored.to_toml());
  if (!tokenizer_dir_.empty()) {
    for (const char* name :
         {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) {
      const fs::path src = fs::path(tokenizer_dir_) / name;
      std::error_code ec;
      if (fs::is_regular_file(src)) fs::copy_file(src, dir / name, ec);
      TESSEL_CHECK(!ec, "checkpoint: cannot copy the tokenizer file ", src.string(), " into ",
                   dir.string(), ": ", ec.message());
    }
  }
  return writer.commit(config_.checkpoint.keep);
}

void Trainer::load_checkpoint(const std::string& dir_name) {
  const fs::path dir = dir_name;  // verified by build()
  const CheckpointMemory before = checkpoint_memory_before();
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_text(dir / kStateFile));
    TESSEL_CHECK(
        state.value("format", "") == "tessel-train-state" && state.value("version", 0) == 1,
        "not a tessel-train-state version 1 file");
    step_ = state.at("step").get<int64_t>();
    tokens_ = state.at("tokens").get<int64_t>();
    skipped_ = state.at("skipped_steps").get<int64_t>();
    bad_in_a_row_ = state.at("bad_in_a_row").get<int64_t>();
    if (state.contains("loss_scale") && precision_)
      precision_->restore_state(state["loss_scale"].dump());
    rng_.set_state(state.at("rng").at("seed").get<uint64_t>(),
                   state.at("rng").at("offset").get<uint64_t>());
    loader_->set_position(io::LoaderPosition::from_json(state.at("loader").dump()));
    if (state.contains("val_loss") && state["val_loss"].is_number()) {
      last_val_loss_ = state["val_loss"].get<double>();
    }
    // Checkpoints before the global batch was recorded say nothing here.
    const int64_t trained = state.value("global_batch", int64_t(0));
    if (trained > 0 && trained != config_.train.global_batch)
      print("note: the global batch changes from " + std::to_string(trained) + " to " +
            std::to_string(config_.train.global_batch) + " sequences per step at step " +
            std::to_string(step_) + " (train.global_batch)");
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("checkpoint ", dir.string(), ": ", kStateFile, " is malformed: ", e.what());
  }
  const int64_t optimizer_step = state.at("optimizer_step").get<int64_t>();
  if (has_piece_index(dir.string())) {
    // Any layout's pieces: this rank reads the parts it holds (trainer_checkpoint_pieces.cpp).
    load_checkpoint_pieces(dir.string(), optimizer_step);
  } else {
    TESSEL_CHECK(!offload_, "checkpoint ", dir.string(),
                 " predates checkpoint pieces: resume it without memory offload once, then "
                 "offload from its next checkpoint");
    load_legacy_state(dir.string(), optimizer_step);
  }
  loaded_ = checkpoint_record(
      "load",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
      before);
  const int saved_threads = state.value("threads", 0);
  if (saved_threads != num_threads()) {
    log(LogLevel::Warn, "train: resuming with ", num_threads(), " threads; the checkpoint was ",
        "written with ", saved_threads, ", so losses may differ from an uninterrupted run in the ",
        "last bits (same thread count: bit-identical)");
  }
}

// Checkpoints written before pieces: optimizer.safetensors with the full moments (the parameters
// came from model.safetensors, read like a Hugging Face directory when the model was built). Each
// rank reads the byte ranges of the moments it holds, as from pieces.
void Trainer::load_legacy_state(const std::string& dir_name, int64_t optimizer_step) {
  auto file = std::make_shared<const io::SafetensorsCheckpoint>(io::SafetensorsCheckpoint::open(
      (fs::path(dir_name) / kOptimizerFile).string(), io::SafetensorsLoad::Read));
  std::set<std::string> keys;
  for (const auto& [name, param] : model_->named_parameters()) {
    keys.insert("exp_avg." + name);
    keys.insert("exp_avg_sq." + name);
  }
  std::vector<std::string> unexpected;
  for (const std::string& key : file->names())
    if (!keys.count(key)) unexpected.push_back(key);
  TESSEL_CHECK(unexpected.empty(), "checkpoint ", dir_name, ": ", kOptimizerFile,
               " holds tensors that are no moment of this model's parameters: ", unexpected.front(),
               unexpected.size() > 1 ? " and more" : "");
  fill_moments(
      safetensors_region_source(file, same_name_layout(*file)),
      [&file](const std::string& key) {
        TESSEL_CHECK(file->contains(key), "checkpoint: ", kOptimizerFile, " has no ", key);
        return file->entry(key).shape;
      },
      optimizer_step);
}

}  // namespace tessel::train
