// SPDX-License-Identifier: Apache-2.0
// The family registry (one line per architecture), config.json dispatch by "architectures" and
// "model_type", presets across families, and model directories in the Hugging Face layout.
#include "tessel/models/family.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
#include "tessel/models/config_json.h"

namespace tessel::models {

const Family& gpt2_family();      // gpt2/gpt2_family.cpp
const Family& llama_family();     // llama/llama_family.cpp
const Family& mixtral_family();   // mixtral/mixtral_family.cpp
const Family& gpt2_moe_family();  // gpt2/gpt2_moe_family.cpp

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "cannot open the model config '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  TESSEL_CHECK(!in.bad(), "cannot read the model config '", path, "'");
  return text.str();
}

}  // namespace

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {
      &gpt2_family(),
      &llama_family(),
      &mixtral_family(),
      &gpt2_moe_family(),
  };
  return all;
}

const Family& family_named(std::string_view name) {
  std::vector<std::string> names;
  for (const Family* f : families()) {
    if (f->name() == name) return *f;
    names.emplace_back(f->name());
  }
  TESSEL_FAIL("unknown model family '", name, "' (supported: ", join(names), ")");
}

const Family& family_for_config(const std::string& json_text, const std::string& what) {
  const nlohmann::json j = parse_config_object(json_text, what);
  std::vector<std::string> listed;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (!a.is_string()) continue;
      listed.push_back(a.get<std::string>());
      for (const Family* f : families())
        for (const std::string& arch : f->architectures())
          if (arch == listed.back()) return *f;
    }
  }
  std::string model_type;
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    model_type = it->get<std::string>();
    for (const Family* f : families())
      for (const std::string& t : f->model_types())
        if (t == model_type) return *f;
  }
  std::vector<std::string> supported;
  for (const Family* f : families())
    for (const std::string& arch : f->architectures()) supported.push_back(arch);
  // GPT-2's own configs (and tessel's older checkpoints) may name neither: GPT-2 is the default,
  // whose parser then names any key that is missing.
  if (listed.empty() && model_type.empty()) return gpt2_family();
  TESSEL_FAIL(what, ": unsupported architecture ", listed.empty() ? "" : "[" + join(listed) + "]",
              model_type.empty() ? "" : " (model_type \"" + model_type + "\")",
              "; supported: ", join(supported));
}

ConfigPtr parse_model_config(const std::string& json_text, const std::string& what) {
  return family_for_config(json_text, what).parse_config(json_text, what);
}

ConfigPtr load_model_config(const std::string& config_json_path) {
  return parse_model_config(read_text(config_json_path), config_json_path);
}

ConfigPtr find_preset(const std::string& name) {
  if (const auto colon = name.find(':'); colon != std::string::npos) {
    const Family& f = family_named(name.substr(0, colon));
    return f.preset(name.substr(colon + 1));
  }
  // A bare name is the first registered family's that has it (GPT-2 first: tessel's default).
  for (const Family* f : families())
    for (const std::string& p : f->preset_names())
      if (p == name) return f->preset(name);
  TESSEL_FAIL("unknown model preset '", name, "' (presets: ", join(all_preset_names()), ")");
}

bool is_preset(const std::string& name) {
  const auto colon = name.find(':');
  for (const Family* f : families()) {
    if (colon != std::string::npos && f->name() != name.substr(0, colon)) continue;
    const std::string bare = colon == std::string::npos ? name : name.substr(colon + 1);
    for (const std::string& p : f->preset_names())
      if (p == bare) return true;
  }
  return false;
}

std::vector<std::string> all_preset_names() {
  std::vector<std::string> out;
  for (const Family* f : families())
    for (const std::string& p : f->preset_names()) out.push_back(std::string(f->name()) + ":" + p);
  return out;
}

void Family::load_hf(CausalLM& model, const io::SafetensorsCheckpoint& checkpoint) const {
  const HfLayout layout = hf_layout(model, checkpoint);
  autograd::NoGradGuard no_grad;
  std::map<std::string, Tensor> tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace(name, t);
  // Straight into each parameter (SafetensorsCheckpoint::load_into): the weights are held once,
  // with no temporary of a tensor's size beside them, except a transposed tensor's stored bytes
  // (GPT-2's Conv1D weights), read whole and copied transposed.
  const auto check_shape = [&](const std::string& stored_name, const Shape& want,
                               const std::string& name) {
    const Shape& got = checkpoint.entry(stored_name).shape;
    TESSEL_CHECK(got == want, "load ", this->name(), " checkpoint: ", stored_name, " has shape ",
                 got, ", '", name, "' needs ", want);
  };
  for (const auto& [name, stored] : layout.tensors) {
    Tensor& param = tensors.at(name);
    if (!stored.stacked.empty()) {
      TESSEL_CHECK(int64_t(stored.stacked.size()) == param.size(0), "load ", this->name(),
                   " checkpoint: '", name, "' stacks ", param.size(0),
                   " tensors, the layout names ", stored.stacked.size());
      std::vector<int64_t> part;
      for (int d = 1; d < param.ndim(); ++d) part.push_back(param.size(d));
      for (size_t e = 0; e < stored.stacked.size(); ++e) {
        check_shape(stored.stacked[e], Shape(part), name);
        checkpoint.load_into(stored.stacked[e], param.narrow(0, int64_t(e), 1));
      }
      continue;
    }
    if (stored.transposed) {
      const Tensor value = checkpoint.load(stored.name, param.dtype());
      param.copy_from(value.transpose(0, 1));
      continue;
    }
    check_shape(stored.name, param.shape(), name);
    checkpoint.load_into(stored.name, param);
  }
  // A stored copy of a tied tensor is compared a stretch at a time (no second whole tensor).
  constexpr int64_t kCompareElements = int64_t(1) << 18;
  for (const auto& [stored, name] : layout.equal) {
    const Tensor& param = tensors.at(name);
    check_shape(stored, param.shape(), name);
    const auto* mine = static_cast<const uint8_t*>(param.data_ptr());
    for (int64_t k = 0; k < param.numel(); k += kCompareElements) {
      const Tensor part = empty({std::min(kCompareElements, param.numel() - k)}, param.dtype());
      checkpoint.load_into(stored, part, k);
      TESSEL_CHECK(
          std::memcmp(part.data_ptr(), mine + size_t(k) * param.element_size(), part.nbytes()) == 0,
          "load ", this->name(), " checkpoint: ", stored, " differs from ", hf_name(name),
          " but tie_word_embeddings is true");
    }
  }
}

std::shared_ptr<CausalLM> load_model(const std::string& dir) {
  const std::filesystem::path config_path = std::filesystem::path(dir) / "config.json";
  TESSEL_CHECK(std::filesystem::exists(config_path), "load model: ", config_path.string(),
               " not found");
  ConfigPtr config = load_model_config(config_path.string());
  std::shared_ptr<CausalLM> model = config->build_empty();
  // Read, not mapped: the parameters are the one copy of the weights (a mapped file's pages
  // would stay resident beside them until the load ends).
  config->family().load_hf(*model, io::SafetensorsCheckpoint::open(dir, io::SafetensorsLoad::Read));
  model->eval();
  return model;
}

void save_model(const CausalLM& model, const std::string& dir, const SaveOptions& options) {
  save_model_tensors(model, model.model_config().family().to_hf(model), dir, options);
}

void save_model_tensors(const CausalLM& model, const io::NamedTensors& tensors,
                        const std::string& dir, const SaveOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "save model: cannot create the output directory '", dir, "': ", ec.message());
  io::save_safetensors_dir(dir, tensors, options.max_shard_bytes);
  // config.json last, through a temporary name (every write checked, fsynced, renamed), so a
  // directory with a config is complete.
  const std::string json = model.model_config().to_json();
  io::write_file_atomic((std::filesystem::path(dir) / "config.json").string(), json.data(),
                        json.size());
}

}  // namespace tessel::models
