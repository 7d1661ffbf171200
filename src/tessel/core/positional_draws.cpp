// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/positional_draws.h"

#include "tessel/core/error.h"

namespace tessel {

uint64_t site_id(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, 64-bit
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

namespace {
constexpr uint64_t kMicroBatchBits = 0xFFFFFFFFull;  // the offset's low half: the micro-batch
}

uint64_t positional_seed(const Generator& generator, uint64_t site) {
  // The step's stream: every micro-batch reads it, at its own rows (positional_block).
  const auto r = philox4x32(generator.offset() & ~kMicroBatchBits, site, generator.seed());
  return uint64_t(r[0]) | (uint64_t(r[1]) << 32);
}

std::array<uint64_t, 2> positional_stream(const Generator& generator, const PositionalDraw& draw,
                                          uint64_t n) {
  TESSEL_CHECK(draw.parts >= 1 && draw.part >= 0 && draw.part < draw.parts,
               "positional draw: part ", draw.part, " of ", draw.parts,
               " (expected 0 <= part < parts)");
  // Micro-batch m's parts follow micro-batch m - 1's in the step's rows.
  const uint64_t block =
      (generator.offset() & kMicroBatchBits) * uint64_t(draw.parts) + uint64_t(draw.part);
  return {positional_seed(generator, draw.site), block * n};
}

}  // namespace tessel
