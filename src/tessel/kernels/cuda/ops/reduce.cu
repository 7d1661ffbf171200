// SPDX-License-Identifier: Apache-2.0
// CUDA reductions. reduce: the host coalesces x's dims into kept and reduced groups (as the CPU
// kernel does). When the innermost group is reduced, one thread block per output element strides
// over that output's reduced elements, each thread folding its share (sums in f64), then a
// fixed-tree block reduction; when it is kept, blocks of 32 outputs by 32 row lanes
// (reduce_columns_kernel). square_sums: one thread block per kSquareSumBlock block of every tensor
// (tensors passed 32 per launch in a by-value table), an f64 partial per block, then the blocks of
// each tensor added in order.
#include <type_traits>
#include <vector>

#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/reduce.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

constexpr int kMaxDims = 8;

// x's coalesced groups split into the kept ones (which index outputs) and the reduced ones.
struct ReducePlan {
  int kept = 0, reduced = 0;
  int64_t kept_size[kMaxDims] = {}, kept_stride[kMaxDims] = {};  // strides in x
  int64_t red_size[kMaxDims] = {}, red_stride[kMaxDims] = {};
  int64_t count = 1;  // reduced elements per output
};

__device__ __forceinline__ int64_t unravel(int64_t i, int n, const int64_t* size,
                                           const int64_t* stride) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; --d) {
    off += (i % size[d]) * stride[d];
    i /= size[d];
  }
  return off;
}

template <Storage S, ReduceOp kOp>
__global__ void reduce_kernel(const void* x, void* out, int64_t outputs, ReducePlan p) {
  constexpr bool kSum = kOp == ReduceOp::Sum || kOp == ReduceOp::Mean;
  // Sums accumulate in f64 (as the CPU kernel does); min / max in f32 (exact either way).
  using Acc = std::conditional_t<kSum, double, float>;
  const Acc identity =
      kOp == ReduceOp::Max ? Acc(-INFINITY) : (kOp == ReduceOp::Min ? Acc(INFINITY) : Acc(0));
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const int64_t base = unravel(o, p.kept, p.kept_size, p.kept_stride);
    Acc acc = identity;
    for (int64_t r = threadIdx.x; r < p.count; r += blockDim.x) {
      const float v = load<S>(x, base + unravel(r, p.reduced, p.red_size, p.red_stride));
      if constexpr (kSum)
        acc += double(v);
      else if constexpr (kOp == ReduceOp::Max)
        acc = MaxOp{}(acc, v);
      else
        acc = MinOp{}(acc, v);
    }
    Acc total;
    if constexpr (kSum)
      total = block_all_reduce(acc, SumOp{}, 0.0);
    else if constexpr (kOp == ReduceOp::Max)
      total = block_all_reduce(acc, MaxOp{}, identity);
    else
      total = block_all_reduce(acc, MinOp{}, identity);
    if constexpr (kOp == ReduceOp::Mean) total = total / double(p.count);
    if (threadIdx.x == 0) store<S>(out, o, float(total));
  }
}

// The innermost group is kept (a bias gradient: [rows, C] over rows): a block of 32 columns (one
// warp's width, so each load of a warp is one coalesced row segment) by kRowLanes row lanes;
// lane l folds rows l, l + kRowLanes, ... of its column in order (sums in f64), then lane 0 adds
// the lanes' partials in lane order: deterministic whatever the grid, and 32 times the memory
// parallelism of one thread per column (which left a 768-wide bias gradient over 16k rows to 3
// blocks). [R, C] over R, the common case, indexes directly instead of unravelling.
constexpr int kColumnLanes = 32, kRowLanes = 32;

template <Storage S, ReduceOp kOp>
__global__ void __launch_bounds__(kColumnLanes* kRowLanes)
    reduce_columns_kernel(const void* x, void* out, int64_t outputs, ReducePlan p) {
  __shared__ double sums[kRowLanes][kColumnLanes + 1];
  __shared__ float extremes[kRowLanes][kColumnLanes + 1];
  const int col = int(threadIdx.x) % kColumnLanes, lane = int(threadIdx.x) / kColumnLanes;
  const bool plain = p.kept == 1 && p.reduced == 1;
  for (int64_t first = int64_t(blockIdx.x) * kColumnLanes; first < outputs;
       first += int64_t(gridDim.x) * kColumnLanes) {
    const int64_t o = first + col;
    double sum = 0.0;
    float extreme = kOp == ReduceOp::Max ? -INFINITY : INFINITY;
    if (o < outputs) {
      const int64_t base =
          plain ? o * p.kept_stride[0] : unravel(o, p.kept, p.kept_size, p.kept_stride);
      for (int64_t r = lane; r < p.count; r += kRowLanes) {
        const int64_t at =
            base + (plain ? r * p.red_stride[0] : unravel(r, p.reduced, p.red_size, p.red_stride));
        const float v = load<S>(x, at);
        if constexpr (kOp == ReduceOp::Max)
          extreme = MaxOp{}(extreme, v);
        else if constexpr (kOp == ReduceOp::Min)
          extreme = MinOp{}(extreme, v);
        else
          sum += double(v);
      }
    }
    sums[lane][col] = sum;
    extremes[lane][col] = extreme;
    __syncthreads();
    if (lane == 0 && o < outputs) {
      for (int l = 1; l < kRowLanes; ++l) {
        sum += sums[l][col];
        if constexpr (kOp == ReduceOp::Max) extreme = MaxOp{}(extreme, extremes[l][col]);
        if constexpr (kOp == ReduceOp::Min) extreme = MinOp{}(extreme, extremes[l][col]);
      }
      if constexpr (kOp == ReduceOp::Max || kOp == ReduceOp::Min)
        store<S>(out, o, extreme);
      else
        store<S>(out, o, float(kOp == ReduceOp::Mean ? sum / double(p.count) : sum));
    }
    __syncthreads();
  }
}

ReducePlan make_plan(std::span<const int64_t> shape, std::span<const int> dims) {
  const int nd = int(shape.size());
  TESSEL_CHECK(nd <= kMaxDims, "reduce: at most ", kMaxDims, " dims, got ", nd);
  bool reduced[kMaxDims] = {};
  for (int d : dims) {
    TESSEL_CHECK(d >= 0 && d < nd && !reduced[d], "reduce: dim ", d,
                 " is out of range or repeated for ", nd, " dims");
    reduced[d] = true;
  }
  // Groups of adjacent dims alike in kind (size-1 dims skipped), with their x strides.
  struct Group {
    int64_t size;
    bool reduced;
  };
  std::vector<Group> groups;
  for (int d = 0; d < nd; ++d) {
    if (shape[size_t(d)] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d])
      groups.back().size *= shape[size_t(d)];
    else
      groups.push_back({shape[size_t(d)], reduced[d]});
  }
  ReducePlan p;
  int64_t stride = 1;
  std::vector<int64_t> strides(groups.size());
  for (size_t g = groups.size(); g-- > 0;) {
    strides[g] = stride;
    stride *= groups[g].size;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].reduced) {
      p.red_size[p.reduced] = groups[g].size;
      p.red_stride[p.reduced++] = strides[g];
      p.count *= groups[g].size;
    } else {
      p.kept_size[p.kept] = groups[g].size;
      p.kept_stride[p.kept++] = strides[g];
    }
  }
  for (int d : dims) {  // size-0 reduced dims: no elements per output
    if (shape[size_t(d)] == 0) p.count = 0;
  }
  return p;
}

constexpr int kTableSize = 32;

struct SquareSumTable {
  const void* data[kTableSize];
  int64_t numel[kTableSize];
  Storage storage[kTableSize];
  int64_t first[kTableSize + 1];  // first block of each tensor, relative to the launch
  int count;
};

template <Storage S>
__device__ double block_square_sum(const void* x, int64_t lo, int64_t hi) {
  double acc = 0.0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const double v = double(load<S>(x, i));
    acc += v * v;
  }
  return acc;
}

__global__ void square_sum_blocks_kernel(SquareSumTable t, double* partial) {
  const int64_t b = blockIdx.x;
  int k = 0;
  while (b >= t.first[k + 1]) ++k;  // the tensor of this block (empty tensors own none)
  const int64_t lo = (b - t.first[k]) * kSquareSumBlock;
  const int64_t hi = min(t.numel[k], lo + kSquareSumBlock);
  double acc;
  switch (t.storage[k]) {
    case Storage::F32:
      acc = block_square_sum<Storage::F32>(t.data[k], lo, hi);
      break;
    case Storage::BF16:
      acc = block_square_sum<Storage::BF16>(t.data[k], lo, hi);
      break;
    default:
      acc = block_square_sum<Storage::F16>(t.data[k], lo, hi);
      break;
  }
  acc = block_all_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[b] = acc;
}

__global__ void square_sum_totals_kernel(SquareSumTable t, const double* partial, double* out) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= t.count) return;
  double total = 0.0;
  for (int64_t b = t.first[k]; b < t.first[k + 1]; ++b) total += partial[b];
  out[k] = total;
}

int64_t blocks_of(int64_t numel) {
  return (numel + kSquareSumBlock - 1) / kSquareSumBlock;
}

}  // namespace

void reduce(ReduceOp op, DType dtype, const void* x, std::span<const int64_t> shape,
            std::span<const int> dims, void* out, cudaStream_t stream) {
  const ReducePlan p = make_plan(shape, dims);
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  int64_t out_numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool r = false;
    for (int k : dims) r |= k == int(d);
    out_numel *= r ? 1 : shape[d];
  }
  storage_of(dtype, "reduce");
  if (out_numel == 0) return;
  TESSEL_CHECK(out != nullptr && (numel == 0 || x != nullptr), "reduce: null x or out");
  if (p.reduced == 0 && p.count != 0) {  // every reduced dim has size 1: a copy
    check_cuda(cudaMemcpyAsync(out, x, size_t(numel) * dtype_size(dtype), cudaMemcpyDeviceToDevice,
                               stream),
               "reduce", "cudaMemcpyAsync");
    return;
  }
  const bool columns = p.kept > 0 && p.kept_stride[p.kept - 1] == 1;
  const unsigned grid =
      columns ? unsigned(std::min<int64_t>((out_numel + kColumnLanes - 1) / kColumnLanes, 65535))
              : unsigned(std::min<int64_t>(out_numel, int64_t(1) << 20));
  dispatch(dtype, "reduce", [&](auto tag) {
    constexpr Storage S = decltype(tag)::value;
    auto launch = [&](auto op_tag) {
      constexpr ReduceOp kOp = decltype(op_tag)::value;
      if (columns)
        reduce_columns_kernel<S, kOp>
            <<<grid, kColumnLanes * kRowLanes, 0, stream>>>(x, out, out_numel, p);
      else
        reduce_kernel<S, kOp><<<grid, kThreads, 0, stream>>>(x, out, out_numel, p);
    };
    switch (op) {
      case ReduceOp::Sum:
        return launch(std::integral_constant<ReduceOp, ReduceOp::Sum>{});
      case ReduceOp::Mean:
        return launch(std::integral_constant<ReduceOp, ReduceOp::Mean>{});
      case ReduceOp::Max:
        return launch(std::integral_constant<ReduceOp, ReduceOp::Max>{});
      case ReduceOp::Min:
        return launch(std::integral_constant<ReduceOp, ReduceOp::Min>{});
    }
  });
  check_launch("reduce");
}

size_t square_sums_workspace_bytes(std::span<const SquareSumInput> xs) {
  int64_t blocks = 0;
  for (const SquareSumInput& x : xs) blocks += blocks_of(x.numel);
  return size_t(std::max<int64_t>(blocks, 1)) * sizeof(double);
}

void square_sums(std::span<const SquareSumInput> xs, double* out, void* workspace,
                 cudaStream_t stream) {
  if (xs.empty()) return;
  TESSEL_CHECK(out != nullptr && workspace != nullptr, "square_sums: null out or workspace");
  auto* partial = static_cast<double*>(workspace);
  for (size_t start = 0; start < xs.size(); start += kTableSize) {
    SquareSumTable t{};
    t.count = int(std::min<size_t>(kTableSize, xs.size() - start));
    t.first[0] = 0;
    for (int k = 0; k < t.count; ++k) {
      const SquareSumInput& x = xs[start + size_t(k)];
      TESSEL_CHECK(x.numel >= 0 && (x.numel == 0 || x.data != nullptr), "square_sums: tensor ",
                   start + size_t(k), " has ", x.numel, " elements at a null pointer");
      t.data[k] = x.data;
      t.numel[k] = x.numel;
      t.storage[k] = storage_of(x.dtype, "square_sums");
      t.first[k + 1] = t.first[k] + blocks_of(x.numel);
    }
    for (int k = t.count; k < kTableSize; ++k) t.first[k + 1] = t.first[t.count];
    if (t.first[t.count] > 0)
      square_sum_blocks_kernel<<<unsigned(t.first[t.count]), kThreads, 0, stream>>>(t, partial);
    square_sum_totals_kernel<<<1, kTableSize, 0, stream>>>(t, partial, out + start);
    check_launch("square_sums");
  }
}

}  // namespace tessel::kernels::cuda
