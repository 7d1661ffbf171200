// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/memory_source.h"

#include <cstdlib>

#include "tessel/core/error.h"

namespace tessel {

BudgetedHostSource::~BudgetedHostSource() = default;

void* BudgetedHostSource::acquire(size_t nbytes) {
  if (nbytes > budget_ - used_) return nullptr;
  size_t rounded = (nbytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) return nullptr;
  used_ += nbytes;
  ++acquires_;
  return p;
}

void BudgetedHostSource::release(void* ptr, size_t nbytes) {
  TESSEL_CHECK(nbytes <= used_, "BudgetedHostSource: releasing ", nbytes, " bytes with only ",
               used_, " acquired");
  std::free(ptr);
  used_ -= nbytes;
  ++releases_;
}

std::string BudgetedHostSource::describe() const {
  return "host memory budget of " + std::to_string(budget_) + " bytes, " +
         std::to_string(budget_ - used_) + " not yet acquired";
}

}  // namespace tessel
