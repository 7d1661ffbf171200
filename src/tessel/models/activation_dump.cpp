// SPDX-License-Identifier: Apache-2.0
// The TESSEL_DUMP_DIR activation dump (see activation_dump.h).
#include "tessel/models/activation_dump.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tessel/ops/ops.h"

namespace tessel::models {

std::optional<std::string> ActivationDump::directory() {
  const char* dir = std::getenv("TESSEL_DUMP_DIR");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  return std::string(dir);
}

ActivationDump::ActivationDump(nn::Module& model) : model_(model) {
  handle_ = model_.add_activation_observer([this](const std::string& name, const Tensor& value) {
    if (!value.defined() || !dtype_is_float(value.dtype())) return;
    if (!pieces_) {
      // A name reported twice in one forward (a module called twice) keeps its first value.
      if (seen_.insert(name).second) whole_.emplace_back(name, value.detach().clone());
      return;
    }
    if (seen_.count(name) != 0) return;
    auto [at, fresh] = piece_values_.try_emplace(name);
    if (fresh) piece_names_.push_back(name);
    at->second.push_back(value.detach().clone());
  });
}

ActivationDump::~ActivationDump() {
  model_.remove_hook(handle_);
}

void ActivationDump::write(const std::string& dir, int64_t index) const {
  io::NamedTensors out = whole_;
  for (const std::string& name : piece_names_) {
    const std::vector<Tensor>& pieces = piece_values_.at(name);
    for (const Tensor& p : pieces)
      TESSEL_CHECK(p.ndim() >= 2, "activation dump: '", name, "' piece ", p.shape(),
                   " has no positions dim to join along");
    out.emplace_back(name, pieces.size() == 1 ? pieces[0] : ops::concat(pieces, 1));
  }
  std::filesystem::create_directories(dir);
  char file[64];
  std::snprintf(file, sizeof(file), "activations-%04lld.safetensors", (long long)index);
  io::save_safetensors((std::filesystem::path(dir) / file).string(), out);
}

}  // namespace tessel::models
