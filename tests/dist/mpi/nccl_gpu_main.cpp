// SPDX-License-Identifier: Apache-2.0
// Every collective of the NCCL communicator on CUDA memory, against values computed on the host:
// each dtype, odd element counts, in-place and out-of-place, blocking and asynchronous. Runs on
// any world (one GPU per rank; NCCL refuses two ranks on one GPU); exits 77 (CTest's skip code)
// where no CUDA device is visible, so the suite stays meaningful on machines without a GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tessel/dist/nccl/nccl.h"
#include "tessel/dist/world.h"

using namespace tessel;
using namespace tessel::dist;

namespace {

int g_failures = 0;
int g_checks = 0;

void cuda_ok(cudaError_t e, const char* what) {
  TESSEL_CHECK(e == cudaSuccess, what, ": ", cudaGetErrorString(e));
}

// A CUDA buffer with a host mirror; freed on destruction.
struct DeviceBuffer {
  Tensor view;
  void* ptr = nullptr;
  DeviceBuffer(int64_t n, DType dtype, int device) {
    cuda_ok(cudaMalloc(&ptr, size_t(n) * dtype_size(dtype) + 1), "cudaMalloc");
    view = cuda_tensor_view(ptr, Shape({n}), dtype, device);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const std::vector<double>& values) {
    Tensor h = from_data<double>(values, Shape({int64_t(values.size())})).to(view.dtype());
    cuda_ok(cudaMemcpy(ptr, h.data_ptr(), h.nbytes(), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<double> download() const {
    Tensor h = empty(view.shape(), view.dtype());
    cuda_ok(cudaMemcpy(h.data_ptr(), ptr, h.nbytes(), cudaMemcpyDeviceToHost), "download");
    return h.to_vector<double>();
  }
};

// Small integers: exact in every dtype, sums of a few ranks too (bf16 holds integers to 256).
double value(int rank, int64_t i) {
  return double(rank + 1) + double(i % 5);
}

void expect_equal(const std::string& what, const std::vector<double>& got,
                  const std::vector<double>& want, double tol) {
  ++g_checks;
  if (got.size() != want.size()) {
    std::fprintf(stderr, "FAIL %s: %zu elements, expected %zu\n", what.c_str(), got.size(),
                 want.size());
    ++g_failures;
    return;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * std::max(1.0, std::fabs(want[i]))) {
      std::fprintf(stderr, "FAIL %s: element %zu is %g, expected %g\n", what.c_str(), i, got[i],
                   want[i]);
      ++g_failures;
      return;
    }
  }
}

std::vector<double> rank_values(int rank, int64_t n, int64_t first = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(rank, first + i);
  return v;
}

void check_dtype(Communicator& c, DType dt, int64_t n) {
  const int w = c.size(), r = c.rank(), dev = c.device().index;
  const std::string tag = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
  // Integer-valued data: sums exact in any order (0 for f32 and integers); the half types round
  // Avg's division and large sums once, 2^-8 / 2^-11 relative, inside 1e-2 / 1e-3.
  const double tol = dt == DType::BF16 ? 1e-2 : dt == DType::F16 ? 1e-3 : 0.0;
  const bool floating = dt == DType::F32 || dt == DType::BF16 || dt == DType::F16;

  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    if (op == ReduceOp::Avg && !floating) continue;
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double s = 0, m = -1e30;
      for (int q = 0; q < w; ++q) {
        s += value(q, i);
        m = std::max(m, value(q, i));
      }
      want[size_t(i)] = op == ReduceOp::Sum ? s : op == ReduceOp::Avg ? s / w : m;
    }
    const char* name = op == ReduceOp::Sum ? "sum" : op == ReduceOp::Avg ? "avg" : "max";
    DeviceBuffer a(n, dt, dev), b(n, dt, dev);
    a.upload(rank_values(r, n));
    c.all_reduce(a.view, op);  // in place
    expect_equal("all_reduce(" + std::string(name) + ") in place " + tag, a.download(), want, tol);
    a.upload(rank_values(r, n));
    c.all_reduce(a.view, b.view, op);
    expect_equal("all_reduce(" + std::string(name) + ") " + tag, b.download(), want, tol);
    a.upload(rank_values(r, n));
    c.all_reduce_async(a.view, op)->wait();
    expect_equal("all_reduce_async(" + std::string(name) + ") " + tag, a.download(), want, tol);
  }

  {  // reduce_scatter: block r of the sum over ranks of an [n * w] input
    DeviceBuffer in(n * w, dt, dev), out(n, dt, dev);
    in.upload(rank_values(r, n * w));
    c.reduce_scatter(in.view, out.view);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int q = 0; q < w; ++q) want[size_t(i)] += value(q, r * n + i);
    expect_equal("reduce_scatter " + tag, out.download(), want, tol);
  }
  {  // all_gather, out of place and in place (in = block `rank` of out)
    DeviceBuffer in(n, dt, dev), out(n * w, dt, dev);
    in.upload(rank_values(r, n));
    c.all_gather(in.view, out.view);
    std::vector<double> want;
    for (int q = 0; q < w; ++q)
      for (double x : rank_values(q, n)) want.push_back(x);
    expect_equal("all_gather " + tag, out.download(), want, tol);
    std::vector<double> mine(size_t(n * w), 0.0);
    for (int64_t i = 0; i < n; ++i) mine[size_t(r * n + i)] = value(r, i);
    out.upload(mine);
    c.all_gather_async(out.view.narrow(0, r * n, n), out.view)->wait();
    expect_equal("all_gather_async in place " + tag, out.download(), want, tol);
  }
  {  // all_gather_v: rank q contributes n + q elements
    std::vector<int64_t> counts(static_cast<size_t>(w));
    int64_t total = 0;
    for (int q = 0; q < w; ++q) total += counts[size_t(q)] = n + q;
    DeviceBuffer in(n + r, dt, dev), out(total, dt, dev);
    in.upload(rank_values(r, n + r));
    c.all_gather_v(in.view, out.view, counts);
    std::vector<double> want;
    for (int q = 0; q < w; ++q)
      for (double x : rank_values(q, n + q)) want.push_back(x);
    expect_equal("all_gather_v " + tag, out.download(), want, tol);
  }
  {  // all_to_all: block q of this rank's input goes to rank q
    DeviceBuffer in(n * w, dt, dev), out(n * w, dt, dev);
    in.upload(rank_values(r, n * w));
    c.all_to_all(in.view, out.view);
    std::vector<double> want;
    for (int q = 0; q < w; ++q)
      for (double x : rank_values(q, n, int64_t(r) * n)) want.push_back(x);
    expect_equal("all_to_all " + tag, out.download(), want, tol);
  }
  {  // all_to_all_v: rank r sends n + q elements to rank q
    std::vector<int64_t> in_counts(static_cast<size_t>(w)), out_counts(static_cast<size_t>(w));
    int64_t in_total = 0, out_total = 0;
    for (int q = 0; q < w; ++q) {
      in_total += in_counts[size_t(q)] = n + q;
      out_total += out_counts[size_t(q)] = n + r;
    }
    DeviceBuffer in(in_total, dt, dev), out(out_total, dt, dev);
    in.upload(rank_values(r, in_total));
    c.all_to_all_v(in.view, in_counts, out.view, out_counts);
    std::vector<double> want;
    for (int q = 0; q < w; ++q) {
      int64_t first = 0;  // where rank q's block for rank r starts in q's input
      for (int p = 0; p < r; ++p) first += n + p;
      for (double x : rank_values(q, n + r, first)) want.push_back(x);
    }
    expect_equal("all_to_all_v " + tag, out.download(), want, tol);
  }
  {  // broadcast from the last rank
    DeviceBuffer t(n, dt, dev);
    t.upload(rank_values(r, n));
    c.broadcast(t.view, w - 1);
    expect_equal("broadcast " + tag, t.download(), rank_values(w - 1, n), tol);
  }
  if (w > 1) {  // a ring of send/recv (asynchronous sends, so no rank waits on its own send)
    DeviceBuffer s(n, dt, dev), t(n, dt, dev);
    s.upload(rank_values(r, n));
    WorkPtr send = c.send_async(s.view, (r + 1) % w, 7);
    c.recv(t.view, (r + w - 1) % w, 7);
    send->wait();
    expect_equal("send/recv ring " + tag, t.download(), rank_values((r + w - 1) % w, n), tol);
  }
  c.barrier();
}

}  // namespace

int main() {
  if (!nccl_compiled_in()) {
    std::printf("skipped: this build has no NCCL backend\n");
    return 77;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device is visible\n");
    return 77;
  }
  try {
    CommPtr world = init_world();
    CommPtr nccl = make_nccl_communicator(*world);
    int version = 0;
    ncclGetVersion(&version);
    if (nccl->rank() == 0)
      std::printf("nccl %d communicator '%s': %d rank(s), rank 0 on %s\n", version,
                  nccl->label().c_str(), nccl->size(), nccl->device().str().c_str());
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64})
      for (int64_t n : {7, 13, 33, (1 << 20) + 3}) check_dtype(*nccl, dt, n);
    std::printf("rank %d: %d checks, %d failures\n", nccl->rank(), g_checks, g_failures);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return g_failures == 0 ? 0 : 1;
}
