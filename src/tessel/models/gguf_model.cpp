// SPDX-License-Identifier: Apache-2.0
// GGUF models for every family: dispatch on general.architecture, the general.* keys, metadata
// reads with clear errors, and the one tensor-loading loop the families share.
#include "tessel/models/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/io/gguf_vocab_pad.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/models/gguf_expert_stack.h"
#include "tessel/models/gguf_quant_policy.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/moe_experts.h"

namespace tessel::models {

bool is_gguf_model(const std::string& path) {
  return std::filesystem::is_regular_file(path) && io::is_gguf_file(path);
}

const Family& family_for_gguf(const io::GgufFile& file) {
  const std::string arch = file.metadata()
                               .at("general.architecture", file.path())
                               .as_string(file.path() + ": general.architecture");
  std::string known;
  std::set<std::string_view> listed;  // Mixtral shares LLaMA's "llama"
  for (const Family* f : families()) {
    if (f->gguf_architecture() == arch) return *f;
    if (listed.insert(f->gguf_architecture()).second)
      known += (known.empty() ? "" : ", ") + std::string(f->gguf_architecture());
  }
  TESSEL_FAIL(file.path(), ": general.architecture '", arch,
              "' is not supported (supported: ", known, ")");
}

ConfigPtr gguf_model_config(const io::GgufFile& file) {
  ConfigPtr config = family_for_gguf(file).config_from_gguf(file);
  config->validate();
  return config;
}

std::shared_ptr<CausalLM> load_gguf_model(const std::string& path, GgufWeights weights) {
  const io::GgufFile file = io::GgufFile::open(path);
  ConfigPtr config = gguf_model_config(file);
  std::shared_ptr<CausalLM> model = config->build_empty();
  config->family().load_gguf(*model, file);
  if (weights == GgufWeights::Dequantized) {
    for (auto& [name, module] : model->named_modules()) {
      if (auto* linear = dynamic_cast<nn::Linear*>(module)) linear->dequantize();
      if (auto* embedding = dynamic_cast<nn::Embedding*>(module)) embedding->dequantize();
      if (auto* experts = dynamic_cast<nn::ExpertMLPs*>(module)) experts->dequantize();
    }
  }
  model->eval();
  return model;
}

bool is_quantized_model(CausalLM& model) {
  for (auto& [name, module] : model.named_modules()) {
    if (auto* linear = dynamic_cast<nn::Linear*>(module); linear && linear->quant_type())
      return true;
    if (auto* embedding = dynamic_cast<nn::Embedding*>(module);
        embedding && embedding->quant_type())
      return true;
    if (auto* experts = dynamic_cast<nn::ExpertMLPs*>(module); experts && experts->quantized())
      return true;
  }
  return false;
}

ConfigPtr load_model_source_config(const std::string& model) {
  if (is_gguf_model(model))  // the header alone: nothing of the file mapped
    return gguf_model_config(io::GgufFile::open(model, io::GgufMapping::Windows));
  return load_model_config((std::filesystem::path(model) / "config.json").string());
}

std::shared_ptr<CausalLM> load_model_source(const std::string& model, GgufWeights weights) {
  return is_gguf_model(model) ? load_gguf_model(model, weights) : load_model(model);
}

io::GgufMetadata gguf_model_metadata(const CausalLM& model, const std::string& name,
                                     uint32_t file_type) {
  const ModelConfig& config = model.model_config();
  io::GgufMetadata m;
  m.set("general.architecture",
        io::GgufValue::of_string(std::string(config.family().gguf_architecture())));
  m.set("general.name", io::GgufValue::of_string(name));
  m.set("general.alignment", io::GgufValue::of_u32(io::kGgufDefaultAlignment));
  m.set("general.file_type", io::GgufValue::of_u32(file_type));
  config.family().config_to_gguf(config, m);
  return m;
}

int64_t gguf_int(const io::GgufFile& file, const std::string& key) {
  return file.metadata().at(key, file.path()).as_int(file.path() + ": " + key);
}

std::optional<int64_t> gguf_optional_int(const io::GgufFile& file, const std::string& key) {
  if (!file.metadata().contains(key)) return std::nullopt;
  return gguf_int(file, key);
}

double gguf_float(const io::GgufFile& file, const std::string& key, double fallback) {
  const io::GgufValue* v = file.metadata().find(key);
  return v ? v->as_double(file.path() + ": " + key) : fallback;
}

std::optional<int64_t> gguf_token_id(const io::GgufFile& file, const char* which) {
  return gguf_optional_int(file, std::string("tokenizer.ggml.") + which + "_token_id");
}

bool is_expert_stack(const std::string& leaf) {
  return leaf == "gate_proj" || leaf == "up_proj" || leaf == "down_proj" || leaf == "fc_weight" ||
         leaf == "proj_weight";
}

Tensor gguf_blocks_view(const io::GgufFile& file, const std::shared_ptr<const io::GgufFile>& keep,
                        const std::string& stored, int64_t experts, int64_t first, int64_t count) {
  return gguf_blocks_view(file, keep, GgufStored{stored, 0, {}}, experts, first, count);
}

Tensor gguf_blocks_view(const io::GgufFile& file, const std::shared_ptr<const io::GgufFile>& keep,
                        const GgufStored& stored, int64_t experts, int64_t first, int64_t count) {
  const io::GgufTensorInfo info = gguf_stored_info(file, stored);
  const Shape shape = info.shape();
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = DType::I8;
  impl->name = stored.name;
  if (experts == 0) {  // a matrix: [rows, row bytes]
    const std::span<const uint8_t> raw = file.raw(stored.name);
    impl->storage = std::make_shared<Storage>(const_cast<uint8_t*>(raw.data()), raw.size(),
                                              Device::cpu(), [keep](void*) {});
    impl->shape = Shape({shape[0], int64_t(raw.size()) / shape[0]});
    return Tensor(std::move(impl));
  }
  // A stack [experts, rows, row bytes]: experts [first, first + count) are one byte range.
  const int64_t n = count < 0 ? experts - first : count;
  TESSEL_CHECK(
      shape.ndim() == 3 && shape[0] == experts && first >= 0 && n >= 0 && first + n <= experts,
      file.path(), ": GGUF tensor ", stored.name, " ", shape, " is not a stack of ", experts,
      " experts holding [", first, ", ", first + n, ")");
  // Only this byte range is mapped when the file maps windows (an expert-parallel rank's address
  // space holds its own experts, not the whole stack). A stack kept one tensor per expert is a
  // view of one expert's tensor, or a copy of several (gguf_expert_stack.h).
  const int64_t expert_bytes = int64_t(info.nbytes) / experts;
  const io::GgufBytes range =
      gguf_stored_bytes(file, stored, uint64_t(first * expert_bytes), uint64_t(n * expert_bytes));
  impl->storage =
      std::make_shared<Storage>(const_cast<uint8_t*>(range.bytes.data()), range.bytes.size(),
                                Device::cpu(), [keep, window = range.keep](void*) {});
  impl->shape = Shape({n, shape[1], expert_bytes / shape[1]});
  return Tensor(std::move(impl));
}

void load_gguf_tensors(CausalLM& model, const io::GgufFile& file, const std::string& context,
                       const std::function<std::string(const std::string&)>& gguf_name,
                       const std::function<Tensor(const std::string&, const Tensor&)>& to_tessel,
                       const std::set<std::string>& skip) {
  io::NamedTensors state;
  std::set<std::string> wanted;
  std::vector<std::string> missing, unexpected, mismatched;
  std::map<std::string, nn::Module*> modules;
  for (auto& [module_name, module] : model.named_modules()) modules[module_name] = module;
  std::shared_ptr<const io::GgufFile> keep;  // keeps the mapping alive under the block views
  for (auto& [name, t] : model.state_dict()) {
    // The tensor itself, or a stack's experts' tensors (gguf_expert_stack.h).
    const std::optional<GgufStored> where =
        find_gguf_stored(file, gguf_name(name), t.shape(), wanted, missing, mismatched);
    if (!where) continue;
    const std::string& stored = where->name;
    const io::GgufTensorInfo info = gguf_stored_info(file, *where);
    // A Linear or Embedding matrix in a GGUF weight format (the quantized ones, and F16 / BF16,
    // which quant_matmul reads as they are) stays as its blocks: a view of the mapping (to_tessel
    // only reorders whole rows, which for LLaMA's q / k is a copy of those blocks, still in their
    // format). So does a mixture of experts' stacked weight (blk.N.ffn_*_exps, or its experts'
    // tensors copied together), multiplied in place by the quantized grouped product. Any other
    // quantized tensor is dequantized to the parameter's dtype here; F32 and other float tensors
    // load as before.
    const size_t dot = name.rfind('.');
    nn::Module* owner = dot == std::string::npos ? nullptr : modules[name.substr(0, dot)];
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    const bool is_weight = leaf == "weight";
    auto* linear = is_weight ? dynamic_cast<nn::Linear*>(owner) : nullptr;
    auto* embedding = is_weight ? dynamic_cast<nn::Embedding*>(owner) : nullptr;
    const bool blocks_format = kernels::quant::is_ggml_type_supported(info.type);
    const bool quantized = blocks_format && !io::dtype_of_ggml(info.type);
    if (auto* experts = dynamic_cast<nn::ExpertMLPs*>(owner);
        experts && blocks_format && info.dims.size() == 3 && is_expert_stack(leaf)) {
      if (!keep) keep = std::make_shared<const io::GgufFile>(file);
      const auto type = kernels::quant::quant_type_from_ggml(info.type);
      experts->set_quantized(leaf, type, gguf_blocks_view(file, keep, *where, info.shape()[0]));
      continue;
    }
    if (quantized && !linear && !embedding) {
      const Tensor value =
          kernels::quant::dequantize(kernels::quant::quant_type_from_ggml(info.type),
                                     gguf_stored_bytes(file, *where).bytes, info.shape())
              .to(t.dtype());
      state.emplace_back(name, to_tessel ? to_tessel(name, value) : value);
      continue;
    }
    if (quantized || (blocks_format && info.dims.size() == 2 && (linear || embedding))) {
      if (!keep) keep = std::make_shared<const io::GgufFile>(file);
      Tensor blocks = gguf_blocks_view(file, keep, stored, 0);
      if (to_tessel) blocks = to_tessel(name, blocks);
      const auto type = kernels::quant::quant_type_from_ggml(info.type);
      if (linear)
        linear->set_quantized(type, blocks);
      else
        embedding->set_quantized(type, blocks);
      continue;
    }
    Tensor value = gguf_stored_load(file, *where, t.dtype());
    state.emplace_back(name, to_tessel ? to_tessel(name, value) : value);
  }
  for (const io::GgufTensorInfo& info : file.tensors()) {
    if (!wanted.count(info.name) && !skip.count(info.name)) {
      std::ostringstream s;
      s << info.name << " " << info.shape();
      unexpected.push_back(s.str());
    }
  }
  nn::check_state_names(context + " " + file.path(), missing, unexpected, mismatched);
  // Names are checked above; the quantized weights were bound in place, so they are not in `state`.
  model.load_state_dict(state, /*strict=*/false);
}

bool gguf_same_bytes(const io::GgufFile& file, const std::string& a, const std::string& b) {
  const uint64_t n = file.info(a).nbytes;
  if (file.info(a).type != file.info(b).type || n != file.info(b).nbytes) return false;
  // In pieces, so a file opened for windows maps neither tensor (a rank reading the config of a
  // GPT-2 would otherwise hold both vocabulary matrices in its address space).
  std::vector<uint8_t> pa(std::min<uint64_t>(n, 1 << 16)), pb(pa.size());
  for (uint64_t at = 0; at < n; at += pa.size()) {
    const size_t k = size_t(std::min<uint64_t>(pa.size(), n - at));
    file.read(a, at, pa.data(), k);
    file.read(b, at, pb.data(), k);
    if (std::memcmp(pa.data(), pb.data(), k) != 0) return false;
  }
  return true;
}

}  // namespace tessel::models

namespace tessel::models {

namespace {

// llama.cpp's general.file_type numbers for the whole-file types tessel writes.
constexpr uint32_t kFileTypeF32 = 0, kFileTypeF16 = 1, kFileTypeBF16 = 32;

struct ExportType {
  DType dtype;  // of the matrices (a quantized export: of those it keeps as floats)
  uint32_t file_type;
  bool quantized = false;
};

// The extension point for quantized exports: each --type maps to how the matrices are stored.
ExportType export_type(const std::string& type) {
  if (type == "f32") return {DType::F32, kFileTypeF32};
  if (type == "f16") return {DType::F16, kFileTypeF16};
  if (type == "bf16") return {DType::BF16, kFileTypeBF16};
  if (auto file_type = gguf_quant_file_type(type)) return {DType::F16, *file_type, true};
  std::string known;
  for (const std::string& t : gguf_export_types()) known += (known.empty() ? "" : ", ") + t;
  TESSEL_FAIL("GGUF export: unknown --type '", type, "' (", known, ")");
}

}  // namespace

const std::vector<std::string>& gguf_export_types() {
  static const std::vector<std::string> types = {"f32",  "f16",    "bf16",  "q8_0",
                                                 "q4_0", "q4_k_m", "q5_k_m"};
  return types;
}

void check_gguf_export_type(const std::string& type) {
  export_type(type);
}

void save_gguf_model(const CausalLM& model, const std::string& path,
                     const GgufExportOptions& options,
                     const std::function<void(const GgufTensorReport&)>& on_tensor) {
  const ExportType type = export_type(options.type);
  const ModelConfig& config = model.model_config();
  io::GgufMetadata metadata = gguf_model_metadata(model, options.name, type.file_type);
  // The config's special ids, unless the tokenizer (below) gives its own.
  if (auto id = config.bos_id())
    metadata.set("tokenizer.ggml.bos_token_id", io::GgufValue::of_u32(uint32_t(*id)));
  if (auto id = config.eos_id())
    metadata.set("tokenizer.ggml.eos_token_id", io::GgufValue::of_u32(uint32_t(*id)));
  if (options.tokenizer) options.tokenizer->to_gguf(metadata);
  // GGUF readers size the vocabulary by the token list: one placeholder per extra embedding row.
  io::pad_gguf_vocabulary(metadata, config.vocabulary_size());

  if (type.quantized)
    metadata.set("general.quantization_version", io::GgufValue::of_u32(kGgufQuantizationVersion));

  const io::NamedTensors tensors = config.family().to_gguf(model);
  int64_t n_blocks = 0;
  for (const auto& [name, t] : tensors) {
    TESSEL_CHECK(dtype_is_float(t.dtype()), "GGUF export: tensor ", name, " is ",
                 dtype_name(t.dtype()),
                 " (a quantized model's blocks); load the model with its weights dequantized");
    if (name.rfind("blk.", 0) == 0)
      n_blocks = std::max<int64_t>(n_blocks, std::stoll(name.substr(4)) + 1);
  }
  const bool tied_head = !model.head_tied_parameters().empty();
  std::vector<io::GgufTensorOut> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    GgufQuantChoice choice;
    if (type.quantized)
      choice = gguf_quant_choice(options.type, name, t.ndim(), t.ndim() ? t.size(-1) : 0, n_blocks,
                                 tied_head);
    DType dtype = t.ndim() >= 2 ? type.dtype : DType::F32;
    // A quantized export keeps 1-D tensors and the position embedding F32, misfit rows F16.
    if (type.quantized && choice.note.empty()) dtype = DType::F32;
    Tensor stored;
    if (choice.type) {
      const Tensor values = t.to(DType::F32);
      const int64_t cols = t.size(-1), rows = t.numel() / cols;
      io::GgufTensorOut q;
      q.name = name;
      for (int d = t.ndim() - 1; d >= 0; --d) q.dims.push_back(uint64_t(t.size(d)));
      q.type = uint32_t(*choice.type);
      q.bytes = kernels::quant::quantize_rows(*choice.type, values.data<float>(), rows, cols);
      if (on_tensor) stored = kernels::quant::dequantize(*choice.type, q.bytes, t.shape());
      out.push_back(std::move(q));
    } else {
      stored = t.dtype() == dtype ? t : t.to(dtype);
      out.push_back(io::GgufTensorOut::from_tensor(name, stored));
    }
    if (on_tensor) {
      GgufTensorReport r;
      r.note = choice.note;
      r.index = i + 1;
      r.count = tensors.size();
      r.name = name;
      r.shape = t.shape();
      r.type = io::ggml_type_name(out.back().type);
      const Tensor a = t.to(DType::F32), b = stored.to(DType::F32);
      const float *pa = a.data<float>(), *pb = b.data<float>();
      double diff2 = 0, norm2 = 0;
      for (int64_t k = 0; k < a.numel(); ++k) {
        const double d = double(pb[k]) - double(pa[k]);
        r.max_abs_error = std::max(r.max_abs_error, std::abs(d));
        diff2 += d * d;
        norm2 += double(pa[k]) * double(pa[k]);
      }
      r.rel_rms_error = norm2 > 0 ? std::sqrt(diff2 / norm2) : 0.0;
      on_tensor(r);
    }
  }
  io::save_gguf(path, metadata, out);
}

}  // namespace tessel::models
