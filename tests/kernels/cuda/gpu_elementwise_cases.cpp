// SPDX-License-Identifier: Apache-2.0
// CUDA op checks: unary ops and their gradients, broadcasting binary ops (against the fp64
// reference), casts and dropout (bit for bit against the CPU backend).
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_check.h"
#include "kernels/op_harness.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/cuda/ops/cast.h"
#include "tessel/kernels/cuda/ops/dropout.h"
#include "tessel/kernels/cuda/ops/elementwise.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::cuda_test {

namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;
namespace cu = kernels::cuda;

constexpr DType kDtypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr int64_t kSizes[] = {7, 13, 33, 4096 + 7};

std::string tag(DType dtype, int64_t n) {
  return std::string(dtype_name(dtype)) + "/" + std::to_string(n);
}

Tensor unary_input(UnaryOp op, int64_t n, DType dtype) {
  Generator gen(uint64_t(op) * 7 + uint64_t(n));
  Tensor x = testing::random_tensor(gen, {n}, DType::F32, 2.0);
  const bool positive =
      op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Pow;
  for (int64_t i = 0; positive && i < n; ++i)
    x.data<float>()[i] = std::fabs(x.data<float>()[i]) + 0.1f;
  return rounded(x, dtype);
}

void unary_cases(Report& r) {
  const UnaryOp ops[] = {UnaryOp::Neg,     UnaryOp::Exp,       UnaryOp::Log,    UnaryOp::Sqrt,
                         UnaryOp::Rsqrt,   UnaryOp::Abs,       UnaryOp::Square, UnaryOp::Tanh,
                         UnaryOp::Sigmoid, UnaryOp::Relu,      UnaryOp::Gelu,   UnaryOp::Silu,
                         UnaryOp::Scale,   UnaryOp::AddScalar, UnaryOp::Pow};
  auto& ref = kernels::reference_backend();
  for (DType dtype : kDtypes)
    for (UnaryOp op : ops)
      for (int64_t n : kSizes) {
        const double alpha = op == UnaryOp::Pow ? 1.7 : 0.75;
        const std::string name =
            "unary/" + std::string(kernels::unary_name(op)) + "/" + tag(dtype, n);
        const Tensor x = unary_input(op, n, dtype);
        Generator gen(uint64_t(n) + 1);
        const Tensor dy = rounded(testing::random_tensor(gen, {n}, DType::F32), dtype);
        const Tensor x64 = x.to(DType::F64), dy64 = dy.to(DType::F64);
        Tensor y64 = empty_like(x64), dx64 = empty_like(x64);
        ref.unary(op, x64, y64, alpha);
        // The backward reads the forward output as it is stored, as on the device.
        const Tensor y = rounded(y64, dtype);
        ref.unary_backward(op, x64, y.to(DType::F64), dy64, dx64, alpha);

        DeviceTensor dev_x(x), dev_dy(dy), dev_ystored(y);
        DeviceTensor dev_y(x.shape(), dtype), dev_dx(x.shape(), dtype);
        cu::unary(op, dtype, dev_x.ptr(), dev_y.ptr(), n, alpha, nullptr);
        r.nmse(name, dev_y, y64, tolerance(dtype));
        cu::unary_backward(op, dtype, dev_x.ptr(), dev_ystored.ptr(), dev_dy.ptr(), dev_dx.ptr(), n,
                           alpha, nullptr);
        r.nmse(name + "/backward", dev_dx, dx64, tolerance(dtype) * 10);
      }
}

void binary_cases(Report& r) {
  struct Shapes {
    Shape a, b, out;
  };
  const Shapes shapes[] = {{{7, 13}, {7, 13}, {7, 13}},
                           {{33, 13}, {13}, {33, 13}},
                           {{13, 1}, {1, 7}, {13, 7}},
                           {{2, 1, 7}, {3, 1}, {2, 3, 7}},
                           {{5, 4096 + 7}, {5, 1}, {5, 4096 + 7}},
                           {{1}, {33}, {33}}};
  auto& ref = kernels::reference_backend();
  for (DType dtype : kDtypes)
    for (BinaryOp op :
         {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min})
      for (const Shapes& s : shapes) {
        Generator gen(uint64_t(op) + 40);
        const Tensor a = rounded(testing::random_tensor(gen, s.a, DType::F32), dtype);
        Tensor b = testing::random_tensor(gen, s.b, DType::F32);
        for (int64_t i = 0; op == BinaryOp::Div && i < b.numel(); ++i)
          b.data<float>()[i] =
              std::copysign(std::fabs(b.data<float>()[i]) + 0.5f, b.data<float>()[i]);
        b = rounded(b, dtype);
        Tensor want = empty(s.out, DType::F64);
        ref.binary(op, a.to(DType::F64), b.to(DType::F64), want);
        DeviceTensor da(a), db(b), dout(s.out, dtype);
        cu::binary(op, dtype, da.ptr(), a.shape().dims(), db.ptr(), b.shape().dims(), dout.ptr(),
                   s.out.dims(), nullptr);
        r.nmse("binary/" + std::string(kernels::binary_name(op)) + "/" +
                   std::to_string(s.out.numel()) + "/" + std::string(dtype_name(dtype)),
               dout, want, tolerance(dtype));
      }
}

// Casts: the same bits as the CPU's conversion, on values that include ties, subnormals of both
// formats, overflow, infinities and NaN.
void cast_cases(Report& r) {
  Generator gen(3);
  Tensor x = testing::random_tensor(gen, {4096 + 7}, DType::F32, 100.0);
  const float specials[] = {0.0f,  -0.0f,        1.0f + 1.0f / 256, 65520.0f,  65504.0f, 1e-7f,
                            3e-8f, 1e-40f,       INFINITY,          -INFINITY, NAN,      3.0e38f,
                            -1.5f, 2.9802322e-8f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i)
    x.data<float>()[i] = specials[i];
  for (int64_t i = 100; i < 1100; ++i) x.data<float>()[i] *= 1e-6f;  // f16 subnormal range
  const std::pair<DType, DType> pairs[] = {{DType::F32, DType::BF16}, {DType::F32, DType::F16},
                                           {DType::BF16, DType::F32}, {DType::F16, DType::F32},
                                           {DType::BF16, DType::F16}, {DType::F16, DType::BF16},
                                           {DType::F32, DType::F32}};
  for (auto [from, to] : pairs) {
    const Tensor src = from == DType::F32 ? x : x.to(from);
    Tensor want = empty(src.shape(), to);
    kernels::cpu_backend().convert(src, want);
    DeviceTensor dsrc(src), ddst(src.shape(), to);
    cu::convert(from, dsrc.ptr(), to, ddst.ptr(), src.numel(), nullptr);
    const std::string name =
        "convert/" + std::string(dtype_name(from)) + "->" + std::string(dtype_name(to));
    r.bitwise(name, ddst.download(), want);
    r.check(name + " guards", ddst.guards_intact());
  }
}

// Dropout: the device mask and values equal the CPU backend's bit for bit.
void dropout_cases(Report& r) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (int64_t n : {int64_t(7), int64_t(13), int64_t(33), int64_t(4096 + 7), int64_t(1000003)})
      for (double p : {0.0, 0.1, 0.5, 1.0 / 3.0, 1.0})
        for (uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(1) << 40}) {
          Generator gen(static_cast<uint64_t>(n));
          const Tensor x = rounded(testing::random_tensor(gen, {n}, DType::F32), dtype);
          const uint64_t seed = 1234567 + uint64_t(n);
          Tensor want = empty_like(x);
          kernels::cpu_backend().dropout(x, want, p, seed, offset);
          DeviceTensor dx(x), dy(x.shape(), dtype);
          cu::dropout(dtype, dx.ptr(), dy.ptr(), n, p, seed, offset, nullptr);
          const std::string name = "dropout/" + tag(dtype, n) + "/p" + std::to_string(p) + "/off" +
                                   std::to_string(offset);
          r.bitwise(name, dy.download(), want);
          r.check(name + " guards", dy.guards_intact());
        }
}

}  // namespace

void elementwise_cases(Report& r) {
  unary_cases(r);
  binary_cases(r);
  cast_cases(r);
  dropout_cases(r);
}

}  // namespace tessel::cuda_test
