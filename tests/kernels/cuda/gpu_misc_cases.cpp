// SPDX-License-Identifier: Apache-2.0
// CUDA op checks against the fp64 reference: reductions over every dim subset of a 3-d tensor,
// multi-tensor square sums, embedding gather and its deterministic scatter-add (bitwise equal to
// the CPU backend in f32), rotary embeddings (both directions, in place) and multi-tensor AdamW.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_check.h"
#include "kernels/op_harness.h"
#include "tessel/kernels/cuda/ops/adamw.h"
#include "tessel/kernels/cuda/ops/embedding.h"
#include "tessel/kernels/cuda/ops/reduce.h"
#include "tessel/kernels/cuda/ops/rope.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::cuda_test {

namespace {

using kernels::ReduceOp;
namespace cu = kernels::cuda;

constexpr DType kDtypes[] = {DType::F32, DType::BF16, DType::F16};

Tensor input(Generator& gen, const Shape& shape, DType dtype, double scale = 1.0) {
  return rounded(testing::random_tensor(gen, shape, DType::F32, scale), dtype);
}

void reduce_cases(Report& r) {
  auto& ref = kernels::reference_backend();
  const std::vector<std::pair<Shape, std::vector<int>>> cases = {
      {{7, 13, 5}, {0}},    {{7, 13, 5}, {1}},       {{7, 13, 5}, {2}},
      {{7, 13, 5}, {0, 2}}, {{7, 13, 5}, {0, 1, 2}}, {{33, 1, 13}, {1}},
      {{4096 + 7}, {0}},    {{3, 4096 + 7}, {1}},    {{4096 + 7, 3}, {0}}};
  for (DType dtype : kDtypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min})
      for (const auto& [shape, dims] : cases) {
        Generator gen(uint64_t(shape.numel()) + dims.size());
        const Tensor x = input(gen, shape, dtype);
        std::vector<int64_t> out_dims(shape.dims().begin(), shape.dims().end());
        for (int d : dims) out_dims[size_t(d)] = 1;
        const Shape out_shape(out_dims);
        Tensor want = empty(out_shape, DType::F64);
        ref.reduce(op, x.to(DType::F64), dims, want);
        DeviceTensor dx(x), dout(out_shape, dtype);
        cu::reduce(op, dtype, dx.ptr(), shape.dims(), dims, dout.ptr(), nullptr);
        std::string name = "reduce/" + std::string(kernels::reduce_name(op)) + "/" +
                           std::to_string(shape.numel()) + "/dims";
        for (int d : dims) name += std::to_string(d);
        r.nmse(name + "/" + std::string(dtype_name(dtype)), dout, want,
               dtype == DType::F32 ? 1e-10 : tolerance(dtype));
      }
}

void square_sum_cases(Report& r) {
  Generator gen(17);
  std::vector<Tensor> host;
  const int64_t sizes[] = {7, 0, 13, 33, 8192, 8192 + 7, 3 * 8192 + 1, 1};
  for (int i = 0; i < 37; ++i)  // more tensors than one launch's table
    host.push_back(input(gen, {sizes[i % 8] == 0 ? 0 : sizes[i % 8] + i}, kDtypes[i % 3]));
  std::vector<std::unique_ptr<DeviceTensor>> dev;
  std::vector<cu::SquareSumInput> in;
  std::vector<Tensor> f64;
  for (const Tensor& t : host) {
    dev.push_back(std::make_unique<DeviceTensor>(t));
    in.push_back({dev.back()->ptr(), t.dtype(), t.numel()});
    f64.push_back(t.to(DType::F64));
  }
  std::vector<double> want(host.size());
  kernels::reference_backend().square_sums(f64, want);
  const int64_t ws = int64_t(cu::square_sums_workspace_bytes(in) / sizeof(double));
  DeviceTensor dws({ws}, DType::F64), dout({int64_t(host.size())}, DType::F64);
  cu::square_sums(in, dout.as<double>(), dws.ptr(), nullptr);
  r.nmse("square_sums/37 tensors", dout, from_data(want, {int64_t(want.size())}), 1e-24);
  r.check("square_sums workspace guards", dws.guards_intact());
}

void embedding_cases(Report& r) {
  struct Case {
    int64_t n, vocab, cols;
  };
  for (DType dtype : kDtypes)
    for (DType id_dtype : {DType::I32, DType::I64})
      for (Case c : {Case{33, 13, 7}, Case{7, 50, 33}, Case{300, 50, 4096 + 7}, Case{1, 1, 1}}) {
        const std::string name = "embedding/" + std::to_string(c.n) + "x" +
                                 std::to_string(c.vocab) + "x" + std::to_string(c.cols) + "/" +
                                 std::string(dtype_name(dtype)) + "/" +
                                 std::string(dtype_name(id_dtype));
        Generator gen(uint64_t(c.n * c.cols));
        const Tensor weight = input(gen, {c.vocab, c.cols}, dtype);
        const Tensor ids = testing::random_ids(gen, {c.n}, c.vocab, id_dtype);  // with repeats
        const Tensor dout = input(gen, {c.n, c.cols}, dtype);
        Tensor out_want = empty({c.n, c.cols}, dtype);
        kernels::cpu_backend().embedding(weight, ids, out_want);
        Tensor dweight_want = weight.clone();  // backward accumulates into it
        kernels::cpu_backend().embedding_backward(dout, ids, dweight_want);

        DeviceTensor dw(weight), did(ids), ddout(dout), dout_dev({c.n, c.cols}, dtype),
            ddweight(weight), derr(zeros({1}, DType::I32));
        const int64_t ws = int64_t(cu::embedding_backward_workspace_bytes(c.n)) + 1;
        DeviceTensor dws({ws}, DType::I8);
        cu::embedding(dtype, dw.ptr(), id_dtype, did.ptr(), dout_dev.ptr(), c.n, c.vocab, c.cols,
                      derr.as<int>(), nullptr);
        r.bitwise(name, dout_dev.download(), out_want);
        r.check(name + " guards", dout_dev.guards_intact());
        cu::embedding_backward(dtype, ddout.ptr(), id_dtype, did.ptr(), ddweight.ptr(), c.n,
                               c.vocab, c.cols, dws.ptr(), derr.as<int>(), nullptr);
        // The CPU adds in id order with one f32 sum per element: the same order as the device.
        r.bitwise(name + "/backward", ddweight.download(), dweight_want);
        r.check(name + "/backward guards", ddweight.guards_intact() && dws.guards_intact());
        r.check(name + "/no error", derr.download().data<int32_t>()[0] == 0);
      }
  Tensor ids = zeros({3}, DType::I64);
  ids.data<int64_t>()[1] = 4;  // vocab is 4
  DeviceTensor dw(ones({4, 5}, DType::F32)), did(ids), dout({3, 5}, DType::F32),
      derr(zeros({1}, DType::I32));
  cu::embedding(DType::F32, dw.ptr(), DType::I64, did.ptr(), dout.ptr(), 3, 4, 5, derr.as<int>(),
                nullptr);
  r.check("embedding/bad id flagged", derr.download().data<int32_t>()[0] == 1);
}

void rope_cases(Report& r) {
  auto& ref = kernels::reference_backend();
  struct Case {
    int64_t b, t, h, d, p;
  };
  for (DType dtype : kDtypes)
    for (Case c : {Case{2, 7, 3, 8, 13}, Case{1, 13, 2, 34, 33}, Case{3, 33, 1, 2, 40},
                   Case{1, 3, 2, 4096 + 6, 5}})
      for (bool inverse : {false, true})
        for (bool in_place : {false, true}) {
          const std::string name = "rope/" + std::to_string(c.b * c.t * c.h * c.d) + "/" +
                                   std::string(dtype_name(dtype)) + (inverse ? "/inverse" : "") +
                                   (in_place ? "/in_place" : "");
          Generator gen(uint64_t(c.d + c.t));
          const Tensor x = input(gen, {c.b, c.t, c.h, c.d}, dtype);
          const Tensor cos = testing::random_tensor(gen, {c.p, c.d / 2}, DType::F32);
          const Tensor sin = testing::random_tensor(gen, {c.p, c.d / 2}, DType::F32);
          const Tensor pos = testing::random_ids(gen, {c.b, c.t}, c.p, DType::I32);
          Tensor want = empty(x.shape(), DType::F64);
          ref.rope(x.to(DType::F64), cos.to(DType::F64), sin.to(DType::F64), pos, inverse, want);
          DeviceTensor dx(x), dcos(cos), dsin(sin), dpos(pos), dout(x.shape(), dtype),
              derr(zeros({1}, DType::I32));
          const DeviceTensor& target = in_place ? dx : dout;
          cu::rope(dtype, dx.ptr(), dcos.as<float>(), dsin.as<float>(), DType::I32, dpos.ptr(),
                   inverse, target.ptr(), c.b, c.t, c.h, c.d, c.p, derr.as<int>(), nullptr);
          r.nmse(name, target, want, tolerance(dtype));
          r.check(name + "/no error", derr.download().data<int32_t>()[0] == 0);
        }
}

void adamw_cases(Report& r) {
  auto& ref = kernels::reference_backend();
  for (int64_t step : {1, 7}) {
    kernels::AdamWParams h;
    h.lr = 3e-3;
    h.weight_decay = 0.1;
    h.step = step;
    Generator gen(static_cast<uint64_t>(step));
    std::vector<std::unique_ptr<DeviceTensor>> dev;
    std::vector<cu::AdamWTensor> list;
    std::vector<Tensor> want;
    for (int i = 0; i < 35; ++i) {  // more tensors than one launch's table
      const int64_t n = (i % 4 == 3) ? 4096 + 7 : 7 + 13 * i;
      const Tensor p = input(gen, {n}, DType::F32), g = input(gen, {n}, DType::F32);
      const Tensor m = input(gen, {n}, DType::F32, 0.1);
      Tensor v = input(gen, {n}, DType::F32, 0.1);
      for (int64_t k = 0; k < n; ++k) v.data<float>()[k] = std::abs(v.data<float>()[k]);
      const bool decay = i % 2 == 0;
      Tensor p64 = p.to(DType::F64), m64 = m.to(DType::F64), v64 = v.to(DType::F64);
      kernels::AdamWParams hi = h;
      hi.weight_decay = decay ? h.weight_decay : 0.0;
      ref.adamw(p64, g.to(DType::F64), m64, v64, hi);
      want.push_back(p64);
      want.push_back(m64);
      want.push_back(v64);
      for (const Tensor& t : {p, g, m, v}) dev.push_back(std::make_unique<DeviceTensor>(t));
      const size_t k = dev.size() - 4;
      list.push_back({dev[k]->as<float>(), dev[k + 1]->as<float>(), dev[k + 2]->as<float>(),
                      dev[k + 3]->as<float>(), n, decay});
    }
    cu::adamw(list, h, nullptr);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string name = "adamw/step" + std::to_string(step) + "/tensor" + std::to_string(i);
      r.nmse(name + "/param", *dev[4 * i], want[3 * i], 1e-10);
      r.nmse(name + "/m", *dev[4 * i + 2], want[3 * i + 1], 1e-10);
      r.nmse(name + "/v", *dev[4 * i + 3], want[3 * i + 2], 1e-10);
    }
  }
}

}  // namespace

void misc_cases(Report& r) {
  reduce_cases(r);
  square_sum_cases(r);
  embedding_cases(r);
  rope_cases(r);
  adamw_cases(r);
}

}  // namespace tessel::cuda_test
