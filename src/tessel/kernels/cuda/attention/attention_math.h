// SPDX-License-Identifier: Apache-2.0
// Index arithmetic shared by the CUDA attention kernels and their CPU tests: which keys a query row
// sees (Backend::attention's causal offset, sliding window and paged positions), the key range a
// tile of query rows must visit, and the register layout of the m16n8k16 tensor-core instruction
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"). Plain inline functions, compiled for the host
// and the device, so that the rules the kernels follow are the ones the CPU tests check.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TESSEL_HD __host__ __device__ __forceinline__
#else
#define TESSEL_HD inline
#endif

namespace tessel::kernels::cuda {

TESSEL_HD int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// Visibility of one attention problem (Backend::attention): query i sits at absolute position
// i + offset (offset = Tk - Tq) when causal; a window w > 0 keeps keys p - w < j <= p. A window of
// Tk or more is the same as none, as on the CPU.
struct Visibility {
  int64_t tq, tk, offset, window;
  bool causal;

  TESSEL_HD static Visibility make(int64_t tq, int64_t tk, bool causal, int64_t window) {
    Visibility v;
    v.tq = tq;
    v.tk = tk;
    v.offset = tk - tq;
    v.causal = causal;
    v.window = causal && window < tk ? window : 0;
    return v;
  }
  // Keys [key_begin(i), key_end(i)) are the ones query i may see (less padding).
  TESSEL_HD int64_t key_end(int64_t i) const {
    return causal ? clamp_i64(i + offset + 1, 0, tk) : tk;
  }
  TESSEL_HD int64_t key_begin(int64_t i) const {
    return window > 0 ? clamp_i64(i + offset - window + 1, 0, tk) : 0;
  }
  // Queries [query_begin(j), query_end(j)) are the ones that may see key j.
  TESSEL_HD int64_t query_begin(int64_t j) const {
    return causal ? clamp_i64(j - offset, 0, tq) : 0;
  }
  TESSEL_HD int64_t query_end(int64_t j) const {
    return window > 0 ? clamp_i64(j + window - offset, 0, tq) : tq;
  }
  TESSEL_HD bool sees(int64_t i, int64_t j) const { return j >= key_begin(i) && j < key_end(i); }
};

// The keys a block of query rows [q0, q0 + rows) must visit: from the first row's window start,
// rounded down to a tile of `tile` keys, to one past the last row's last key. Empty (begin >= end)
// when no row sees a key. Both bounds grow with the row index, so no row sees a key outside.
struct KeyRange {
  int64_t begin, end;
};
TESSEL_HD KeyRange key_range(const Visibility& v, int64_t q0, int64_t rows, int64_t tile) {
  int64_t last = q0 + rows - 1;
  if (last > v.tq - 1) last = v.tq - 1;
  KeyRange r;
  r.begin = v.key_begin(q0) / tile * tile;
  r.end = v.key_end(last);
  return r;
}

// Whether every row of [row0, row0 + rows) sees every key of [j0, j0 + keys) by the causal and
// window rules (padding aside): then a tile needs no per-element mask. Key ends and window
// starts grow with the row, so the first row's end and the last row's start decide.
TESSEL_HD bool block_sees_whole_tile(const Visibility& v, int64_t row0, int64_t rows, int64_t j0,
                                     int64_t keys) {
  return j0 + keys <= v.key_end(row0) && v.key_begin(row0 + rows - 1) <= j0;
}

// Paged attention (Backend::paged_attention): row j of a sequence with `seq_len` keys and `n` new
// rows sits at position p = seq_len - n + j and sees keys [paged_first(...), p + 1).
TESSEL_HD int64_t paged_position(int64_t seq_len, int64_t n, int64_t j) {
  return seq_len - n + j;
}
TESSEL_HD int64_t paged_first(int64_t position, int64_t window) {
  return window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
}
// The pool row (slot) of key position t: block_table[t / block_size] * block_size + t % block_size.
TESSEL_HD int64_t paged_slot(const int32_t* block_table, int64_t block_size, int64_t t) {
  return int64_t(block_table[t / block_size]) * block_size + t % block_size;
}
// The sequence owning packed query row `row`: the s with starts[s] <= row < starts[s + 1]
// (starts non-decreasing, starts[0] = 0, row < starts[sequences]). Empty sequences are skipped.
TESSEL_HD int64_t sequence_of_row(const int64_t* starts, int64_t sequences, int64_t row) {
  int64_t lo = 0, hi = sequences;  // invariant: starts[lo] <= row < starts[hi]
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    if (starts[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// m16n8k16 fragments (16-bit A and B, f32 C), for lane = 4 * group + quad (group 0..7, quad 0..3).
// A (16 x 16, row-major): register r holds elements (row, col) and (row, col + 1) with
// row = group + 8 * (r & 1), col = 2 * quad + 8 * (r >> 1).
TESSEL_HD int mma_a_row(int lane, int r) {
  return lane / 4 + 8 * (r & 1);
}
TESSEL_HD int mma_a_col(int lane, int r) {
  return 2 * (lane % 4) + 8 * (r >> 1);
}
// B (16 x 8, k x n): register r holds (k, n) and (k + 1, n), k = 2 * quad + 8 * r, n = group.
TESSEL_HD int mma_b_k(int lane, int r) {
  return 2 * (lane % 4) + 8 * r;
}
TESSEL_HD int mma_b_n(int lane) {
  return lane / 4;
}
// C (16 x 8): element e (0..3) is (group + 8 * (e >> 1), 2 * quad + (e & 1)).
TESSEL_HD int mma_c_row(int lane, int e) {
  return lane / 4 + 8 * (e >> 1);
}
TESSEL_HD int mma_c_col(int lane, int e) {
  return 2 * (lane % 4) + (e & 1);
}
// The A register r of a 16-key step kk of P (16 rows x 16 keys) comes from the C fragments of the
// score tiles 2 kk and 2 kk + 1 (8 keys each): tile 2 kk + (r >> 1), elements 2 (r & 1) and
// 2 (r & 1) + 1. FlashAttention-2 keeps P in registers this way.
TESSEL_HD int p_tile_of_a_register(int kk, int r) {
  return 2 * kk + (r >> 1);
}
TESSEL_HD int p_element_of_a_register(int r) {
  return 2 * (r & 1);
}
// ldmatrix.x4: lane l gives the address of row l % 8 of matrix l / 8. For V stored [key][dim]
// and loaded with .trans, matrix m covers keys k0 + 8 * (m & 1) .. and dims n0 + 8 * (m >> 1) ..,
// which makes registers 0, 1 the B fragment of dims n0.. and 2, 3 that of dims n0 + 8...
TESSEL_HD int ldmatrix_v_key(int lane) {
  return lane % 8 + 8 * ((lane / 8) & 1);
}
TESSEL_HD int ldmatrix_v_dim(int lane) {
  return 8 * (lane / 16);
}

}  // namespace tessel::kernels::cuda
