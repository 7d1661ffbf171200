// SPDX-License-Identifier: Apache-2.0
// CudaBackend's index-driven ops: embedding, its backward (ops/embedding.h) and rope (ops/rope.h).
// The CPU checks cover shapes and dtypes; the ids and positions themselves live on the device,
// where the launchers check them and raise an error flag. It is read after the stream
// synchronises (so these ops wait for the device), and the Error names the first bad index as
// the CPU's does. Unlike the CPU, the outputs are then partly written (bad rows zeroed, bad
// tokens left as they were).
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cuda/cuda_adapter.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/kernels/cuda/ops/embedding.h"
#include "tessel/kernels/cuda/ops/rope.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

namespace {

void throw_bad_id(std::string_view op, const Tensor& ids, int64_t vocab) {
  const BadIndex bad = first_bad_index(ids, vocab);
  TESSEL_FAIL(op, ": id ", bad.value, " at position ", bad.position, " is out of range [0, ", vocab,
              ") for V = ", vocab);
}

}  // namespace

void CudaBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const RowShape r = validate_embedding(*this, weight, ids, out);
  check_on_device("embedding", {&weight, &ids, &out});
  if (r.rows == 0 || r.cols == 0) return;
  DeviceGuard guard(device_);
  DeviceFlag error(device_);
  kernels::cuda::embedding(weight.dtype(), device_data(weight), ids.dtype(), device_data(ids),
                           device_data(out), r.rows, weight.size(0), r.cols, error.get(),
                           stream(device_));
  if (error.raised()) throw_bad_id("embedding", ids, weight.size(0));
}

void CudaBackend::embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  const RowShape r = validate_embedding_backward(*this, dout, ids, dweight);
  check_on_device("embedding_backward", {&dout, &ids, &dweight});
  if (r.rows == 0 || r.cols == 0) return;
  DeviceGuard guard(device_);
  DeviceFlag error(device_);
  Tensor workspace = device_workspace(device_, embedding_backward_workspace_bytes(r.rows));
  kernels::cuda::embedding_backward(dweight.dtype(), device_data(dout), ids.dtype(),
                                    device_data(ids), device_data(dweight), r.rows, dweight.size(0),
                                    r.cols, device_data(workspace), error.get(), stream(device_));
  if (error.raised()) throw_bad_id("embedding_backward", ids, dweight.size(0));
}

void CudaBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin,
                       const Tensor& positions, bool inverse, Tensor& out) {
  const RopeShape r = validate_rope(*this, x, cos, sin, positions, out);
  check_on_device("rope", {&x, &cos, &sin, &positions, &out});
  if (r.tokens == 0 || r.heads == 0) return;
  DeviceGuard guard(device_);
  DeviceFlag error(device_);
  kernels::cuda::rope(x.dtype(), device_data(x), static_cast<const float*>(device_data(cos)),
                      static_cast<const float*>(device_data(sin)), positions.dtype(),
                      device_data(positions), inverse, device_data(out), x.size(0), x.size(1),
                      r.heads, r.dim, r.table_rows, error.get(), stream(device_));
  if (error.raised()) {
    const BadIndex bad = first_bad_index(positions, r.table_rows);
    const int64_t t = x.size(1);
    TESSEL_FAIL("rope: position ", bad.value, " at [", bad.position / t, ", ", bad.position % t,
                "] is out of range [0, ", r.table_rows, ") (the cos / sin tables have ",
                r.table_rows, " rows)");
  }
}

}  // namespace tessel::kernels::cuda
