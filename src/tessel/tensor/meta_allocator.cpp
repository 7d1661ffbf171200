// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/meta_allocator.h"

namespace tessel {

namespace {

// What a meta allocation returns: not null, so that a meta Storage knows whether it holds its
// (counted) bytes, and can be released and materialised as ZeRO-3 does with its parameters.
// Never dereferenced: every data access to a meta tensor is refused before it reaches here.
alignas(64) char kMetaAddress[64];

}  // namespace

void* MetaAllocator::allocate(size_t nbytes) {
  count_alloc(nbytes);
  return kMetaAddress;
}

void MetaAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;  // a released storage: its bytes were counted out then
  count_free(nbytes);
}

MetaAllocator& meta_allocator() {
  static MetaAllocator allocator;
  return allocator;
}

}  // namespace tessel
