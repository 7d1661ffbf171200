// SPDX-License-Identifier: Apache-2.0
// Parameter initialisers, and their deferred form (recipes computed per element later).
#include "tessel/nn/init.h"

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/threads.h"
#include "tessel/nn/module.h"

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

float InitRecipe::at(uint64_t index) const {
  if (kind == Constant) return float(value);
  // randn stores the f32 draw, normal_ then scales it in double and rounds once: the same here.
  return float(mean + std * double(normal_at(seed, offset, index)));
}

void InitRecipe::fill(uint64_t first, int64_t n, float* dst) const {
  if (kind == Constant) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float(value);
    return;
  }
  parallel_for(0, n, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = at(first + uint64_t(i));
  });
}

const InitRecipe* InitRecord::find(const Tensor& t) const {
  auto it = recipes_.find(t.storage_ptr().get());
  return it == recipes_.end() ? nullptr : &it->second;
}

namespace {
thread_local InitRecord* current_record = nullptr;
}  // namespace

DeferInit::DeferInit(InitRecord& record) : previous_(current_record) {
  current_record = &record;
}

DeferInit::~DeferInit() {
  current_record = previous_;
}

InitRecord* deferred_record() {
  return current_record;
}

std::map<std::string, InitRecipe> recipes_by_name(const Module& module, const InitRecord& record) {
  std::map<std::string, InitRecipe> out;
  for (const auto& [name, p] : module.named_parameters()) {
    const InitRecipe* r = record.find(p);
    TESSEL_CHECK(r != nullptr, "deferred init: parameter '", name, "' of ", module.type_name(),
                 " was built without a recipe (built outside the DeferInit scope?)");
    out.emplace(name, *r);
  }
  return out;
}

}  // namespace tessel::nn::init
