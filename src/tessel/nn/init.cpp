// SPDX-License-Identifier: Apache-2.0
// Parameter initialisers.
#include "tessel/nn/init.h"

#include "tessel/autograd/grad_mode.h"

namespace tessel::nn::init {

void normal_(Tensor& t, double std, Generator* generator, double mean) {
  TESSEL_CHECK(std >= 0, "init::normal_: std ", std, " must be >= 0");
  autograd::NoGradGuard no_grad;
  Tensor r = randn(t.shape(), DType::F32, generator);
  float* p = r.data<float>();
  const int64_t n = r.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = float(mean + std * double(p[i]));
  t.copy_from(r);
}

void zeros_(Tensor& t) {
  autograd::NoGradGuard no_grad;
  t.fill(0.0);
}

void ones_(Tensor& t) {
  autograd::NoGradGuard no_grad;
  t.fill(1.0);
}

}  // namespace tessel::nn::init
