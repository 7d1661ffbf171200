// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/storage.h"

#include "tessel/core/error.h"

namespace tessel {

Storage::Storage(size_t nbytes, Allocator& allocator)
    : nbytes_(nbytes), device_(allocator.device()), allocator_(&allocator) {
  if (nbytes_ > 0) data_ = allocator_->allocate(nbytes_);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

void* Storage::data() {
  TESSEL_CHECK(is_materialized(), "storage of ", nbytes_,
               " bytes is released; materialize() it first");
  return data_;
}

const void* Storage::data() const {
  return const_cast<Storage*>(this)->data();
}

void Storage::release() {
  TESSEL_CHECK(allocator_ != nullptr, "cannot release storage that wraps external memory");
  allocator_->deallocate(data_, nbytes_);
  data_ = nullptr;
}

void Storage::rebind(void* data, Allocator& allocator) {
  TESSEL_CHECK(allocator_ != nullptr, "cannot rebind storage that wraps external memory");
  if (data_ != nullptr) allocator_->deallocate(data_, nbytes_);
  data_ = data;
  allocator_ = &allocator;
  device_ = allocator.device();
}

void Storage::materialize() {
  if (is_materialized()) return;
  data_ = allocator_->allocate(nbytes_);
}

}  // namespace tessel
