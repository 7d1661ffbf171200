// SPDX-License-Identifier: Apache-2.0
// Paged attention over a block-paged KV cache (PagedAttention, Kwon et al. 2023, as in vLLM), with
// an online softmax (Milakov & Gimelshein 2018), written to be batch-invariant: the bits of a
// query row's output depend only on that query, its sequence's keys and values and the options,
// never on how many rows, sequences or threads share the call, nor on how the keys were written.
//
// How: keys are visited in tiles of kTile positions aligned at multiples of kTile (absolute
// positions, not cache blocks, so the block size does not matter either). For each (query, head)
// one thread runs the same code over the tiles its causal / sliding-window range touches, in
// position order: the visible keys' scores, the tile's max, the rescale, the tile's weights summed
// in fixed lanes (keys outside the row's range weigh exactly 0 and add nothing), the weighted sum
// of V. In f32, and for 16-bit pools read in place and widened in registers, the scores and the V
// sum are vectorised across the head dim (paged_attention_tiles.h: one vector accumulator per key,
// the lanes of a group of keys added together by one fixed tree); f64 pools take the scalar loops
// below. A work unit is (sequence, a run of kv heads, chunk of kQueryChunk rows): it locates each
// tile's keys once for every query head of its kv heads' groups and every row of the chunk, one
// tile ahead with a prefetch, and the units are spread over the pool; splitting the work
// differently changes no row's arithmetic.
#include <atomic>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/paged_check.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/gemm_invariant_tiles.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/paged_attention_tiles.h"
#include "tessel/kernels/cpu/simd_math.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

constexpr int64_t kTile = 32;        // key positions per tile
constexpr int64_t kQueryChunk = 16;  // query rows per work unit

template <typename Acc>
Acc exp_acc(Acc x) {
  if constexpr (std::is_same_v<Acc, float>)
    return cpu::exp_f32(x);
  else
    return std::exp(x);
}

// n elements of any supported dtype at src (element offset `at`) widened to Acc.
template <typename Acc>
void load_row(const void* src, DType dtype, int64_t at, int64_t n, Acc* dst) {
  if (dtype == DType::BF16 || dtype == DType::F16) {
    if constexpr (std::is_same_v<Acc, float>)
      cpu::half_row_to_f32(static_cast<const uint16_t*>(src) + at, dtype, dst, n);
  } else if (dtype == DType::F32) {
    const float* s = static_cast<const float*>(src) + at;
    for (int64_t i = 0; i < n; ++i) dst[i] = Acc(s[i]);
  } else {
    const double* s = static_cast<const double*>(src) + at;
    for (int64_t i = 0; i < n; ++i) dst[i] = Acc(s[i]);
  }
}

template <typename Acc>
void store_row(const Acc* src, void* dst, DType dtype, int64_t at, int64_t n) {
  if (dtype == DType::BF16 || dtype == DType::F16) {
    if constexpr (std::is_same_v<Acc, float>)
      cpu::f32_row_to_half(src, static_cast<uint16_t*>(dst) + at, dtype, n);
  } else if (dtype == DType::F32) {
    float* d = static_cast<float*>(dst) + at;
    for (int64_t i = 0; i < n; ++i) d[i] = float(src[i]);
  } else {
    double* d = static_cast<double*>(dst) + at;
    for (int64_t i = 0; i < n; ++i) d[i] = double(src[i]);
  }
}

struct PagedArgs {
  const void* q;
  DType q_dtype;
  const void* k_pool;
  const void* v_pool;
  DType pool_dtype;
  const int32_t* table;
  const int64_t* lens;
  const int64_t* starts;
  void* out;
  int64_t heads, kv_heads, dim, block_size, max_blocks, window;
  double scale;
};

// How the kernel reads a pool of element type T: Load gives f32 lanes from Elem (the element, or
// the bits of a 16-bit float); f64 pools have no Load and take the scalar loops.
template <typename T>
struct PoolRead {
  using Elem = T;
  using Load = void;
};
template <>
struct PoolRead<float> {
  using Elem = float;
  using Load = cpu::paged::F32Load;
};
template <>
struct PoolRead<BF16> {
  using Elem = uint16_t;
  using Load = cpu::paged::Bf16Load;
};
template <>
struct PoolRead<F16> {
  using Elem = uint16_t;
  using Load = cpu::paged::F16Load;
};

// One (sequence, kv head, row chunk) unit's buffers, reused across the units a thread runs.
template <typename Acc, typename Elem>
struct UnitBuffers {
  std::vector<Acc> q;      // [rows * group][dim]
  std::vector<Acc> acc;    // [rows * group][dim]
  std::vector<Acc> m, l;   // [rows * group]
  std::vector<Elem> zero;  // [dim] zeros: the keys a tile's chunk does not see point here
};

// (f64) x . y over n elements in kLanes fixed partial sums, added pairwise at the end: the order is
// the source's (no reassociation), so every kernel set vectorises it and every call with the same n
// gives the same bits, whatever the addresses.
template <typename Acc>
Acc dot(const Acc* x, const Acc* y, int64_t n) {
  constexpr int kLanes = 16;
  Acc part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) part[j] = x[i + j] * y[i + j] + part[j];
  for (int j = 0; i < n; ++i, ++j) part[j] = x[i] * y[i] + part[j];
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) part[j] += part[j + width];
  return part[0];
}

// The online-softmax update of one (query, head) state with one tile whose visible keys are
// [a, b) (tile offsets), its rows read through Load (void: f64, scalar). Fixed code and order: the
// same bits whichever unit or thread runs it.
template <typename Acc, typename Load, typename Elem>
void update_state(const Acc* q, const Elem* const* krow, const Elem* const* vrow, int64_t dim,
                  int64_t a, int64_t b, Acc scale, Acc& m, Acc& l, Acc* acc, const Elem* const* pk,
                  const Elem* const* pv) {
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  constexpr int kSumLanes = 8;
  alignas(64) Acc s[kTile];
  if constexpr (std::is_same_v<Acc, float>) {
    cpu::paged::tile_scores<kTile, Load>(q, krow, dim, a, b, scale, s, pk);
  } else {
    for (int64_t t = 0; t < kTile; ++t) s[t] = kNegInf;
    for (int64_t t = a; t < b; ++t) s[t] = dot(q, krow[t], dim) * scale;
  }
  // Over the whole tile (masked keys are -inf): a max is exact in any order.
  Acc tile_max = kNegInf;
#pragma omp simd reduction(max : tile_max)
  for (int64_t t = 0; t < kTile; ++t) tile_max = std::max(tile_max, s[t]);
  const Acc m_new = std::max(m, tile_max);
  const Acc corr = exp_acc(m - m_new);  // 0 on the first tile (m = -inf)
#pragma omp simd
  for (int64_t t = 0; t < kTile; ++t) s[t] = exp_acc(s[t] - m_new);  // masked keys: exactly 0
  // The tile's weights in fixed lanes (the masked zeros add nothing), then pairwise.
  Acc part[kSumLanes] = {};
  for (int64_t t = 0; t < kTile; t += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) part[j] += s[t + j];
  for (int width = kSumLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) part[j] += part[j + width];
  l = l * corr + part[0];
  m = m_new;
  if constexpr (std::is_same_v<Acc, float>) {
    cpu::paged::accumulate_values<Load>(acc, s, vrow, dim, a, b, corr, pv);
  } else {
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) acc[d] *= corr;
    for (int64_t t = a; t < b; ++t) {
      const Acc p = s[t];
      const Acc* vt = vrow[t];
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) acc[d] = p * vt[d] + acc[d];
    }
  }
}

using cpu::paged::prefetch_row;

// A work unit: the rows [r0, r1) of sequence seq, for kv heads [h0, h1) and every query head of
// their groups.
struct Unit {
  int64_t seq, h0, h1, r0, r1;
};

// The keys a unit's rows see: [lo, hi).
struct KeyRange {
  int64_t lo, hi;
};
KeyRange unit_keys(const PagedArgs& g, const Unit& u) {
  const int64_t len = g.lens[u.seq], n = g.starts[u.seq + 1] - g.starts[u.seq], first = len - n;
  const int64_t p = first + u.r0;
  return {g.window > 0 ? std::max<int64_t>(p - g.window + 1, 0) : int64_t(0), first + u.r1};
}

// Tile t0's keys of [keys.lo, keys.hi), located through the unit's block table (one division per
// tile): kr[t - t0] and vr[t - t0] point at key t's kv heads [h0, h1), which lie side by side in
// the pool, so a unit of several heads reads each key's row as one run of (h1 - h0) * dim elements.
template <typename Elem>
void locate(const PagedArgs& g, const Unit& u, KeyRange keys, int64_t t0, const Elem** kr,
            const Elem** vr) {
  const Elem* kp = static_cast<const Elem*>(g.k_pool);
  const Elem* vp = static_cast<const Elem*>(g.v_pool);
  const int32_t* table = g.table + u.seq * g.max_blocks;
  const int64_t t_lo = std::max(t0, keys.lo), t1 = std::min(t0 + kTile, keys.hi);
  int64_t block = t_lo / g.block_size, off = t_lo % g.block_size;
  for (int64_t t = t_lo; t < t1; ++t) {
    const int64_t at = ((int64_t(table[block]) * g.block_size + off) * g.kv_heads + u.h0) * g.dim;
    kr[t - t0] = kp + at;
    vr[t - t0] = vp + at;
    if (++off == g.block_size) off = 0, ++block;
  }
}

// The next tile's rows of one head that update_state did not ask for while it computed keys
// [a, b) of this tile: the f32 scores ask for whole groups of keys, the value sums for [a, b);
// the f64 loops ask for none.
template <typename Acc, typename Elem>
void ask_rest(const Elem* const* pk, const Elem* const* pv, int64_t n, int64_t dim, int64_t a,
              int64_t b) {
  int64_t ka = 0, kb = 0, va = 0, vb = 0;
  if constexpr (std::is_same_v<Acc, float>) {
    if (a < b) {
      constexpr int64_t kG = cpu::paged::kGroup;
      ka = a / kG * kG, kb = (b + kG - 1) / kG * kG, va = a, vb = b;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i < ka || i >= kb) prefetch_row(pk[i], dim);
    if (i < va || i >= vb) prefetch_row(pv[i], dim);
  }
}

// Pool element type T, accumulation type Acc (f32, or f64 for f64 pools). Runs unit u; `next`
// (or null) is the unit this thread runs after it, whose first tile is asked for during u's last.
//
// Prefetch: every tile's rows are asked into L2 (prefetcht1) while the tile before is computed,
// interleaved with that computation: the scores of a group of keys ask for the same keys' rows of
// the next tile, a share of them per step of the head dim, the value sums one row per key. Asked
// for in bursts (a head's rows of the next tile before computing the head), the requests filled the
// core's miss buffers, stalling it, and then left memory idle while it computed: measured on a
// Zen 4 EPYC (GPT-2's shape, f32, one thread, K and V from memory), 11-12 GB/s in bursts against
// 14-16 interleaved, and 44-51 GB/s with everything in cache.
template <typename T, typename Acc>
void run_unit(const PagedArgs& g, const Unit& u, const Unit* next,
              UnitBuffers<Acc, typename PoolRead<T>::Elem>& buf) {
  using Elem = typename PoolRead<T>::Elem;
  using Load = typename PoolRead<T>::Load;
  const int64_t seq = u.seq, h0 = u.h0, r0 = u.r0, r1 = u.r1;
  const int64_t dim = g.dim, group = g.heads / g.kv_heads, kvs = u.h1 - h0;
  const int64_t per_row = kvs * group, states = (r1 - r0) * per_row;
  const int64_t len = g.lens[seq], n = g.starts[seq + 1] - g.starts[seq], first = len - n;
  buf.q.resize(size_t(states * dim));
  buf.acc.assign(size_t(states * dim), Acc(0));
  buf.m.assign(size_t(states), -std::numeric_limits<Acc>::infinity());
  buf.l.assign(size_t(states), Acc(0));
  // State (r, h) for query head h0 * group + h of row r: the query heads of [h0, h1) lie side by
  // side in q and out.
  const auto row_at = [&](int64_t r) { return ((g.starts[seq] + r) * g.heads + h0 * group) * dim; };
  for (int64_t r = r0; r < r1; ++r)
    load_row(g.q, g.q_dtype, row_at(r), per_row * dim, &buf.q[size_t((r - r0) * per_row * dim)]);

  const auto row_begin = [&](int64_t p) {
    return g.window > 0 ? std::max<int64_t>(p - g.window + 1, 0) : int64_t(0);
  };
  const KeyRange keys = unit_keys(g, u);
  const int64_t lo = keys.lo, hi = keys.hi;
  const Acc scale = Acc(g.scale);
  const Elem* kraw[2][kTile];
  const Elem* vraw[2][kTile];
  const Elem* krow[kTile];
  const Elem* vrow[kTile];
  // The next unit's first tile, asked for a share of its keys per head of this unit's last tile.
  const Elem* knext[kTile] = {};
  const Elem* vnext[kTile] = {};
  int64_t next_len = 0;
  if (next != nullptr) {
    const KeyRange nk = unit_keys(g, *next);
    if (nk.lo < nk.hi) locate(g, *next, nk, nk.lo / kTile * kTile, knext, vnext);
    next_len = (next->h1 - next->h0) * dim;
  }
  buf.zero.assign(size_t(dim), Elem(0));  // 0.0 in every format
  const int64_t first_tile = lo / kTile * kTile;
  if (first_tile < hi) locate(g, u, keys, first_tile, kraw[0], vraw[0]);
  for (int64_t t0 = first_tile, cur = 0; t0 < hi; t0 += kTile, cur ^= 1) {
    if (t0 + kTile < hi) locate(g, u, keys, t0 + kTile, kraw[cur ^ 1], vraw[cur ^ 1]);
    // The tile's rows the chunk can see; the others are never read (the score loop's groups may
    // compute them against zeros, then mask them).
    const int64_t t_lo = std::max(t0, lo), t1 = std::min(t0 + kTile, hi);
    for (int64_t i = 0; i < kTile; ++i) krow[i] = vrow[i] = buf.zero.data();
    // The next tile's rows (it starts past lo, which the first tile holds).
    const int64_t next_n = std::min(kTile, hi - t0 - kTile);
    for (int64_t kvh = 0; kvh < kvs; ++kvh) {
      const Elem* pk[kTile] = {};
      const Elem* pv[kTile] = {};
      for (int64_t i = 0; i < next_n; ++i) {
        pk[i] = kraw[cur ^ 1][i] + kvh * dim;
        pv[i] = vraw[cur ^ 1][i] + kvh * dim;
      }
      if (next_n <= 0)  // the last tile: a share of the next unit's first
        for (int64_t i = kvh * kTile / kvs; i < (kvh + 1) * kTile / kvs; ++i) {
          prefetch_row(knext[i], next_len);
          prefetch_row(vnext[i], next_len);
        }
      for (int64_t i = t_lo - t0; i < t1 - t0; ++i) {
        krow[i] = kraw[cur][i] + kvh * dim;
        vrow[i] = vraw[cur][i] + kvh * dim;
      }
      bool asked = next_n <= 0;  // the next tile's rows of this head asked for
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t p = first + r;
        const int64_t a = std::max(row_begin(p), t0) - t0, b = std::min(p + 1, t0 + kTile) - t0;
        if (a >= b) continue;
        for (int64_t h = 0; h < group; ++h) {
          const size_t st = size_t((r - r0) * per_row + kvh * group + h);
          update_state<Acc, Load>(&buf.q[st * size_t(dim)], krow, vrow, dim, a, b, scale, buf.m[st],
                                  buf.l[st], &buf.acc[st * size_t(dim)], asked ? nullptr : pk,
                                  asked ? nullptr : pv);
          if (!asked) ask_rest<Acc>(pk, pv, next_n, dim, a, b);
          asked = true;
        }
      }
      if (!asked) ask_rest<Acc>(pk, pv, next_n, dim, 0, 0);
    }
  }
  for (int64_t r = r0; r < r1; ++r) {
    Acc* a = &buf.acc[size_t((r - r0) * per_row * dim)];
    for (int64_t h = 0; h < per_row; ++h) {
      const Acc inv = Acc(1) / buf.l[size_t((r - r0) * per_row + h)];
      for (int64_t d = 0; d < dim; ++d) a[h * dim + d] *= inv;
    }
    store_row(a, g.out, g.q_dtype, row_at(r), per_row * dim);
  }
}

template <typename T, typename Acc>
void paged_attention_typed(const PagedArgs& g, int64_t sequences) {
  // Units in sequence order; the pool takes them one at a time (causal rows differ in cost).
  // A unit covers as many kv heads as leaves every thread about four units: a decode step of
  // many sequences then reads each key's heads as one run (the pool's row), which the hardware
  // prefetchers follow (one head per unit read 256-byte pieces 3 KiB apart: 7.9 GB/s at one
  // thread, GPT-2's shape, 16 sequences, from memory); one sequence still spreads its heads over
  // the threads.
  int64_t row_chunks = 0;
  for (int64_t s = 0; s < sequences; ++s)
    row_chunks += (g.starts[s + 1] - g.starts[s] + kQueryChunk - 1) / kQueryChunk;
  const int64_t wanted = 4 * int64_t(num_threads());
  const int64_t splits = std::clamp<int64_t>(
      (wanted + row_chunks - 1) / std::max<int64_t>(row_chunks, 1), 1, g.kv_heads);
  const int64_t span = (g.kv_heads + splits - 1) / splits;
  std::vector<Unit> units;
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t n = g.starts[s + 1] - g.starts[s];
    for (int64_t r = 0; r < n; r += kQueryChunk)
      for (int64_t h = 0; h < g.kv_heads; h += span)
        units.push_back({s, h, std::min(g.kv_heads, h + span), r, std::min(n, r + kQueryChunk)});
  }
  // On tessel's pool, as the step's products, each thread drawing the next unit from a shared
  // counter: an OpenMP region here woke OpenMP's passive worker while the pool's worker still
  // polled, three threads on two cores, and the caller ran most units itself (engine.forward's
  // profile: 7.8 of 8.3 ms of attention on the engine thread).
  const int64_t count = int64_t(units.size());
  const int64_t threads = std::min<int64_t>(num_threads(), count);
  std::atomic<int64_t> next{0};
  // One chunk per thread; whichever thread runs a chunk drains the counter, so a chunk run after
  // another on the same thread finds nothing left.
  parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    UnitBuffers<Acc, typename PoolRead<T>::Elem> buf;
    // Each unit is claimed one ahead, so its first tile can be asked for during the last tile
    // of the unit before.
    for (int64_t i = next.fetch_add(1); i < count;) {
      const int64_t j = next.fetch_add(1);
      run_unit<T, Acc>(g, units[size_t(i)], j < count ? &units[size_t(j)] : nullptr, buf);
      i = j;
    }
  });
}

}  // namespace

void CpuBackend::paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots,
                                Tensor& k_pool, Tensor& v_pool) {
  const PagedKvStoreShape s = validate_paged_kv_store(*this, k, v, slots, k_pool, v_pool);
  const size_t row = size_t(s.pool.kv_heads * s.pool.head_dim) * dtype_size(k.dtype());
  const int64_t* slot = slots.data<int64_t>();
  const auto* ks = static_cast<const char*>(k.data_ptr());
  const auto* vs = static_cast<const char*>(v.data_ptr());
  auto* kd = static_cast<char*>(k_pool.data_ptr());
  auto* vd = static_cast<char*>(v_pool.data_ptr());
  parallel_for(0, s.tokens, std::max<int64_t>(1, (int64_t(1) << 16) / int64_t(row + 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i) {
                   std::memcpy(kd + size_t(slot[i]) * row, ks + size_t(i) * row, row);
                   std::memcpy(vd + size_t(slot[i]) * row, vs + size_t(i) * row, row);
                 }
               });
}

void CpuBackend::paged_attention(const PagedAttentionDesc& desc, const Tensor& q,
                                 const Tensor& k_pool, const Tensor& v_pool,
                                 const Tensor& block_tables, const Tensor& seq_lens,
                                 const Tensor& query_starts, Tensor& out) {
  const PagedAttentionShape s = validate_paged_attention(*this, desc, q, k_pool, v_pool,
                                                         block_tables, seq_lens, query_starts, out);
  const PagedArgs g{q.data_ptr(),
                    q.dtype(),
                    k_pool.data_ptr(),
                    v_pool.data_ptr(),
                    k_pool.dtype(),
                    block_tables.data<int32_t>(),
                    seq_lens.data<int64_t>(),
                    query_starts.data<int64_t>(),
                    out.data_ptr(),
                    s.heads,
                    s.pool.kv_heads,
                    s.pool.head_dim,
                    s.pool.block_size,
                    s.max_blocks,
                    desc.window,
                    s.scale};
  switch (k_pool.dtype()) {
    case DType::F64:
      paged_attention_typed<double, double>(g, s.sequences);
      break;
    case DType::BF16:
      paged_attention_typed<BF16, float>(g, s.sequences);
      break;
    case DType::F16:
      paged_attention_typed<F16, float>(g, s.sequences);
      break;
    default:
      paged_attention_typed<float, float>(g, s.sequences);
      break;
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
