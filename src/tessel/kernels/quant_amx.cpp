// SPDX-License-Identifier: Apache-2.0
// The AMX switch of quant_amx.h: the CPU's bits, the kernel's permission (asked once) and the
// TESSEL_QUANT_AMX / allow_quant_amx switches.
#include "tessel/kernels/quant_amx.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "tessel/core/cpu_features.h"
#include "tessel/core/error.h"

namespace tessel::kernels {

namespace {

// linux/arch/x86/include/uapi/asm/prctl.h and the XSAVE feature number of the tile data.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct Probe {
  bool usable = false;
  std::string why;  // what is missing when not usable
};

Probe probe() {
  const CpuFeatures& f = cpu_features();
  if (!f.amx_tile || !f.amx_int8) return {false, "no amx_int8 on this CPU (or its state is off)"};
  if (!f.x86_64_v4() || !f.avx512_vnni) return {false, "no AVX-512 (with VNNI) beside AMX"};
#if defined(__linux__) && defined(SYS_arch_prctl)
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return {false, "the kernel refused the tile data (arch_prctl ARCH_REQ_XCOMP_PERM)"};
  return {true, ""};
#else
  return {false, "no arch_prctl to ask for the tile data"};
#endif
}

const Probe& probed() {
  static const Probe p = probe();
  return p;
}

enum class Mode { Auto, Off, On };

Mode mode_from_environment() {
  const char* v = std::getenv("TESSEL_QUANT_AMX");
  const std::string mode = v ? v : "auto";
  if (mode == "off") return Mode::Off;
  if (mode == "on") return Mode::On;
  TESSEL_CHECK(mode == "auto" || mode.empty(), "TESSEL_QUANT_AMX = '", mode,
               "', expected auto, on or off");
  return Mode::Auto;
}

Mode environment_mode() {
  static const Mode m = mode_from_environment();
  return m;
}

std::atomic<bool>& allowed() {
  static std::atomic<bool> a{true};
  return a;
}

}  // namespace

bool quant_amx_usable() {
  return probed().usable;
}

bool quant_amx_enabled() {
  switch (environment_mode()) {
    case Mode::Off:
      return false;
    case Mode::On:
      TESSEL_CHECK(quant_amx_usable(),
                   "TESSEL_QUANT_AMX=on, but AMX cannot run here: ", probed().why);
      break;
    case Mode::Auto:
      break;
  }
  return allowed().load(std::memory_order_relaxed) && quant_amx_usable();
}

void allow_quant_amx(bool a) {
  allowed() = a;
}

std::string quant_amx_status() {
  if (environment_mode() == Mode::Off) return "off (TESSEL_QUANT_AMX=off)";
  if (!quant_amx_usable()) return "none (" + probed().why + ")";
  return allowed().load() ? "amx-int8 tiles" : "off (allow_quant_amx)";
}

}  // namespace tessel::kernels
