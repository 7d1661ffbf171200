// SPDX-License-Identifier: Apache-2.0
// CRC-32C (Castagnoli's polynomial, as in iSCSI, RFC 3720): the checksum of checkpoint manifests
// (train/checkpoint/checkpoint.h) and of TFRecord framing (tensorboard_events.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessel::io {

// The CRC of `size` bytes continuing from `crc` (0 to start; a previous result to chain calls).
// Hardware instructions where the build targets SSE4.2, slice-by-8 tables otherwise.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

namespace detail {
// The table path, which stands in for the hardware path on CPUs without SSE4.2; the tests compare
// the two.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc);
}  // namespace detail

}  // namespace tessel::io
