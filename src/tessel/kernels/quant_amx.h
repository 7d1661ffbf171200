// SPDX-License-Identifier: Apache-2.0
// Whether the quantized matmul runs Q8_0, Q4_0 and k-quant (Q4_K, Q5_K, Q6_K) products on Intel
// AMX-INT8 tiles (cpu/quant_amx.h and cpu/quant_amx_k.h have the kernels, docs/KERNELS.md the
// measurements). AMX needs three things: the CPU's amx_tile and
// amx_int8 bits with the tile state enabled in XCR0 (cpu_features), AVX-512 for the scaling that
// follows each tile product, and Linux's permission to use the tile data, which a process must ask
// for (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA) before its first tile instruction.
// Without any of them, or switched off, these types keep the VNNI / AVX2 kernels.
#pragma once

#include <string>

namespace tessel::kernels {

// What `tessel --version` calls the switch: the types that run on the tiles when it is on.
inline constexpr const char* kQuantAmxLabel = "quant amx (q8_0 q4_0 q4_k q5_k q6_k)";

// This CPU and kernel have AMX-INT8 and the permission was granted (asked once, process-wide).
bool quant_amx_usable();
// These products use the AMX tiles now: usable, and neither TESSEL_QUANT_AMX=off (read
// once) nor allow_quant_amx(false) switched them off. TESSEL_QUANT_AMX=on refuses to start without
// AMX.
bool quant_amx_enabled();
// Tests and benchmarks compare the AMX tiles with the kernels they replace through this switch.
void allow_quant_amx(bool allowed);
// One line for `tessel --version`: "amx-int8 tiles", "off (TESSEL_QUANT_AMX=off)" or why not.
std::string quant_amx_status();

}  // namespace tessel::kernels
