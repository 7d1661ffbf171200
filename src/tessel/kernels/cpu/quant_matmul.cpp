// SPDX-License-Identifier: Apache-2.0
// The quantized matmul y[m, n] = x[m, k] W[n, k]^T with W in a GGUF weight format, read in place
// (backend.h; formats in quant/quant_blocks.h). Each task owns a range of output columns (W's rows,
// split over the one pool) and multiplies each weight row with every activation row while the row
// is in L1, so each weight byte is read once per call. Prompts of Q8_0, Q4_0 and the k-quants run
// as register-tiled GEMMs (quant_q8_tiles.h, quant_q4_tiles.h, quant_k_tiles.h), or on AMX-INT8
// tiles where the CPU has them (quant_amx.h, quant_amx_k.h). The Q types and Int8 round the
// activations to int8 per 32-element block and multiply in integers (quant_dot.h); 4- to 6-bit
// codes are unpacked in registers (quant_fused.h), F16 / BF16 rows widened in registers
// (gemm_invariant.h). Every output depends only on its own row of x: the types are batch-invariant.
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/kernels/cpu/gemm_invariant.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cpu/quant_amx.h"
#include "tessel/kernels/cpu/quant_amx_k.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/q4_0_groups.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/row_interleave.h"
#include "tessel/kernels/quant_amx.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/quant_dot.h"
#include "tessel/kernels/cpu/quant_fused.h"
#include "tessel/kernels/cpu/quant_fused_rows.h"
#include "tessel/kernels/cpu/quant_fused_rows512.h"
// After the 512-bit rows, whose helpers it uses.
#include "tessel/kernels/cpu/quant_fused_direct512.h"
#include "tessel/kernels/cpu/quant_k_tiles.h"
#include "tessel/kernels/cpu/quant_k_tiles512.h"
#include "tessel/kernels/cpu/quant_q8_tiles.h"
#include "tessel/kernels/cpu/quant_q8_tiles512.h"
// After quant_q8_tiles.h, whose tile loop it uses.
#include "tessel/kernels/cpu/quant_q4_tiles.h"
// After quant_dot.h and the 512-bit rows, whose helpers it uses.
#include "tessel/kernels/cpu/quant_q8_rows512.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

using quant::QuantType;

// Bytes of W per task at least: below this the fork/join costs more than the rows.
constexpr int64_t kTaskBytes = int64_t(1) << 16;

using DotRow = float (*)(const int8_t*, const float*, const int8_t*, const float*, int64_t);

// Q8_0 / k-quant decode rows (m < 4) keep the faster VNNI rows unless batch-invariant mode needs
// the tiles' order (their few_rows) for every m. Q4_0's few_rows are the faster ones.
[[maybe_unused]] bool amx_takes(int64_t m) {
  return quant_amx_enabled() && (m >= 4 || batch_invariant());
}

// This set's byte dot product on this CPU (kernel_set.h).
[[maybe_unused]] QuantDot set_dot() {
  return quant_dot_for(KernelSet(TESSEL_KERNEL_ISA_LEVEL));
}

// The Int8-row dot product this set and CPU run.
DotRow choose_dot_row() {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (set_dot() == QuantDot::Avx512Vnni) return cpu::dot_row_vnni<false>;
#endif
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  if (set_dot() == QuantDot::AvxVnni) return cpu::dot_row_avx2<false, cpu::dot32_avxvnni>;
  return cpu::dot_row_avx2<false>;
#else
  return cpu::dot_row_scalar;
#endif
}

cpu::QuantizedRows quantize_activations(const QuantMatmulShape& s, const float* x) {
  const int64_t blocks = s.k / cpu::kActBlock;
  cpu::QuantizedRows act;
  act.q.resize(size_t(s.m * s.k));
  act.d.resize(size_t(s.m * blocks));
  for (int64_t i = 0; i < s.m; ++i)
    cpu::quantize_activation_row(x + i * s.k, s.k, act.q.data() + i * s.k,
                                 act.d.data() + i * blocks);
  return act;
}

int64_t task_grain(const QuantMatmulShape& s) {
  return std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(s.row_bytes, 1));
}

// Each activation row's per-block sums: the formats' zero points, once per output, not per code.
struct BlockSums {
  std::vector<float> xs32, xs16;
};

BlockSums activation_sums(const QuantMatmulShape& s, const cpu::QuantizedRows& act) {
  const int64_t blocks = s.k / cpu::kActBlock;
  BlockSums b{std::vector<float>(size_t(s.m * blocks)),
              std::vector<float>(size_t(s.m * 2 * blocks))};
  for (int64_t i = 0; i < s.m; ++i)
    cpu::activation_block_sums(act.q.data() + i * s.k, act.d.data() + i * blocks, s.k,
                               b.xs32.data() + i * blocks, b.xs16.data() + i * 2 * blocks);
  return b;
}

#if TESSEL_KERNEL_ISA_LEVEL >= 1
// The fused rows of a 4- to 6-bit format for a dot product: {kFusedRows rows, one row}.
template <class Dot>
std::array<cpu::FusedRows, 2> fused_rows_for(QuantType type) {
  constexpr int kR = cpu::kFusedRows;
  switch (type) {
    case QuantType::Q4_K:
      return {cpu::q4_k_rows<Dot, false, kR>, cpu::q4_k_rows<Dot, false, 1>};
    case QuantType::Q5_K:
      return {cpu::q4_k_rows<Dot, true, kR>, cpu::q4_k_rows<Dot, true, 1>};
    default:
      return {cpu::q6_k_rows<Dot, kR>, cpu::q6_k_rows<Dot, 1>};
  }
}

#if TESSEL_KERNEL_ISA_LEVEL >= 2
// Q4_K's (kFive false) or Q5_K's 512-bit rows, {kFusedRows rows, one row}, with each chunk's
// nibbles by GFNI where quant_nibbles_gfni (the same bits either way).
template <class Dot, bool kFive>
std::array<cpu::FusedRows, 2> q4_k_rows512_for() {
  constexpr int kR = cpu::kFusedRows;
  if (quant_nibbles_gfni())
    return {cpu::q4_k_rows512<Dot, kFive, kR, true>, cpu::q4_k_rows512<Dot, kFive, 1, true>};
  return {cpu::q4_k_rows512<Dot, kFive, kR>, cpu::q4_k_rows512<Dot, kFive, 1>};
}

// fused_rows_for on 512-bit vectors (quant_fused_rows512.h: equal outputs, half the instructions).
template <class Dot>
std::array<cpu::FusedRows, 2> fused_rows512_for(QuantType type) {
  constexpr int kR = cpu::kFusedRows;
  switch (type) {
    case QuantType::Q4_K:
      return q4_k_rows512_for<Dot, false>();
    case QuantType::Q5_K:
      return q4_k_rows512_for<Dot, true>();
    default:
      return {cpu::q6_k_rows512<Dot, kR>, cpu::q6_k_rows512<Dot, 1>};
  }
}
#endif

// Below this many rows the 512-bit rows work out each super-block's scales where they use them
// (quant_fused_direct512.h), not per weight row beforehand: that pays only while rows are few.
constexpr int64_t kDirectRowsBelow = 4;

#if TESSEL_KERNEL_ISA_LEVEL >= 2
// Q4_K's or Q5_K's direct rows, as q4_k_rows512_for.
template <class Dot, bool kFive>
std::array<cpu::FusedDirect, 2> q4_k_direct512_for() {
  constexpr int kR = cpu::kFusedRows;
  if (quant_nibbles_gfni())
    return {cpu::q4_k_direct512<Dot, kFive, kR, true>, cpu::q4_k_direct512<Dot, kFive, 1, true>};
  return {cpu::q4_k_direct512<Dot, kFive, kR>, cpu::q4_k_direct512<Dot, kFive, 1>};
}

template <class Dot>
std::array<cpu::FusedDirect, 2> fused_direct512_for(QuantType type) {
  constexpr int kR = cpu::kFusedRows;
  switch (type) {
    case QuantType::Q4_K:
      return q4_k_direct512_for<Dot, false>();
    case QuantType::Q5_K:
      return q4_k_direct512_for<Dot, true>();
    default:
      return {cpu::q6_k_direct512<Dot, kR>, cpu::q6_k_direct512<Dot, 1>};
  }
}
#endif

#if TESSEL_KERNEL_ISA_LEVEL == 1
// The avx2 set's direct rows (quant_fused_rows.h: the 256-bit rows with each super-block's
// scales worked out where they are used).
template <class Dot>
std::array<cpu::FusedDirect, 2> fused_direct_for(QuantType type) {
  constexpr int kR = cpu::kFusedRows;
  switch (type) {
    case QuantType::Q4_K:
      return {cpu::q4_k_direct<Dot, false, kR>, cpu::q4_k_direct<Dot, false, 1>};
    case QuantType::Q5_K:
      return {cpu::q4_k_direct<Dot, true, kR>, cpu::q4_k_direct<Dot, true, 1>};
    default:
      return {cpu::q6_k_direct<Dot, kR>, cpu::q6_k_direct<Dot, 1>};
  }
}
#endif

// {kFusedRows rows, one row} of the direct kernels for m < kDirectRowsBelow, else nulls: the
// avx512 set's 512-bit ones, the avx2 set's 256-bit ones.
std::array<cpu::FusedDirect, 2> choose_fused_direct(QuantType type, int64_t m) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (m < kDirectRowsBelow && quant_vector_bits_for(KernelSet::Avx512) == 512)
    return set_dot() == QuantDot::Avx512Vnni ? fused_direct512_for<cpu::Dot512Vnni>(type)
                                             : fused_direct512_for<cpu::Dot512Bw>(type);
#elif TESSEL_KERNEL_ISA_LEVEL == 1
  if (m < kDirectRowsBelow)
    return set_dot() == QuantDot::AvxVnni ? fused_direct_for<cpu::DotAvxVnni>(type)
                                          : fused_direct_for<cpu::DotAvx2>(type);
#endif
  (void)type, (void)m;
  return {nullptr, nullptr};
}

std::array<cpu::FusedRows, 2> choose_fused_rows(QuantType type) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (quant_vector_bits_for(KernelSet::Avx512) == 512)
    return set_dot() == QuantDot::Avx512Vnni ? fused_rows512_for<cpu::Dot512Vnni>(type)
                                             : fused_rows512_for<cpu::Dot512Bw>(type);
  if (set_dot() == QuantDot::Avx512Vnni) return fused_rows_for<cpu::DotVnni>(type);
#endif
  if (set_dot() == QuantDot::AvxVnni) return fused_rows_for<cpu::DotAvxVnni>(type);
  return fused_rows_for<cpu::DotAvx2>(type);
}

#if TESSEL_KERNEL_ISA_LEVEL >= 2
// The decode step runs the 512-bit rows: AVX-512 VNNI on 512-bit vectors.
bool q4_0_decode_rows_512() {
  return set_dot() == QuantDot::Avx512Vnni && quant_vector_bits_for(KernelSet::Avx512) == 512;
}

// Q4_0 (kGrouped: Q4_0x4, quant/q4_0_groups.h) in the avx512 set without AMX: register tiles for
// every m (quant_q4_tiles.h), at m = 1 on the 512-bit decode rows where q4_0_decode_rows_512; the
// same bits in either layout.
template <bool kGrouped>
void q4_0_vector_matmul(const QuantMatmulShape& s, const cpu::QuantizedRows& act, const float* xs32,
                        const uint8_t* w, float* y) {
  const int64_t grain = std::max<int64_t>(1, task_grain(s) / cpu::kQ4TileN);
  if (s.m == 1 && q4_0_decode_rows_512())
    return cpu::q4_0_decode_512<cpu::DotVnni, cpu::Dot512Vnni, kGrouped>(
        s.n, s.k, s.row_bytes, act.q.data(), act.d.data(), xs32, w, y, grain);
  // A prompt on regrouped weights: the decode rows' 512-bit form for several activation rows.
  if (kGrouped && q4_0_decode_rows_512())
    return cpu::q4_0_group_tiles512<cpu::DotVnni, cpu::Dot512Vnni>(
        s.m, s.n, s.k, s.row_bytes, act.q.data(), act.d.data(), xs32, w, y, grain);
  auto run = [&]<class Dot>(Dot) {
    cpu::q4_0_tiles<Dot, kGrouped>(s.m, s.n, s.k, s.row_bytes, act.q.data(), act.d.data(), xs32, w,
                                   y, grain);
  };
  if (set_dot() == QuantDot::Avx512Vnni) return run(cpu::DotVnni{});
  if (set_dot() == QuantDot::AvxVnni) return run(cpu::DotAvxVnni{});
  return run(cpu::DotAvx2{});
}
#endif

// Q4_0: AMX tiles for every m where enabled (quant_amx.cpp); else register tiles for every m in
// the avx512 set (quant_q4_tiles.h; at m = 1 with AVX-512 VNNI its 512-bit decode rows), four
// weight rows at a time in the avx2 set (q4_0_rows), with the same bits.
void q4_0_matmul(const QuantMatmulShape& s, const float* x, const uint8_t* w, float* y) {
  const cpu::QuantizedRows act = quantize_activations(s, x);
  const auto [xs32, xs16] = activation_sums(s, act);
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (quant_amx_enabled())
    return kernels::cpu::q4_0_amx_matmul(s.m, s.n, s.k, s.row_bytes, act.q.data(), act.d.data(), w,
                                         y, std::max<int64_t>(1, task_grain(s) / 16));
  q4_0_vector_matmul<false>(s, act, xs32.data(), w, y);
#else
  const int64_t blocks = s.k / cpu::kActBlock;
  auto run = [&]<class Dot>(Dot) {
    // kQ4Rows weight rows at a time, a remainder one by one: the same bits either way.
    auto rows = [&]<int R>(int64_t j) {
      for (int64_t i = 0; i < s.m; ++i) {
        float out[R];
        cpu::q4_0_rows<Dot, R>(w + j * s.row_bytes, s.row_bytes, act.q.data() + i * s.k,
                               act.d.data() + i * blocks, xs32.data() + i * blocks, blocks, out);
        for (int r = 0; r < R; ++r) y[i * s.n + j + r] = out[r];
      }
    };
    parallel_for(0, s.n, task_grain(s), [&](int64_t lo, int64_t hi) {
      int64_t j = lo;
      for (; j + cpu::kQ4Rows <= hi; j += cpu::kQ4Rows) rows.template operator()<cpu::kQ4Rows>(j);
      for (; j < hi; ++j) rows.template operator()<1>(j);
    });
  };
  if (set_dot() == QuantDot::AvxVnni) return run(cpu::DotAvxVnni{});
  return run(cpu::DotAvx2{});
#endif
}

// A prompt's rows (m >= kKTilesFrom) of Q4_K, Q5_K, Q6_K in register tiles (quant_k_tiles.h): the
// fused rows' bits per output, each block unpacked once per tile instead of once per row.
template <template <class, QuantType> class Tiles, class Dot>
void run_k_tiles(const cpu::KTilesArgs& a) {
  if (a.type == QuantType::Q4_K) return cpu::k_quant_tiles<Tiles<Dot, QuantType::Q4_K>>(a);
  if (a.type == QuantType::Q5_K) return cpu::k_quant_tiles<Tiles<Dot, QuantType::Q5_K>>(a);
  return cpu::k_quant_tiles<Tiles<Dot, QuantType::Q6_K>>(a);
}

void k_quant_tiled(const cpu::KTilesArgs& a) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (quant_vector_bits_for(KernelSet::Avx512) == 512)
    return set_dot() == QuantDot::Avx512Vnni ? run_k_tiles<cpu::KTiles512, cpu::Dot512Vnni>(a)
                                             : run_k_tiles<cpu::KTiles512, cpu::Dot512Bw>(a);
  if (set_dot() == QuantDot::Avx512Vnni) return run_k_tiles<cpu::KTiles256, cpu::DotVnni>(a);
#endif
  if (set_dot() == QuantDot::AvxVnni) return run_k_tiles<cpu::KTiles256, cpu::DotAvxVnni>(a);
  return run_k_tiles<cpu::KTiles256, cpu::DotAvx2>(a);
}

// Q4_K, Q5_K, Q6_K: per group of kFusedRows weight rows their f32 block scales (and offsets),
// per activation row the scales times its dx, then the group's fused pass (quant_fused_rows.h)
// minus the offsets. Whole groups per task, the same operations per row in a group or alone, so
// no output depends on the split, the group or m. `interleaved`: W's whole groups of four rows
// are interleaved by super-block (quant/row_interleave.h), which every kernel here reads in
// place with the same arithmetic, so the outputs are the plain layout's bit for bit.
void fused_matmul(QuantType type, const QuantMatmulShape& s, const float* x, const uint8_t* w,
                  float* y, bool interleaved = false) {
  if (type == QuantType::Q4_0) return q4_0_matmul(s, x, w, y);
  const int64_t blocks = s.k / cpu::kActBlock;
  const int64_t block_bytes = s.row_bytes / (s.k / quant::kKBlock);
  static_assert(cpu::kFusedRows == quant::kInterleaveRows && cpu::kKTileN == cpu::kFusedRows,
                "a kernel's group of rows is an interleaved group");
  const quant::RowStrides plain = quant::plain_strides(s.row_bytes, block_bytes);
  const quant::RowStrides group = interleaved ? quant::interleaved_strides(block_bytes) : plain;
  const cpu::QuantizedRows act = quantize_activations(s, x);
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (amx_takes(s.m))  // AMX-INT8 tiles, in their own f32 order (quant_amx_k.cpp)
    return kernels::cpu::k_quant_amx_matmul(type, s.m, s.n, s.k, s.row_bytes, act.q.data(),
                                            act.d.data(), w, y, task_grain(s) / 16);
#endif
  const bool per16 = type == QuantType::Q6_K;
  const bool mins = type == QuantType::Q4_K || type == QuantType::Q5_K;
  BlockSums sums;
  std::vector<int32_t> zx;
  if (mins) {
    sums = activation_sums(s, act);
  } else {
    zx.resize(size_t(s.m * 8 * blocks));
    for (int64_t i = 0; i < s.m; ++i)
      cpu::zero_point_lanes(act.q.data() + i * s.k, blocks, 32, zx.data() + i * 8 * blocks);
  }
  if (s.m >= cpu::kKTilesFrom)
    return k_quant_tiled({type, s.m, s.n, s.k, s.row_bytes, interleaved, act.q.data(), act.d.data(),
                          mins ? sums.xs32.data() : nullptr, mins ? nullptr : zx.data(), w, y,
                          std::max<int64_t>(1, task_grain(s) / cpu::kKTileN)});
  constexpr int64_t kR = cpu::kFusedRows;
  if (const auto direct = choose_fused_direct(type, s.m); direct[0] != nullptr) {
    // Each task's whole groups in one call per activation row (for m > 1 a few groups at a
    // time, so the other rows find them in cache), the last partial group a row per call; each
    // output written where it goes.
    const int64_t full = s.n / kR, groups = (s.n + kR - 1) / kR;
    const int64_t step = s.m == 1 ? groups : 4;
    parallel_for(0, groups, std::max<int64_t>(1, task_grain(s) / kR), [&](int64_t lo, int64_t hi) {
      for (int64_t g0 = lo; g0 < hi; g0 += step) {
        const int64_t g1 = std::min(hi, g0 + step), whole = std::min(g1, full) - g0;
        for (int64_t i = 0; i < s.m; ++i) {
          const int8_t* xq = act.q.data() + i * s.k;
          const float* dx = act.d.data() + i * blocks;
          const float* xs = mins ? sums.xs32.data() + i * blocks : nullptr;
          const int32_t* zxi = mins ? nullptr : zx.data() + i * 8 * blocks;
          float* yi = y + i * s.n;
          if (whole > 0)
            direct[0](w + g0 * kR * s.row_bytes, group, xq, dx, xs, zxi, blocks, whole,
                      yi + g0 * kR);
          for (int64_t j = std::max(g0, full) * kR; j < std::min(g1 * kR, s.n); ++j)
            direct[1](w + j * s.row_bytes, plain, xq, dx, xs, zxi, blocks, 1, yi + j);
        }
      }
    });
    return;
  }
  const std::array<cpu::FusedRows, 2> rows_fn = choose_fused_rows(type);
  const int64_t per_row = per16 ? 2 * blocks : blocks;
  const int64_t groups = (s.n + kR - 1) / kR;
  parallel_for(0, groups, std::max<int64_t>(1, task_grain(s) / kR), [&](int64_t lo, int64_t hi) {
    cpu::RowScales rs[kR];
    std::vector<float> sdx(size_t(kR * per_row));
    float out[kR];
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t j0 = gj * kR, rows = std::min(kR, s.n - j0);
      const quant::RowStrides st = rows == kR ? group : plain;
      for (int64_t r = 0; r < rows; ++r)
        cpu::row_scales(type, w + j0 * s.row_bytes + r * st.row, s.k, rs[r], st.block);
      for (int64_t i = 0; i < s.m; ++i) {
        const int8_t* xq = act.q.data() + i * s.k;
        const int32_t* zxi = mins ? nullptr : zx.data() + i * 8 * blocks;
        for (int64_t r = 0; r < rows; ++r)
          cpu::scales_times_dx(rs[r], act.d.data() + i * blocks, blocks, sdx.data() + r * per_row);
        if (rows == kR) {
          rows_fn[0](w + j0 * s.row_bytes, st, sdx.data(), per_row, xq, zxi, blocks, out);
        } else {
          for (int64_t r = 0; r < rows; ++r)
            rows_fn[1](w + (j0 + r) * s.row_bytes, plain, sdx.data() + r * per_row, per_row, xq,
                       zxi, blocks, out + r);
        }
        for (int64_t r = 0; r < rows; ++r)
          y[i * s.n + j0 + r] = mins
                                    ? out[r] - cpu::offset_sum(rs[r], sums.xs32.data() + i * blocks,
                                                               sums.xs16.data() + i * 2 * blocks)
                                    : out[r];
      }
    }
  });
}
#else
cpu::FusedRow choose_fused_row(QuantType type) {
  switch (type) {
    case QuantType::Q4_0:
      return cpu::fused_row_scalar<QuantType::Q4_0>;
    case QuantType::Q4_K:
      return cpu::fused_row_scalar<QuantType::Q4_K>;
    case QuantType::Q5_K:
      return cpu::fused_row_scalar<QuantType::Q5_K>;
    default:
      return cpu::fused_row_scalar<QuantType::Q6_K>;
  }
}

// Plain loops: per weight row its f32 block scales and offsets (k/32 or k/16 floats), then per
// activation row the fused integer dot minus the zero points' share. Plain rows only.
void fused_matmul(QuantType type, const QuantMatmulShape& s, const float* x, const uint8_t* w,
                  float* y, bool interleaved = false) {
  TESSEL_CHECK(!interleaved, "quant_matmul: the plain loops read no interleaved rows");
  const int64_t blocks = s.k / cpu::kActBlock;
  const cpu::QuantizedRows act = quantize_activations(s, x);
  const auto [xs32, xs16] = activation_sums(s, act);
  const cpu::FusedRow row_fn = choose_fused_row(type);
  parallel_for(0, s.n, task_grain(s), [&](int64_t lo, int64_t hi) {
    cpu::RowScales rs;
    for (int64_t j = lo; j < hi; ++j) {
      const uint8_t* row = w + j * s.row_bytes;
      cpu::row_scales(type, row, s.k, rs);
      for (int64_t i = 0; i < s.m; ++i) {
        const float v = row_fn(row, rs.scale.data(), act.q.data() + i * s.k,
                               act.d.data() + i * blocks, xs32.data() + i * blocks, blocks);
        y[i * s.n + j] =
            v - cpu::offset_sum(rs, xs32.data() + i * blocks, xs16.data() + i * 2 * blocks);
      }
    }
  });
}
#endif

// Q8_0 rows: q8_0_rows (quant_dot.h) reads each block in place, kQ8Rows rows at a time.
using Q8Rows = void (*)(const uint8_t*, quant::RowStrides, const int8_t*, const float*, int64_t,
                        float*);

std::array<Q8Rows, 2> choose_q8_0_rows() {  // {kQ8Rows rows, one row}
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (set_dot() == QuantDot::Avx512Vnni) {
    // Two rows per 512-bit register: the same bits as the 256-bit rows (quant_q8_rows512.h).
    if (quant_vector_bits_for(KernelSet::Avx512) == 512)
      return {cpu::q8_0_rows_vnni512, cpu::q8_0_rows_vnni<1>};
    return {cpu::q8_0_rows_vnni<cpu::kQ8Rows>, cpu::q8_0_rows_vnni<1>};
  }
#endif
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  if (set_dot() == QuantDot::AvxVnni)
    return {cpu::q8_0_rows_avxvnni<cpu::kQ8Rows>, cpu::q8_0_rows_avxvnni<1>};
  return {cpu::q8_0_rows_avx2<cpu::kQ8Rows>, cpu::q8_0_rows_avx2<1>};
#else
  // Plain rows only (quant_layout asks for no interleaved form here).
  return {
      [](const uint8_t* w, quant::RowStrides st, const int8_t* x, const float* dx, int64_t blocks,
         float* out) { cpu::q8_0_rows_scalar(w, st.row, cpu::kQ8Rows, x, dx, blocks, out); },
      [](const uint8_t* w, quant::RowStrides st, const int8_t* x, const float* dx, int64_t blocks,
         float* out) { cpu::q8_0_rows_scalar(w, st.row, 1, x, dx, blocks, out); }};
#endif
}

#if TESSEL_KERNEL_ISA_LEVEL >= 1
// A prompt's rows (m >= kQ8TilesFrom) in register tiles (quant_q8_tiles.h): the same bits per
// output as the row kernel, each weight block prepared once per tile instead of once per row.
void q8_0_tiled(const QuantMatmulShape& s, const cpu::QuantizedRows& act, const uint8_t* w,
                float* y, bool interleaved) {
  const int64_t grain = std::max<int64_t>(1, task_grain(s) / cpu::kQ8TileN);
  auto run = [&]<class Tiles>(Tiles) {
    cpu::q8_0_tiles<Tiles>(s.m, s.n, s.k, s.row_bytes, interleaved, act.q.data(), act.d.data(), w,
                           y, grain);
  };
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (set_dot() == QuantDot::Avx512Vnni) {
    if (quant_vector_bits_for(KernelSet::Avx512) == 512) return run(cpu::Q8Tiles512{});
    return run(cpu::Q8Tiles256<cpu::Q8PairOffset<cpu::DotVnni>>{});
  }
#endif
  if (set_dot() == QuantDot::AvxVnni)
    return run(cpu::Q8Tiles256<cpu::Q8PairOffset<cpu::DotAvxVnni>>{});
  return run(cpu::Q8Tiles256<cpu::Q8PairSign>{});
}
#endif

// `interleaved`: W's whole groups of four rows interleaved by block (quant/row_interleave.h),
// read in place by the rows and the tiles with the same arithmetic (the plain layout's bits).
void q8_0_matmul(const QuantMatmulShape& s, const float* x, const uint8_t* w, float* y,
                 bool interleaved = false) {
  const int64_t blocks = s.k / cpu::kActBlock;
  static_assert(cpu::kQ8Rows == quant::kInterleaveRows, "a group of rows is an interleaved group");
  const quant::RowStrides plain = quant::plain_strides(s.row_bytes, cpu::kQ8Bytes);
  const quant::RowStrides group = interleaved ? quant::interleaved_strides(cpu::kQ8Bytes) : plain;
  TESSEL_CHECK(TESSEL_KERNEL_ISA_LEVEL >= 1 || !interleaved,
               "quant_matmul: the plain loops read no interleaved rows");
  const cpu::QuantizedRows act = quantize_activations(s, x);
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  // AMX-INT8 tiles (their f32 order is not the row kernel's: quant_amx.cpp).
  if (amx_takes(s.m))
    return kernels::cpu::q8_0_amx_matmul(s.m, s.n, s.k, s.row_bytes, act.q.data(), act.d.data(), w,
                                         y, std::max<int64_t>(1, task_grain(s) / 16));
#endif
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  if (s.m >= cpu::kQ8TilesFrom) return q8_0_tiled(s, act, w, y, interleaved);
#endif
  const std::array<Q8Rows, 2> rows_fn = choose_q8_0_rows();
  constexpr int64_t kR = cpu::kQ8Rows;
  // Whole groups of kR rows per task, so a row's result does not depend on the split.
  const int64_t groups = (s.n + kR - 1) / kR;
  parallel_for(0, groups, std::max<int64_t>(1, task_grain(s) / kR), [&](int64_t lo, int64_t hi) {
    float out[kR];
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t j0 = gj * kR, rows = std::min(kR, s.n - j0);
      for (int64_t i = 0; i < s.m; ++i) {
        const int8_t* xq = act.q.data() + i * s.k;
        const float* dx = act.d.data() + i * blocks;
        if (rows == kR) {
          rows_fn[0](w + j0 * s.row_bytes, group, xq, dx, blocks, out);
        } else {
          for (int64_t r = 0; r < rows; ++r)
            rows_fn[1](w + (j0 + r) * s.row_bytes, plain, xq, dx, blocks, out + r);
        }
        for (int64_t r = 0; r < rows; ++r) y[i * s.n + j0 + r] = out[r];
      }
    }
  });
}

// Int8 rows (quant_format.h: d, then k codes) are read in place, d applied once per output; the
// last k % 32 weights, which no activation block covers, are multiplied in f32 with x as it is.
void int8_row_matmul(const QuantMatmulShape& s, const float* x, const uint8_t* w, float* y) {
  const int64_t blocks = s.k / cpu::kActBlock, covered = blocks * cpu::kActBlock;
  const cpu::QuantizedRows act = quantize_activations(s, x);
  const std::vector<float> unit(size_t(2 * blocks), 1.0f);
  const DotRow dot = choose_dot_row();
  parallel_for(0, s.n, task_grain(s), [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      const uint8_t* row = w + j * s.row_bytes;
      float d;
      std::memcpy(&d, row, sizeof d);
      const auto* q = reinterpret_cast<const int8_t*>(row + quant::kInt8ScaleBytes);
      for (int64_t i = 0; i < s.m; ++i) {
        float v = blocks > 0 ? dot(q, unit.data(), act.q.data() + i * s.k,
                                   act.d.data() + i * blocks, blocks)
                             : 0.0f;
        const float* xi = x + i * s.k;
        for (int64_t c = covered; c < s.k; ++c) v += xi[c] * float(q[c]);
        y[i * s.n + j] = d * v;
      }
    }
  });
}

// F16 / BF16 rows in f32 through the invariant tiles, widened in registers (gemm_invariant.h):
// one fixed-order dot product per output, batch-invariant with the mode on or off.
void half_matmul(QuantType type, const QuantMatmulShape& s, const float* x, const uint8_t* w,
                 float* y) {
  cpu::invariant_matmul_half(s.m, s.n, s.k, x, s.k,
                             type == QuantType::BF16 ? DType::BF16 : DType::F16,
                             reinterpret_cast<const uint16_t*>(w), s.row_bytes / 2, y, s.n);
}

// Q4_0x4: the regrouped kernels in the avx512 set without AMX and in the avx2 set; elsewhere
// (AMX tiles, the plain loops: kernels with no regrouped form) the rows are put back in Q4_0
// order first, a copy of the matrix per call. quant_layout asks for Q4_0x4 only where the
// regrouped decode rows run, so the copy is paid only when the kernels chosen changed after a
// model's matrices were regrouped (a test forcing another set, TESSEL_QUANT_AMX switched).
void q4_0_grouped_matmul(const QuantMatmulShape& s, const float* x, const uint8_t* w, float* y) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (!quant_amx_enabled()) {
    const cpu::QuantizedRows act = quantize_activations(s, x);
    const auto [xs32, xs16] = activation_sums(s, act);
    return q4_0_vector_matmul<true>(s, act, xs32.data(), w, y);
  }
#elif TESSEL_KERNEL_ISA_LEVEL == 1
  // The avx2 set: a group's four rows against each activation row (cpu::q4_0_group_rows), the
  // rows past the last group as q4_0_rows runs them alone; the plain kernel's bits.
  {
    const cpu::QuantizedRows act = quantize_activations(s, x);
    const auto [xs32, xs16] = activation_sums(s, act);
    const int64_t blocks = s.k / cpu::kActBlock, groups = s.n / quant::kQ4GroupRows;
    const int64_t grouped = groups * quant::kQ4GroupRows;
    auto run = [&]<class Dot>(Dot) {
      // Units: the groups, then the plain rows after them.
      parallel_for(0, groups + (s.n - grouped),
                   std::max<int64_t>(1, task_grain(s) / quant::kQ4GroupRows),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t u = lo; u < hi; ++u)
                       for (int64_t i = 0; i < s.m; ++i) {
                         const int8_t* xi = act.q.data() + i * s.k;
                         const float* dx = act.d.data() + i * blocks;
                         const float* xs = xs32.data() + i * blocks;
                         if (u < groups) {
                           float out[quant::kQ4GroupRows];
                           cpu::q4_0_group_rows<Dot>(w + u * quant::kQ4GroupRows * s.row_bytes, xi,
                                                     dx, xs, blocks, out);
                           for (int64_t r = 0; r < quant::kQ4GroupRows; ++r)
                             y[i * s.n + u * quant::kQ4GroupRows + r] = out[r];
                         } else {
                           const int64_t j = grouped + (u - groups);
                           cpu::q4_0_rows<Dot, 1>(w + j * s.row_bytes, s.row_bytes, xi, dx, xs,
                                                  blocks, y + i * s.n + j);
                         }
                       }
                   });
    };
    if (set_dot() == QuantDot::AvxVnni) return run(cpu::DotAvxVnni{});
    return run(cpu::DotAvx2{});
  }
#endif
  std::vector<uint8_t> plain(size_t(s.n * s.row_bytes));
  quant::ungroup_q4_0(w, s.n, s.k, plain.data());
  fused_matmul(QuantType::Q4_0, s, x, plain.data(), y);
}

// The k-quants and Q8_0 interleaved four rows at a time (quant/row_interleave.h): the SIMD sets'
// direct rows, rows and tiles read them in place; the AMX tiles and the plain loops, which have
// no interleaved form, read a copy put back in plain order, made per call. quant_layout asks for
// the interleaved forms only where they are read in place, so the copy is paid only when the
// kernels changed after a model's matrices were interleaved (a test forcing another set, AMX
// switched).
void interleaved_matmul(QuantType type, const QuantMatmulShape& s, const float* x, const uint8_t* w,
                        float* y) {
  const QuantType plain_type = quant::plain_form(type);
  auto run = [&](const uint8_t* rows, bool interleaved) {
    if (plain_type == QuantType::Q8_0) return q8_0_matmul(s, x, rows, y, interleaved);
    fused_matmul(plain_type, s, x, rows, y, interleaved);
  };
  if (TESSEL_KERNEL_ISA_LEVEL >= 1 && !amx_takes(s.m)) return run(w, true);
  std::vector<uint8_t> plain(size_t(s.n * s.row_bytes));
  quant::deinterleave_rows(type, w, s.n, s.k, plain.data());
  run(plain.data(), false);
}

// Whether a type is read faster interleaved here: the SIMD sets without AMX, whose k-quant and
// Q8_0 kernels multiply four weight rows at a time.
bool interleave_pays(QuantType type) {
  const bool four_rows = type == QuantType::Q4_K || type == QuantType::Q5_K ||
                         type == QuantType::Q6_K || type == QuantType::Q8_0;
  return four_rows && TESSEL_KERNEL_ISA_LEVEL >= 1 && !quant_amx_enabled();
}

}  // namespace

quant::QuantType CpuBackend::quant_layout(quant::QuantType type) const {
  if (interleave_pays(type) && quant_backend_layouts()) return quant::interleaved_form(type);
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (type == QuantType::Q4_0 && quant_backend_layouts() && !quant_amx_enabled() &&
      q4_0_decode_rows_512())
    return QuantType::Q4_0x4;
#elif TESSEL_KERNEL_ISA_LEVEL == 1
  if (type == QuantType::Q4_0 && quant_backend_layouts()) return QuantType::Q4_0x4;
#endif
  return type;
}

void CpuBackend::quant_matmul(QuantType type, const Tensor& x, const Tensor& w, Tensor& y) {
  const QuantMatmulShape s = validate_quant_matmul(*this, type, x, w, y);
  float* yp = y.data<float>();
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    std::fill(yp, yp + s.m * s.n, 0.0f);
    return;
  }
  const float* xp = x.data<float>();
  const auto* wp = static_cast<const uint8_t*>(w.data_ptr());
  if (type == QuantType::F16 || type == QuantType::BF16)
    half_matmul(type, s, xp, wp, yp);
  else if (type == QuantType::Int8)
    int8_row_matmul(s, xp, wp, yp);
  else if (type == QuantType::Q8_0)
    q8_0_matmul(s, xp, wp, yp);
  else if (type == QuantType::Q4_0x4)
    q4_0_grouped_matmul(s, xp, wp, yp);
  else if (quant::is_interleaved(type))
    interleaved_matmul(type, s, xp, wp, yp);
  else
    fused_matmul(type, s, xp, wp, yp);
}

void quant_dot_lanes(const uint8_t* u, const int8_t* x, int64_t blocks, int32_t* lanes) {
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  auto run = [&]<class Dot>(Dot) {
    for (int64_t g = 0; g < blocks; ++g)
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(lanes + 8 * g),
          Dot::dot(_mm256_setzero_si256(), cpu::load256(u + 32 * g), cpu::load256(x + 32 * g)));
  };
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (set_dot() == QuantDot::Avx512Vnni) return run(cpu::DotVnni{});
#endif
  if (set_dot() == QuantDot::AvxVnni) return run(cpu::DotAvxVnni{});
  return run(cpu::DotAvx2{});
#else
  for (int64_t l = 0; l < 8 * blocks; ++l) {
    int32_t sum = 0;
    for (int i = 0; i < 4; ++i) sum += int32_t(u[4 * l + i]) * x[4 * l + i];
    lanes[l] = sum;
  }
#endif
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
