// SPDX-License-Identifier: Apache-2.0
// Loading a GGUF file into this rank's tensor-parallel share (model_tp_load_gguf.h).
#include "tessel/train/model_tp_load_gguf.h"

#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_expert_stack.h"
#include "tessel/models/gguf_layout.h"
#include "tessel/models/gguf_model.h"
#include "tessel/nn/init.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/moe_experts.h"
#include "tessel/sharding/shard_layout.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/model_expert_pieces.h"

namespace tessel::train {

namespace {

namespace quant = kernels::quant;

// A row-parallel split must cut every row between whole blocks. Checked for every rank's range on
// every rank, so all of them refuse the file with the same Error instead of some waiting for the
// others at the first collective.
void check_block_split(const std::string& stored, quant::QuantType type,
                       const sharding::ShardLayout& spec, int n, const std::string& parallelism) {
  const int64_t block = quant::block_elements(type);
  for (int r = 0; r < n; ++r) {
    for (const auto& [start, len] : sharding::shard_ranges(spec, n, r)) {
      const int64_t bad = start % block != 0           ? start
                          : (start + len) % block != 0 ? start + len
                                                       : -1;
      TESSEL_CHECK(bad < 0, parallelism, ": GGUF tensor ", stored, " (",
                   quant::quant_type_name(type), ", rows of ", spec.full, " weights in blocks of ",
                   block, ") is row-parallel, and tp = ", n, " splits its rows at weight ", bad,
                   ", inside a block: every rank's columns must be whole blocks (", spec.full,
                   " / tp in multiples of ", block,
                   "); use a tp that splits it so, or a file whose matrices have smaller blocks");
    }
  }
}

struct Stats {
  int64_t bytes = 0, views = 0, copies = 0;
};

// This rank's piece of a matrix kept as GGUF blocks, bound to its Linear or Embedding. The file
// is open for windows: a view maps only the rows it keeps, and a copy maps the tensor for as long
// as it copies (the window is unmapped when `whole` goes).
void bind_blocks(nn::Module& owner, const io::GgufFile& file, const models::GgufStored& stored,
                 const sharding::LocalLayout& placement, const Shape& local, Stats& stats) {
  const io::GgufTensorInfo& info = file.info(stored.name);
  const quant::QuantType type = quant::quant_type_from_ggml(info.type);
  const int64_t rows = info.shape()[0], cols = info.shape()[1];
  const int64_t row_bytes = quant::row_bytes(type, cols);
  // The local rows' stored rows (-1: vocabulary padding), and the columns this rank holds.
  std::vector<int64_t> from(size_t(local[0]), -1);
  int64_t col0 = 0, ncols = cols;
  if (placement.dim == 1) {
    col0 = placement.segments.at(0).global_start;
    ncols = placement.segments.at(0).length;
    for (int64_t i = 0; i < rows; ++i) from[size_t(i)] = i;
  } else {
    for (const sharding::Segment& s : placement.segments)
      for (int64_t k = 0; k < s.length; ++k) from[size_t(s.local_start + k)] = s.global_start + k;
  }
  for (int64_t& r : from)
    if (r >= 0) r = models::gguf_stored_row(r, rows, stored.rope_heads);
  const int64_t first_byte = col0 / quant::block_elements(type) * quant::block_bytes(type);
  const int64_t piece_bytes = quant::row_bytes(type, ncols);
  bool consecutive = piece_bytes == row_bytes && !from.empty();
  for (size_t i = 0; consecutive && i < from.size(); ++i)
    consecutive = from[i] >= 0 && from[i] == from[0] + int64_t(i);
  Tensor blocks;
  if (consecutive) {
    // Whole rows in file order: a mapping of those rows alone, kept alive by the view.
    const io::GgufBytes rows_mapped =
        file.map(stored.name, uint64_t(from[0] * row_bytes), from.size() * uint64_t(row_bytes));
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(const_cast<uint8_t*>(rows_mapped.bytes.data()),
                                              rows_mapped.bytes.size(), Device::cpu(),
                                              [keep = rows_mapped.keep](void*) {});
    impl->shape = Shape({local[0], row_bytes});
    impl->dtype = DType::I8;
    impl->name = stored.name;
    blocks = Tensor(std::move(impl));
    ++stats.views;
  } else {
    blocks = empty({local[0], piece_bytes}, DType::I8);
    auto* out = static_cast<uint8_t*>(blocks.data_ptr());
    const io::GgufBytes whole = file.map(stored.name);
    const std::span<const uint8_t> raw = whole.bytes;
    for (size_t i = 0; i < from.size(); ++i) {
      uint8_t* dst = out + i * size_t(piece_bytes);
      if (from[i] < 0)
        std::memset(dst, 0, size_t(piece_bytes));  // zero blocks dequantize to zeros
      else
        std::memcpy(dst, raw.data() + from[i] * row_bytes + first_byte, size_t(piece_bytes));
    }
    ++stats.copies;
  }
  stats.bytes += int64_t(blocks.nbytes());
  if (auto* linear = dynamic_cast<nn::Linear*>(&owner))
    linear->set_quantized(type, blocks);
  else
    dynamic_cast<nn::Embedding&>(owner).set_quantized(type, blocks);
}

// Regions of the tensors read as floats (F32, or F16 / BF16 widened), rows reordered where the
// layout says. A tensor in a quantized format that no Linear or Embedding keeps as blocks (a Q8_0
// norm weight or bias) is dequantized whole first, as the one-process loader dequantizes it
// (models/gguf_model.cpp), so every rank's region holds one process's values.
RegionSource float_regions(const io::GgufFile& file, const models::GgufLayout& layout,
                           const std::string& parallelism, Stats& stats) {
  return [&file, &layout, &parallelism, &stats](const std::string& name, const PieceRegion& region,
                                                float* dst) {
    const models::GgufStored& stored = layout.tensors.at(name);
    const io::GgufTensorInfo info = models::gguf_stored_info(file, stored);
    const bool quantized =
        quant::is_ggml_type_supported(info.type) && !io::dtype_of_ggml(info.type);
    const std::optional<DType> dtype = quantized ? DType::F32 : io::dtype_of_ggml(info.type);
    TESSEL_CHECK(dtype && dtype_is_float(*dtype), parallelism, ": GGUF tensor ", stored.name,
                 " is ", io::ggml_type_name(info.type),
                 ", which only a Linear or Embedding weight ", "may be under ", parallelism);
    const Shape shape = info.shape();
    check_region(name, shape, region);
    const int64_t rows = shape.ndim() > 0 ? shape[0] : 1, row_len = shape.numel() / rows;
    const size_t size = dtype_size(*dtype);
    // Unmapped after this region (an expert stack kept one tensor per expert: a copy).
    const io::GgufBytes mapped = models::gguf_stored_bytes(file, stored);
    const Tensor dequantized =
        quantized ? quant::dequantize(quant::quant_type_from_ggml(info.type), mapped.bytes, shape)
                  : Tensor();
    const uint8_t* raw =
        quantized ? static_cast<const uint8_t*>(dequantized.data_ptr()) : mapped.bytes.data();
    for_each_run(shape, region, [&](int64_t global, int64_t n, int64_t at) {
      while (n > 0) {  // a piece of one row at a time: rows may be stored in another order
        const int64_t row = global / row_len, col = global % row_len;
        const int64_t k = std::min(n, row_len - col);
        const int64_t from = models::gguf_stored_row(row, rows, stored.rope_heads) * row_len + col;
        convert_elements(raw + size_t(from) * size, *dtype, dst + at, DType::F32, size_t(k));
        if (!quantized) stats.bytes += k * int64_t(size);
        global += k;
        at += k;
        n -= k;
      }
    });
    if (quantized) stats.bytes += int64_t(mapped.bytes.size());  // the blocks read
  };
}

}  // namespace

Tensor gguf_expert_stack_piece(const io::GgufFile& file, const models::GgufStored& stored,
                               kernels::quant::QuantType type, const Shape& whole, int64_t e0,
                               int64_t experts, int dim, int64_t f0, int64_t f) {
  const int64_t out = whole[1], in = whole[2];
  const int64_t row_bytes = quant::row_bytes(type, in);
  Tensor piece;
  if (dim == 1) {
    piece = empty({experts, f, row_bytes}, DType::I8);
    auto* dst = static_cast<uint8_t*>(piece.data_ptr());
    for (int64_t e = 0; e < experts; ++e)
      models::gguf_stored_read(file, stored, uint64_t(((e0 + e) * out + f0) * row_bytes),
                               dst + e * f * row_bytes, size_t(f * row_bytes));
  } else {
    const int64_t first = f0 / quant::block_elements(type) * quant::block_bytes(type);
    const int64_t bytes = quant::row_bytes(type, f);
    piece = empty({experts, out, bytes}, DType::I8);
    auto* dst = static_cast<uint8_t*>(piece.data_ptr());
    for (int64_t r = 0; r < experts * out; ++r)
      models::gguf_stored_read(file, stored, uint64_t((e0 * out + r) * row_bytes + first),
                               dst + r * bytes, size_t(bytes));
  }
  return piece;
}

TpGgufLoaded load_gguf_model_tp(const std::string& path, const dist::CommPtr& tp,
                                const std::function<void(const std::string&)>& note,
                                const std::function<bool(const std::string&)>& keep,
                                const std::string& parallelism_name) {
  // Windows: the rank maps the byte ranges it reads, never the whole file (docs/SERVING.md).
  auto file =
      std::make_shared<const io::GgufFile>(io::GgufFile::open(path, io::GgufMapping::Windows));
  const models::ConfigPtr config = models::gguf_model_config(*file);
  if (tp) (void)models::inference_tensor_parallel(*config, tp->size());
  TpGgufLoaded out;
  {
    // Built shape-only (tensor/unallocated.h: no bytes, no address space) and cut without copying
    // values, so the cut's pieces are shape-only too: a rank allocates only the f32 tensors it
    // reads, below, and binds its matrices to blocks; the whole model's f32 tensors are never
    // allocated, not even untouched (their address space would count in VmPeak: a pipeline
    // stage's rank held every other stage's too).
    nn::init::InitRecord unused;
    nn::init::DeferInit defer(unused);
    out.model = config->build_empty();
  }
  // What the errors name: the layout in use (a stage filter is a pipeline stage's, header).
  const std::string parallelism = !parallelism_name.empty() ? parallelism_name
                                  : !keep                   ? "tensor parallelism"
                                  : tp                      ? "pipeline and tensor parallelism"
                                                            : "pipeline parallelism";
  // The layout names the whole model's tensors, so it is taken before the cut. Its refusals (a
  // family without one, a file that does not match it) say which layout asked.
  const models::GgufLayout layout = [&] {
    try {
      return config->family().gguf_layout(*out.model, *file);
    } catch (const Error& e) {
      throw Error(parallelism + ": " + e.what(), e.where());
    }
  }();
  if (tp)
    out.tp = std::make_shared<ModelTensorParallel>(
        parallelize_model(*out.model, tp, "", false, note, /*copy_values=*/false));
  // The dense plan leaves MoE layers whole; each expert's FFN columns are split over tp here.
  out.pieces = split_experts_over_tp(*out.model, tp);
  const ExpertPieces& pieces = out.pieces;
  std::map<std::string, nn::Module*> modules;
  for (auto& [name, module] : out.model->named_modules()) modules[name] = module;
  // Which matrices stay blocks: load_gguf_tensors' rule (a Linear or Embedding weight in a block
  // format: the quantized types, and F16 / BF16 matrices).
  auto block_owner = [&](const std::string& name, const io::GgufTensorInfo& info) -> nn::Module* {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || name.substr(dot + 1) != "weight") return nullptr;
    nn::Module* owner = modules[name.substr(0, dot)];
    if (!dynamic_cast<nn::Linear*>(owner) && !dynamic_cast<nn::Embedding*>(owner)) return nullptr;
    const bool blocks_format = quant::is_ggml_type_supported(info.type);
    const bool quantized = blocks_format && !io::dtype_of_ggml(info.type);
    return quantized || (blocks_format && info.dims.size() == 2) ? owner : nullptr;
  };
  const int n = tp ? tp->size() : 1;
  const auto spec_of = [&](const std::string& name) -> const sharding::ShardLayout* {
    return out.tp ? out.tp->result.spec(name) : nullptr;
  };
  // Refusals first, the same on every rank.
  for (const auto& [name, param] : out.model->named_parameters()) {
    const models::GgufStored& stored = layout.tensors.at(name);
    const io::GgufTensorInfo info = models::gguf_stored_info(*file, stored);
    const sharding::ShardLayout* spec = spec_of(name);
    if (spec && spec->dim == 1 && block_owner(name, info))
      check_block_split(stored.name, quant::quant_type_from_ggml(info.type), *spec, n,
                        keep ? "tensor parallelism within a pipeline stage" : "tensor parallelism");
    // An expert stack's down/proj columns, split inside each row, must be whole blocks too.
    const auto piece = pieces.ffn.find(name);
    if (piece != pieces.ffn.end() && piece->second.dim == 2 && info.dims.size() == 3 &&
        quant::is_ggml_type_supported(info.type))
      check_block_split(stored.name, quant::quant_type_from_ggml(info.type), piece->second, n,
                        "tensor parallelism");
  }
  Stats stats;
  const RegionSource floats = float_regions(*file, layout, parallelism, stats);
  autograd::NoGradGuard no_grad;
  size_t loaded = 0;
  for (const auto& [name, param] : out.model->named_parameters()) {
    const models::GgufStored& stored = layout.tensors.at(name);
    const io::GgufTensorInfo info = models::gguf_stored_info(*file, stored);
    const sharding::ShardLayout* spec = spec_of(name);
    const sharding::LocalLayout placement = pieces.placement(out.tp.get(), name, param.shape());
    ++loaded;
    if (keep && !keep(name)) continue;  // another pipeline stage's
    if (const size_t dot = name.rfind('.'); !spec && dot != std::string::npos) {
      // A mixture of experts' stack in a block format, not split by tp: a view of the mapping,
      // multiplied in place by the quantized grouped product.
      auto* experts = dynamic_cast<nn::ExpertMLPs*>(modules[name.substr(0, dot)]);
      const std::string leaf = name.substr(dot + 1);
      if (experts && quant::is_ggml_type_supported(info.type) && info.dims.size() == 3 &&
          models::is_expert_stack(leaf)) {
        const quant::QuantType type = quant::quant_type_from_ggml(info.type);
        if (const auto piece = pieces.ffn.find(name); piece != pieces.ffn.end()) {
          // This rank's FFN columns of every expert: a copy of those blocks.
          const bool rows = piece->second.dim == 1;
          const Shape whole = rows ? param.shape().with(1, piece->second.full)
                                   : param.shape().with(2, piece->second.full);
          const Tensor blocks =
              gguf_expert_stack_piece(*file, stored, type, whole, 0, whole[0], piece->second.dim,
                                      experts->first_ffn_column(), experts->ffn_hidden());
          experts->set_quantized(leaf, type, blocks);
          stats.bytes += int64_t(blocks.nbytes());
          ++stats.copies;
          continue;
        }
        const Tensor blocks = models::gguf_blocks_view(*file, file, stored, param.size(0));
        experts->set_quantized(leaf, type, blocks);
        stats.bytes += int64_t(blocks.nbytes());
        ++stats.views;
        continue;
      }
    }
    if (nn::Module* owner = block_owner(name, info)) {
      bind_blocks(*owner, *file, stored, placement, param.shape(), stats);
      continue;
    }
    param.storage().materialize();
    const bool direct = param.dtype() == DType::F32;
    Tensor flat = direct ? param.detach().flatten() : empty({param.numel()}, DType::F32);
    fill_placed(floats, name, placement, param.shape(), 0, param.numel(), flat);
    if (!direct) param.detach().copy_from(flat.reshape(param.shape()));
  }
  TESSEL_CHECK(loaded == layout.tensors.size(), "load GGUF ", path, ": ", loaded,
               " parameters loaded, but the layout names ", layout.tensors.size(),
               " tensors (a buffer in the state_dict?)");
  for (const io::GgufTensorInfo& info : file->tensors()) out.file_bytes += int64_t(info.nbytes);
  out.bytes_read = stats.bytes;
  out.views = stats.views;
  out.copies = stats.copies;
  out.expert_bytes = expert_parameter_bytes(*out.model, keep);
  out.model->eval();
  return out;
}

}  // namespace tessel::train
