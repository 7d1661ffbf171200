// SPDX-License-Identifier: Apache-2.0
// What the quantized-kernel tests share: scoped limits on the dot product and vector width the
// kernel sets may use and on the AMX tiles, restored when a test ends (passed or not), and the dot
// products this CPU has.
#pragma once

#include <functional>
#include <vector>

#include "tessel/core/cpu_features.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant_amx.h"

namespace tessel::kernels::testing_limits {

struct DotLimit {
  explicit DotLimit(QuantDot d) { limit_quant_dot(d); }
  ~DotLimit() { limit_quant_dot(QuantDot::Avx512Vnni); }
};

// The avx512 set's vector width (512: Q8_0 tiles of two outputs per vector).
struct BitsLimit {
  explicit BitsLimit(int bits) { limit_quant_vector_bits(bits); }
  ~BitsLimit() { limit_quant_vector_bits(512); }
};

// Whether Q8_0 may take the AMX tiles (kernels/quant_amx.h): the VNNI and AVX2 kernels' tests
// switch them off, since with AMX on the avx512 set's Q8_0 never reaches those kernels.
struct AmxLimit {
  explicit AmxLimit(bool allowed) { allow_quant_amx(allowed); }
  ~AmxLimit() { allow_quant_amx(true); }
};

// The dot products the sets of this CPU can be limited to, highest first.
inline std::vector<QuantDot> dots_here() {
  std::vector<QuantDot> out;
  if (cpu_features().avx512_vnni) out.push_back(QuantDot::Avx512Vnni);
  if (cpu_features().avx_vnni) out.push_back(QuantDot::AvxVnni);
  out.push_back(QuantDot::Avx2);
  return out;
}

// fn(what) with every choice of kernel the backend makes on this CPU: AMX allowed and switched
// off, then (AMX off) each dot product in turn and the avx512 set's vectors at 256 bits.
inline void for_each_kernel_choice(const std::function<void(const char*)>& fn) {
  for (bool amx : {true, false}) {
    const AmxLimit limit(amx);
    fn(amx ? "amx allowed" : "amx off");
  }
  const AmxLimit off(false);
  for (QuantDot dot : dots_here()) {
    const DotLimit limit(dot);
    fn("dot limited");
  }
  const BitsLimit bits(256);
  fn("256-bit");
}

}  // namespace tessel::kernels::testing_limits
