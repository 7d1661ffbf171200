// SPDX-License-Identifier: Apache-2.0
// CUDA embedding gather and its deterministic scatter-add backward. Backward: (id, position)
// pairs are sorted by id with CUB's stable radix sort; one thread block per run of equal ids (the
// block at the run's first sorted entry does the work, the others exit), its threads striding
// over the columns, each summing the run's rows in position order. No atomics, so the result has
// the same bits on every run, and the order is the CPU kernel's.
#include <cub/device/device_radix_sort.cuh>

#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/embedding.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

constexpr uint32_t kBadKey = 0xffffffffu;

template <typename Word>
__global__ void embedding_kernel(const Word* weight, const void* ids, bool i64, Word* out,
                                 int64_t n, int64_t vocab, int64_t cols, int* error) {
  const int64_t total = n * cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / cols, c = e - i * cols;
    const int64_t id = load_index(ids, i64, i);
    if (id < 0 || id >= vocab) {
      if (c == 0) flag_error(error);
      out[e] = Word(0);
    } else {
      out[e] = weight[id * cols + c];
    }
  }
}

__global__ void sort_input_kernel(const void* ids, bool i64, uint32_t* keys, uint32_t* positions,
                                  int64_t n, int64_t vocab, int* error) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = load_index(ids, i64, i);
    const bool bad = id < 0 || id >= vocab;
    if (bad) flag_error(error);
    keys[i] = bad ? kBadKey : uint32_t(id);
    positions[i] = uint32_t(i);
  }
}

template <Storage S>
__global__ void accumulate_runs_kernel(const void* dout, const uint32_t* keys,
                                       const uint32_t* positions, void* dweight, int64_t n,
                                       int64_t cols) {
  for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
    const uint32_t key = keys[j];
    if (key == kBadKey || (j > 0 && keys[j - 1] == key)) continue;  // not a run's start
    int64_t end = j + 1;
    while (end < n && keys[end] == key) ++end;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const int64_t dst = int64_t(key) * cols + c;
      float acc = load<S>(dweight, dst);
      for (int64_t k = j; k < end; ++k) acc += load<S>(dout, int64_t(positions[k]) * cols + c);
      store<S>(dweight, dst, acc);
    }
  }
}

size_t align_up(size_t bytes) {
  return (bytes + 255) & ~size_t(255);
}

size_t sort_temp_bytes(int64_t n) {
  size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr),
                                             static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), int(n)),
             "embedding_backward", "cub::DeviceRadixSort::SortPairs (size query)");
  return bytes;
}

void check_sizes(const char* op, int64_t n, int64_t vocab, int64_t cols) {
  TESSEL_CHECK(n >= 0 && vocab >= 0 && cols >= 0, op, ": bad sizes n ", n, " vocab ", vocab,
               " cols ", cols);
  TESSEL_CHECK(n < (int64_t(1) << 31) && vocab < int64_t(kBadKey), op, ": ", n, " ids or vocab ",
               vocab, " exceed the 32-bit sort keys");
}

}  // namespace

void embedding(DType dtype, const void* weight, DType id_dtype, const void* ids, void* out,
               int64_t n, int64_t vocab, int64_t cols, int* error, cudaStream_t stream) {
  check_sizes("embedding", n, vocab, cols);
  storage_of(dtype, "embedding");
  check_index_dtype(id_dtype, "embedding", "ids");
  if (n == 0 || cols == 0) return;
  TESSEL_CHECK(weight != nullptr && ids != nullptr && out != nullptr, "embedding: null pointer");
  const bool i64 = id_dtype == DType::I64;
  if (dtype == DType::F32)
    embedding_kernel<uint32_t><<<grid_for(n * cols), kThreads, 0, stream>>>(
        static_cast<const uint32_t*>(weight), ids, i64, static_cast<uint32_t*>(out), n, vocab, cols,
        error);
  else
    embedding_kernel<uint16_t><<<grid_for(n * cols), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(weight), ids, i64, static_cast<uint16_t*>(out), n, vocab, cols,
        error);
  check_launch("embedding");
}

size_t embedding_backward_workspace_bytes(int64_t n) {
  check_sizes("embedding_backward", n, 0, 0);
  if (n == 0) return 0;
  return 4 * align_up(size_t(n) * sizeof(uint32_t)) + align_up(sort_temp_bytes(n));
}

void embedding_backward(DType dtype, const void* dout, DType id_dtype, const void* ids,
                        void* dweight, int64_t n, int64_t vocab, int64_t cols, void* workspace,
                        int* error, cudaStream_t stream) {
  check_sizes("embedding_backward", n, vocab, cols);
  storage_of(dtype, "embedding_backward");
  check_index_dtype(id_dtype, "embedding_backward", "ids");
  if (n == 0 || cols == 0) return;
  TESSEL_CHECK(dout && ids && dweight && workspace, "embedding_backward: null pointer");
  const size_t slot = align_up(size_t(n) * sizeof(uint32_t));
  char* w = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<uint32_t*>(w);
  auto* keys_out = reinterpret_cast<uint32_t*>(w + slot);
  auto* pos_in = reinterpret_cast<uint32_t*>(w + 2 * slot);
  auto* pos_out = reinterpret_cast<uint32_t*>(w + 3 * slot);
  void* temp = w + 4 * slot;
  size_t temp_bytes = sort_temp_bytes(n);
  sort_input_kernel<<<grid_for(n), kThreads, 0, stream>>>(ids, id_dtype == DType::I64, keys_in,
                                                          pos_in, n, vocab, error);
  check_launch("embedding_backward");
  check_cuda(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                             int(n), 0, 32, stream),
             "embedding_backward", "cub::DeviceRadixSort::SortPairs");
  const unsigned grid = unsigned(std::min<int64_t>(n, int64_t(1) << 20));
  dispatch(dtype, "embedding_backward", [&](auto tag) {
    accumulate_runs_kernel<decltype(tag)::value>
        <<<grid, kThreads, 0, stream>>>(dout, keys_out, pos_out, dweight, n, cols);
  });
  check_launch("embedding_backward");
}

}  // namespace tessel::kernels::cuda
