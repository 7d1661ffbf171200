// SPDX-License-Identifier: Apache-2.0
// oneDNN matmul for GemmDesc, in f32 and (where the CPU has bf16 arithmetic) bf16 with f32
// accumulation: transposes, leading dimensions and batch strides become memory strides (a batch
// stride of 0 becomes a broadcast batch dim of size 1), alpha an output scale and beta a sum
// post-op. Primitives are cached per descriptor; execution uses per-thread memory
// objects and a per-thread user scratchpad, so one cached primitive can run on several threads.
#include "tessel/kernels/cpu/gemm_onednn.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::kernels::onednn {

namespace {

// Everything that determines the primitive. alpha and beta are baked in (as creation-time
// attributes they give oneDNN's fastest kernels); models use a handful of distinct values.
struct Key {
  int64_t fields[13];  // the GemmDesc's sizes, strides and transposes, then the data type
  double alpha, beta;
  bool operator==(const Key& o) const {
    return std::memcmp(fields, o.fields, sizeof(fields)) == 0 && alpha == o.alpha && beta == o.beta;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
    for (int64_t f : k.fields) mix(uint64_t(f));
    uint64_t bits;
    std::memcpy(&bits, &k.alpha, 8);
    mix(bits);
    std::memcpy(&bits, &k.beta, 8);
    mix(bits);
    return size_t(h);
  }
};

struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
  // oneDNN refused the batched layout (e.g. overlapping batch entries of A): pd is for one batch
  // entry and gemm() loops over the batch.
  bool per_batch = false;
};

// The cache is cleared when it grows past this many entries (a runaway caller with ever-changing
// shapes must not grow memory without bound).
constexpr size_t kMaxEntries = 4096;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> map;
};

Cache& cache() {
  static Cache c;
  return c;
}

using DataType = dnnl::memory::data_type;

Key make_key(const GemmDesc& d, DataType type) {
  Key k{};
  int64_t f[13] = {d.batch, d.m,   d.n,        d.k,        d.trans_a,  d.trans_b,    d.lda,
                   d.ldb,   d.ldc, d.stride_a, d.stride_b, d.stride_c, int64_t(type)};
  std::memcpy(k.fields, f, sizeof(f));
  k.alpha = d.alpha;
  k.beta = d.beta;
  return k;
}

// A logical rows x cols matrix (batched) stored with row stride ld, or transposed (stored
// cols x rows). A batch stride of 0 is a broadcast: batch dim 1.
dnnl::memory::desc matrix_desc(int64_t batch, int64_t stride, int64_t rows, int64_t cols,
                               int64_t ld, bool trans, DataType type) {
  int64_t rs = trans ? 1 : ld, cs = trans ? ld : 1;
  if (batch == 1) return dnnl::memory::desc({rows, cols}, type, {rs, cs});
  int64_t b = stride == 0 ? 1 : batch;
  int64_t bs = stride == 0 ? (rows - 1) * rs + (cols - 1) * cs + 1 : stride;
  return dnnl::memory::desc({b, rows, cols}, type, {bs, rs, cs});
}

std::shared_ptr<Entry> create_exact(const GemmDesc& d, DataType type) {
  auto a_md = matrix_desc(d.batch, d.stride_a, d.m, d.k, d.lda, d.trans_a, type);
  auto b_md = matrix_desc(d.batch, d.stride_b, d.k, d.n, d.ldb, d.trans_b, type);
  auto c_md = matrix_desc(d.batch, d.stride_c, d.m, d.n, d.ldc, false, type);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (d.alpha != 1.0) attr.set_output_scales(0, {float(d.alpha)});
  if (d.beta != 0.0) {
    dnnl::post_ops ops;
    ops.append_sum(float(d.beta));
    attr.set_post_ops(ops);
  }
  auto entry = std::make_shared<Entry>();
  entry->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine());
  entry->prim = dnnl::matmul(entry->pd);
  entry->scratch_bytes = entry->pd.scratchpad_desc().get_size();
  return entry;
}

std::shared_ptr<const Entry> create(const GemmDesc& d, DataType type) {
  try {
    return create_exact(d, type);
  } catch (const dnnl::error& batched_error) {
    if (d.batch > 1) {
      GemmDesc one = d;
      one.batch = 1;
      try {
        std::shared_ptr<Entry> e = create_exact(one, type);
        e->per_batch = true;
        return e;
      } catch (const dnnl::error&) {
      }
    }
    TESSEL_FAIL("gemm: oneDNN has no matmul for batch ", d.batch, " m ", d.m, " n ", d.n, " k ",
                d.k, " trans_a ", d.trans_a, " trans_b ", d.trans_b, " lda ", d.lda, " ldb ", d.ldb,
                " ldc ", d.ldc, ": ", batched_error.what());
  }
}

std::shared_ptr<const Entry> lookup(const GemmDesc& d, DataType type) {
  Key key = make_key(d, type);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.map.find(key);
    if (it != c.map.end()) return it->second;
  }
  // Created outside the lock: creation takes milliseconds and other shapes must not wait. Two
  // threads may race to create the same entry; the first one stored wins.
  std::shared_ptr<const Entry> made = create(d, type);
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.map.size() >= kMaxEntries) c.map.clear();
  return c.map.emplace(key, std::move(made)).first->second;
}

// One thread's memory objects for one cached primitive: creating dnnl::memory objects (and the
// argument map) costs more than a small product, so each call only swaps the data pointers.
struct Bound {
  std::shared_ptr<const Entry> entry;  // keeps the map key alive and unique
  dnnl::memory a, b, c, scratch;
  std::unordered_map<int, dnnl::memory> args;
};

struct ThreadState {
  dnnl::stream stream{engine()};
  std::vector<char> scratch;
  std::unordered_map<const Entry*, Bound> bound;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

Bound& bound_memories(ThreadState& ts, const std::shared_ptr<const Entry>& e) {
  auto it = ts.bound.find(e.get());
  if (it != ts.bound.end()) return it->second;
  if (ts.bound.size() >= 64) ts.bound.clear();
  dnnl::engine& eng = engine();
  Bound b{e,
          dnnl::memory(e->pd.src_desc(), eng, nullptr),
          dnnl::memory(e->pd.weights_desc(), eng, nullptr),
          dnnl::memory(e->pd.dst_desc(), eng, nullptr),
          dnnl::memory(e->pd.scratchpad_desc(), eng, nullptr),
          {}};
  b.args = {{DNNL_ARG_SRC, b.a},
            {DNNL_ARG_WEIGHTS, b.b},
            {DNNL_ARG_DST, b.c},
            {DNNL_ARG_SCRATCHPAD, b.scratch}};
  return ts.bound.emplace(e.get(), std::move(b)).first->second;
}

// Runs the cached primitive for `d` on operands of `elem` bytes per element.
void run(const GemmDesc& d, DataType type, size_t elem, const void* a, const void* b, void* c) {
  std::shared_ptr<const Entry> e = lookup(d, type);
  ThreadState& ts = thread_state();
  if (ts.scratch.size() < e->scratch_bytes) ts.scratch.resize(e->scratch_bytes);
  Bound& m = bound_memories(ts, e);
  m.scratch.set_data_handle(ts.scratch.data());
  int64_t runs = e->per_batch ? d.batch : 1;
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  char* pc = static_cast<char*>(c);
  for (int64_t i = 0; i < runs; ++i) {
    m.a.set_data_handle(const_cast<char*>(pa + size_t(i * d.stride_a) * elem));
    m.b.set_data_handle(const_cast<char*>(pb + size_t(i * d.stride_b) * elem));
    m.c.set_data_handle(pc + size_t(i * d.stride_c) * elem);
    e->prim.execute(ts.stream, m.args);
  }
  ts.stream.wait();
}

// Whether oneDNN has a bf16 matmul with bf16 arithmetic on this CPU: a small primitive is created
// and its implementation named; the reference ("ref") implementation, which oneDNN picks where
// the CPU lacks the instructions, would be slower than widening to f32.
Bf16Support probe_bf16() {
  Bf16Support s;
  GemmDesc d;
  d.m = 64;
  d.n = 64;
  d.k = 64;
  d.lda = d.ldb = d.ldc = 64;
  try {
    const std::shared_ptr<Entry> e = create_exact(d, DataType::bf16);
    s.implementation = e->pd.impl_info_str();
    s.native = s.implementation.find("ref") == std::string::npos;
    s.tiles = s.native && s.implementation.find("amx") != std::string::npos;
  } catch (const dnnl::error& err) {
    s.implementation = std::string("none (") + err.what() + ")";
  }
  return s;
}

}  // namespace

void gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
  run(d, DataType::f32, sizeof(float), a, b, c);
}

const Bf16Support& bf16_support() {
  static const Bf16Support support = probe_bf16();
  return support;
}

namespace {

Bf16Gemm mode_from_environment() {
  const char* v = std::getenv("TESSEL_BF16_GEMM");
  const std::string mode = v ? v : "auto";
  if (mode == "native") return Bf16Gemm::Native;
  if (mode == "widen") return Bf16Gemm::Widen;
  TESSEL_CHECK(mode == "auto" || mode.empty(), "TESSEL_BF16_GEMM = '", mode,
               "', expected auto, native or widen");
  return Bf16Gemm::Auto;
}

std::atomic<Bf16Gemm>& mode() {
  static std::atomic<Bf16Gemm> m{mode_from_environment()};
  return m;
}

}  // namespace

void set_bf16_gemm(Bf16Gemm m) {
  mode() = m;
}

bool bf16_gemm_native(int64_t rows) {
  switch (mode().load()) {
    case Bf16Gemm::Widen:
      return false;
    case Bf16Gemm::Native:
      TESSEL_CHECK(bf16_support().native, "gemm: a native bf16 product was asked for (",
                   "TESSEL_BF16_GEMM=native), but oneDNN has none on this CPU: ",
                   bf16_support().implementation);
      return true;
    case Bf16Gemm::Auto:
      break;
  }
  const Bf16Support& s = bf16_support();
  return s.native && (s.tiles || rows < kBf16VectorNativeMaxRows);
}

void gemm_bf16(const GemmDesc& d, const uint16_t* a, const uint16_t* b, uint16_t* c) {
  run(d, DataType::bf16, sizeof(uint16_t), a, b, c);
}

size_t cached_primitives() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().map.size();
}

}  // namespace tessel::kernels::onednn
