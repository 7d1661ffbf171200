// SPDX-License-Identifier: Apache-2.0
// CUDA op checks of the row kernels against the fp64 reference: softmax / log-softmax, LayerNorm,
// RMSNorm (forward, saved statistics, dx and the parameter gradients, over more rows than one
// gradient chunk) and the fused cross-entropy with ignored rows.
#include <string>
#include <utility>

#include "kernels/cuda/gpu_check.h"
#include "kernels/op_harness.h"
#include "tessel/kernels/cuda/ops/cross_entropy.h"
#include "tessel/kernels/cuda/ops/norm.h"
#include "tessel/kernels/cuda/ops/softmax.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::cuda_test {

namespace {

namespace cu = kernels::cuda;

constexpr DType kDtypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr std::pair<int64_t, int64_t> kShapes[] = {{7, 13},       {13, 33},  {33, 7},
                                                   {3, 4096 + 7}, {200, 33}, {1, 1}};

std::string tag(const char* family, DType dtype, int64_t rows, int64_t cols) {
  return std::string(family) + "/" + std::to_string(rows) + "x" + std::to_string(cols) + "/" +
         std::string(dtype_name(dtype));
}

Tensor input(Generator& gen, const Shape& shape, DType dtype, double scale = 1.0) {
  return rounded(testing::random_tensor(gen, shape, DType::F32, scale), dtype);
}

void softmax_cases(Report& r) {
  auto& ref = kernels::reference_backend();
  for (DType dtype : kDtypes)
    for (auto [rows, cols] : kShapes)
      for (bool log : {false, true}) {
        const std::string name = tag(log ? "log_softmax" : "softmax", dtype, rows, cols);
        Generator gen(uint64_t(rows * cols));
        const Tensor x = input(gen, {rows, cols}, dtype, 3.0), dy = input(gen, {rows, cols}, dtype);
        Tensor y64 = empty({rows, cols}, DType::F64), dx64 = empty({rows, cols}, DType::F64);
        ref.softmax(x.to(DType::F64), y64, log);
        const Tensor y = rounded(y64, dtype);  // backward reads y as stored
        ref.softmax_backward(y.to(DType::F64), dy.to(DType::F64), dx64, log);
        DeviceTensor dev_x(x), dev_ys(y), dev_dy(dy), dev_y(x.shape(), dtype),
            dev_dx(x.shape(), dtype);
        cu::softmax(dtype, dev_x.ptr(), dev_y.ptr(), rows, cols, log, nullptr);
        r.nmse(name, dev_y, y64, tolerance(dtype));
        cu::softmax_backward(dtype, dev_ys.ptr(), dev_dy.ptr(), dev_dx.ptr(), rows, cols, log,
                             nullptr);
        r.nmse(name + "/backward", dev_dx, dx64, tolerance(dtype) * 10);
      }
}

// Saved statistics are rounded to f32 (their dtype) before the backward on both sides.
void norm_cases(Report& r, bool rms) {
  auto& ref = kernels::reference_backend();
  const double eps = 1e-5;
  for (DType dtype : kDtypes)
    for (auto [rows, cols] : kShapes)
      for (bool affine : {true, false}) {
        const std::string name =
            tag(rms ? "rms_norm" : "layer_norm", dtype, rows, cols) + (affine ? "" : "/plain");
        Generator gen(uint64_t(rows + 7 * cols));
        const Tensor x = input(gen, {rows, cols}, dtype, 2.0), dy = input(gen, {rows, cols}, dtype);
        const Tensor w = input(gen, {cols}, dtype), b = input(gen, {cols}, dtype);
        const Tensor w64 = affine ? w.to(DType::F64) : Tensor(),
                     b64 = affine ? b.to(DType::F64) : Tensor();
        Tensor y64 = empty({rows, cols}, DType::F64), mean64 = empty({rows}, DType::F64),
               rstd64 = empty({rows}, DType::F64);
        if (rms)
          ref.rms_norm(x.to(DType::F64), w64, eps, y64, rstd64);
        else
          ref.layer_norm(x.to(DType::F64), w64, b64, eps, y64, mean64, rstd64);
        const Tensor mean = rounded(mean64, DType::F32), rstd = rounded(rstd64, DType::F32);
        Tensor dx64 = empty({rows, cols}, DType::F64), dw64 = empty({cols}, DType::F64),
               db64 = empty({cols}, DType::F64);
        Tensor dw_ref = affine ? dw64 : Tensor(), db_ref = affine ? db64 : Tensor();
        if (rms)
          ref.rms_norm_backward(dy.to(DType::F64), x.to(DType::F64), w64, rstd.to(DType::F64), dx64,
                                dw_ref);
        else
          ref.layer_norm_backward(dy.to(DType::F64), x.to(DType::F64), w64, mean.to(DType::F64),
                                  rstd.to(DType::F64), dx64, dw_ref, db_ref);

        DeviceTensor dev_x(x), dev_dy(dy), dev_w(w), dev_b(b), dev_mean_in(mean), dev_rstd_in(rstd);
        DeviceTensor dev_y(x.shape(), dtype), dev_mean({rows}, DType::F32),
            dev_rstd({rows}, DType::F32), dev_dx(x.shape(), dtype), dev_dw({cols}, dtype),
            dev_db({cols}, dtype);
        const int64_t ws_elems =
            int64_t(cu::norm_backward_workspace_bytes(rows, cols) / sizeof(float)) + 1;
        DeviceTensor ws({ws_elems}, DType::F32);
        void* wp = affine ? dev_w.ptr() : nullptr;
        if (rms) {
          cu::rms_norm(dtype, dev_x.ptr(), wp, eps, dev_y.ptr(), dev_rstd.as<float>(), rows, cols,
                       nullptr);
          cu::rms_norm_backward(dtype, dev_dy.ptr(), dev_x.ptr(), wp, dev_rstd_in.as<float>(),
                                dev_dx.ptr(), affine ? dev_dw.ptr() : nullptr, rows, cols, ws.ptr(),
                                nullptr);
        } else {
          cu::layer_norm(dtype, dev_x.ptr(), wp, affine ? dev_b.ptr() : nullptr, eps, dev_y.ptr(),
                         dev_mean.as<float>(), dev_rstd.as<float>(), rows, cols, nullptr);
          cu::layer_norm_backward(dtype, dev_dy.ptr(), dev_x.ptr(), wp, dev_mean_in.as<float>(),
                                  dev_rstd_in.as<float>(), dev_dx.ptr(),
                                  affine ? dev_dw.ptr() : nullptr, affine ? dev_db.ptr() : nullptr,
                                  rows, cols, ws.ptr(), nullptr);
          // A row mean near 0 is ill-conditioned for an f32 sum: judged against its own size.
          r.nmse(name + "/mean", dev_mean, mean64, 1e-8);
        }
        r.nmse(name, dev_y, y64, tolerance(dtype));
        r.nmse(name + "/rstd", dev_rstd, rstd64, 1e-10);
        // A one-element RMSNorm row's dx is g * rstd * eps / (x^2 + eps): in f16 it lands among
        // the subnormals, a few units of 2^-24, where storing it alone costs more than the bound.
        // f16 dx is therefore judged against the reference as f16 would store it.
        const Tensor dx_want = dtype == DType::F16 ? rounded(dx64, dtype).to(DType::F64) : dx64;
        r.nmse(name + "/dx", dev_dx, dx_want, tolerance(dtype) * 10);
        if (affine) {
          r.nmse(name + "/dweight", dev_dw, dw64, tolerance(dtype) * 10);
          if (!rms) r.nmse(name + "/dbias", dev_db, db64, tolerance(dtype) * 10);
        }
      }
}

void cross_entropy_cases(Report& r) {
  auto& ref = kernels::reference_backend();
  const int64_t ignore = -100;
  for (DType dtype : kDtypes)
    for (auto [rows, vocab] : kShapes)
      for (DType id_dtype : {DType::I32, DType::I64}) {
        const std::string name =
            tag("cross_entropy", dtype, rows, vocab) + "/" + std::string(dtype_name(id_dtype));
        Generator gen(uint64_t(rows * 3 + vocab));
        const Tensor logits = input(gen, {rows, vocab}, dtype, 4.0);
        Tensor targets = testing::random_ids(gen, {rows}, vocab, id_dtype);
        for (int64_t i = 2; i < rows; i += 3)
          store_from_double(targets.data_ptr(), id_dtype, size_t(i), double(ignore));
        const Tensor dl = rounded(testing::random_tensor(gen, {rows}, DType::F32), DType::F32);
        Tensor loss64 = empty({rows}, DType::F64), lse64 = empty({rows}, DType::F64),
               dlogits64 = empty({rows, vocab}, DType::F64);
        ref.cross_entropy(logits.to(DType::F64), targets, ignore, loss64, lse64);
        const Tensor lse = rounded(lse64, DType::F32);
        ref.cross_entropy_backward(logits.to(DType::F64), targets, lse.to(DType::F64),
                                   dl.to(DType::F64), ignore, dlogits64);
        DeviceTensor dev_logits(logits), dev_t(targets), dev_lse_in(lse), dev_dl(dl);
        DeviceTensor dev_loss({rows}, DType::F32), dev_lse({rows}, DType::F32),
            dev_dlogits(logits.shape(), dtype), dev_error(zeros({1}, DType::I32));
        cu::cross_entropy(dtype, dev_logits.ptr(), id_dtype, dev_t.ptr(), ignore,
                          dev_loss.as<float>(), dev_lse.as<float>(), rows, vocab,
                          dev_error.as<int>(), nullptr);
        r.nmse(name + "/loss", dev_loss, loss64, 1e-10);
        r.nmse(name + "/lse", dev_lse, lse64, 1e-10);
        cu::cross_entropy_backward(dtype, dev_logits.ptr(), id_dtype, dev_t.ptr(),
                                   dev_lse_in.as<float>(), dev_dl.as<float>(), ignore,
                                   dev_dlogits.ptr(), rows, vocab, dev_error.as<int>(), nullptr);
        r.nmse(name + "/dlogits", dev_dlogits, dlogits64, tolerance(dtype) * 10);
        r.check(name + "/no error", dev_error.download().data<int32_t>()[0] == 0);
      }
  // A target outside [0, V) that is not ignore_index is reported.
  const Tensor logits = zeros({2, 5}, DType::F32);
  Tensor targets = zeros({2}, DType::I64);
  targets.data<int64_t>()[1] = 5;
  DeviceTensor dev_logits(logits), dev_t(targets), dev_loss({2}, DType::F32),
      dev_lse({2}, DType::F32), dev_error(zeros({1}, DType::I32));
  cu::cross_entropy(DType::F32, dev_logits.ptr(), DType::I64, dev_t.ptr(), -100,
                    dev_loss.as<float>(), dev_lse.as<float>(), 2, 5, dev_error.as<int>(), nullptr);
  r.check("cross_entropy/bad target flagged", dev_error.download().data<int32_t>()[0] == 1);
}

}  // namespace

void row_cases(Report& r) {
  softmax_cases(r);
  norm_cases(r, false);
  norm_cases(r, true);
  cross_entropy_cases(r);
}

}  // namespace tessel::cuda_test
