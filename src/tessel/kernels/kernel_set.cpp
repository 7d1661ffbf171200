// SPDX-License-Identifier: Apache-2.0
// Choosing the kernel set. The per-set backends live in namespaces named after their sets, each
// compiled from the same cpu/ sources (CMakeLists.txt); TESSEL_KERNEL_SETS_BUILT lists the ones
// this build has, TESSEL_KERNEL_SETS_NOTE what the code-generation check found.
#include "tessel/kernels/kernel_set.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kernel_sets_note.h"  // generated: TESSEL_KERNEL_SETS_NOTE
#include "tessel/core/cpu_features.h"
#include "tessel/core/error.h"
#include "tessel/kernels/cpu/gemm_onednn.h"
#include "tessel/kernels/quant_amx.h"

namespace tessel::kernels {

namespace baseline {
Backend& cpu_backend_instance();
float stream_read_sum(const float* p, int64_t n);
void quant_dot_lanes(const uint8_t* u, const int8_t* x, int64_t blocks, int32_t* lanes);
}  // namespace baseline
#ifdef TESSEL_HAVE_KERNELS_AVX2
namespace avx2 {
Backend& cpu_backend_instance();
float stream_read_sum(const float* p, int64_t n);
void quant_dot_lanes(const uint8_t* u, const int8_t* x, int64_t blocks, int32_t* lanes);
}  // namespace avx2
#endif
#ifdef TESSEL_HAVE_KERNELS_AVX512
namespace avx512 {
Backend& cpu_backend_instance();
float stream_read_sum(const float* p, int64_t n);
void quant_dot_lanes(const uint8_t* u, const int8_t* x, int64_t blocks, int32_t* lanes);
}  // namespace avx512
#endif

namespace {

constexpr KernelSet kAll[] = {KernelSet::Baseline, KernelSet::Avx2, KernelSet::Avx512};

bool built(KernelSet set) {
  switch (set) {
    case KernelSet::Baseline:
      return true;
    case KernelSet::Avx2:
#ifdef TESSEL_HAVE_KERNELS_AVX2
      return true;
#else
      return false;
#endif
    case KernelSet::Avx512:
#ifdef TESSEL_HAVE_KERNELS_AVX512
      return true;
#else
      return false;
#endif
  }
  return false;
}

std::string set_list(const std::vector<KernelSet>& sets) {
  std::string out;
  for (KernelSet s : sets) {
    if (!out.empty()) out += ' ';
    out += kernel_set_name(s);
  }
  return out;
}

std::string not_built_reason(KernelSet set) {
  std::string note = TESSEL_KERNEL_SETS_NOTE;
  return "the " + std::string(kernel_set_name(set)) + " kernel set was not built" +
         (note.empty() ? std::string() : " (" + note + ")");
}

struct Choice {
  KernelSet set;
  bool forced;
};

Choice choose() {
  const char* env = std::getenv(std::string(kKernelSetVariable).c_str());
  if (env == nullptr || *env == '\0' || std::string_view(env) == "auto")
    return {runnable_kernel_sets().back(), false};
  const KernelSet want = parse_kernel_set(env);
  TESSEL_CHECK(built(want), kKernelSetVariable, "=", env, ": ", not_built_reason(want),
               "; built: ", set_list(built_kernel_sets()));
  TESSEL_CHECK(cpu_runs_kernel_set(want), kKernelSetVariable, "=", env,
               ": this CPU cannot run the ", env, " kernel set (it has: ", cpu_features().names(),
               "); it runs: ", set_list(runnable_kernel_sets()));
  return {want, true};
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

// What each set's objects export, for a set that was built and that this CPU runs.
struct EntryPoints {
  Backend& (*backend)();
  float (*read_sum)(const float*, int64_t);
  void (*dot_lanes)(const uint8_t*, const int8_t*, int64_t, int32_t*);
};

EntryPoints entry_points(KernelSet set) {
  TESSEL_CHECK(built(set), not_built_reason(set));
  TESSEL_CHECK(cpu_runs_kernel_set(set), "this CPU cannot run the ", kernel_set_name(set),
               " kernel set (it has: ", cpu_features().names(), ")");
  switch (set) {
#ifdef TESSEL_HAVE_KERNELS_AVX512
    case KernelSet::Avx512:
      return {&avx512::cpu_backend_instance, &avx512::stream_read_sum, &avx512::quant_dot_lanes};
#endif
#ifdef TESSEL_HAVE_KERNELS_AVX2
    case KernelSet::Avx2:
      return {&avx2::cpu_backend_instance, &avx2::stream_read_sum, &avx2::quant_dot_lanes};
#endif
    default:
      return {&baseline::cpu_backend_instance, &baseline::stream_read_sum,
              &baseline::quant_dot_lanes};
  }
}

}  // namespace

std::string_view kernel_set_name(KernelSet set) {
  switch (set) {
    case KernelSet::Baseline:
      return "baseline";
    case KernelSet::Avx2:
      return "avx2";
    case KernelSet::Avx512:
      return "avx512";
  }
  return "?";
}

KernelSet parse_kernel_set(std::string_view name) {
  for (KernelSet s : kAll)
    if (kernel_set_name(s) == name) return s;
  TESSEL_FAIL("unknown kernel set '", name, "' in ", kKernelSetVariable,
              ": expected baseline, avx2, avx512 or auto");
}

std::vector<KernelSet> built_kernel_sets() {
  std::vector<KernelSet> out;
  for (KernelSet s : kAll)
    if (built(s)) out.push_back(s);
  return out;
}

bool cpu_runs_kernel_set(KernelSet set) {
  const CpuFeatures& f = cpu_features();
  switch (set) {
    case KernelSet::Baseline:
      return f.sse42 && f.popcnt;
    case KernelSet::Avx2:
      return f.x86_64_v3();
    case KernelSet::Avx512:
      return f.x86_64_v4();
  }
  return false;
}

std::vector<KernelSet> runnable_kernel_sets() {
  std::vector<KernelSet> out;
  for (KernelSet s : kAll)
    if (built(s) && cpu_runs_kernel_set(s)) out.push_back(s);
  TESSEL_CHECK(!out.empty(),
               "this CPU lacks SSE4.2 / POPCNT (x86-64-v2), which tessel is built for",
               "; it has: ", cpu_features().names());
  return out;
}

KernelSet active_kernel_set() {
  return choice().set;
}

Backend& cpu_backend_for(KernelSet set) {
  return entry_points(set).backend();
}

float stream_read_sum(KernelSet set, const float* p, int64_t n) {
  return entry_points(set).read_sum(p, n);
}

float stream_read_sum(const float* p, int64_t n) {
  return stream_read_sum(active_kernel_set(), p, n);
}

namespace {
std::atomic<QuantDot> dot_limit{QuantDot::Avx512Vnni};
}  // namespace

std::string_view quant_dot_name(QuantDot dot) {
  switch (dot) {
    case QuantDot::Scalar:
      return "scalar";
    case QuantDot::Avx2:
      return "avx2";
    case QuantDot::AvxVnni:
      return "avx_vnni";
    case QuantDot::Avx512Vnni:
      return "avx512_vnni";
  }
  return "?";
}

QuantDot quant_dot_for(KernelSet set) {
  const CpuFeatures& f = cpu_features();
  const QuantDot limit = dot_limit.load();
  if (set == KernelSet::Baseline) return QuantDot::Scalar;
  if (set == KernelSet::Avx512 && limit >= QuantDot::Avx512Vnni && f.avx512_vnni)
    return QuantDot::Avx512Vnni;
  if (limit >= QuantDot::AvxVnni && f.avx_vnni) return QuantDot::AvxVnni;
  return QuantDot::Avx2;
}

void limit_quant_dot(QuantDot highest) {
  dot_limit.store(highest);
}

QuantDot quant_dot_limit() {
  return dot_limit.load();
}

namespace {
std::atomic<int> vector_bits_limit{512};
}  // namespace

int quant_vector_bits_for(KernelSet set) {
  if (set == KernelSet::Baseline) return 0;
  return set == KernelSet::Avx512 ? vector_bits_limit.load() : 256;
}

void limit_quant_vector_bits(int bits) {
  TESSEL_CHECK(bits == 256 || bits == 512, "limit_quant_vector_bits: ", bits, " bits; 256 or 512");
  vector_bits_limit.store(bits);
}

namespace {
std::atomic<bool> gfni_allowed{true};
}  // namespace

bool quant_nibbles_gfni() {
  return cpu_features().gfni && gfni_allowed.load();
}

void limit_quant_gfni(bool allow) {
  gfni_allowed.store(allow);
}

PrefetchFamily prefetch_family() {
  static const PrefetchFamily family = [] {
    const CpuFeatures& f = cpu_features();
    if (f.vendor != "AuthenticAMD") return PrefetchFamily::Other;
    return f.family >= 0x1a ? PrefetchFamily::AmdZen5On : PrefetchFamily::AmdBeforeZen5;
  }();
  return family;
}

bool quant_backend_layouts() {
  static const bool allowed = [] {
    const char* v = std::getenv("TESSEL_QUANT_LAYOUT");
    const std::string mode = v ? v : "";
    TESSEL_CHECK(mode.empty() || mode == "auto" || mode == "file", "TESSEL_QUANT_LAYOUT = '", mode,
                 "', expected auto or file");
    return mode != "file";
  }();
  return allowed;
}

void quant_dot_lanes(KernelSet set, const uint8_t* u, const int8_t* x, int64_t blocks,
                     int32_t* lanes) {
  entry_points(set).dot_lanes(u, x, blocks, lanes);
}

std::string kernel_set_summary() {
  const Choice& c = choice();
  std::string out = "kernels " + std::string(kernel_set_name(c.set)) +
                    (c.forced ? " (forced by " + std::string(kKernelSetVariable) + ")"
                              : " (best this CPU runs)") +
                    "; built: " + set_list(built_kernel_sets());
  const std::string note = TESSEL_KERNEL_SETS_NOTE;
  if (!note.empty()) out += " (" + note + ")";
  // oneDNN chooses its own instructions: whether bf16 products are native is its answer.
  const onednn::Bf16Support& bf16 = onednn::bf16_support();
  out +=
      std::string("; bf16 gemm: ") +
      (!bf16.native ? std::string("widened to f32")
       : bf16.tiles ? "native (oneDNN " + bf16.implementation + ")"
                    : "native below " + std::to_string(onednn::kBf16VectorNativeMaxRows) +
                          " rows (oneDNN " + bf16.implementation + "), widened to f32 from there");
  // The quantized types' AMX-INT8 tiles run from the avx512 set only (quant_amx.h).
  out += std::string("; ") + kQuantAmxLabel + ": " +
         (c.set == KernelSet::Avx512
              ? quant_amx_status()
              : "none (kernel set " + std::string(kernel_set_name(c.set)) + ")");
  const CpuFeatures& f = cpu_features();
  out += "; cpu: " +
         (f.vendor.empty() ? std::string()
                           : f.vendor + " family " + std::to_string(f.family) + " model " +
                                 std::to_string(f.model) + " ") +
         f.names();
  return out;
}

}  // namespace tessel::kernels
