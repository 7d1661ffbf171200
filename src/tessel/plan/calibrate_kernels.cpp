// SPDX-License-Identifier: Apache-2.0
// The per-op measurements of `tessel plan calibrate` (calibrate_kernels.h). A probe allocates
// one kernel call's tensors on the default device and returns the call; it runs once on meta
// under an observer (its bytes and FLOPs as the trace counts them) and is timed on the host.
#include "tessel/plan/calibrate_kernels.h"

#include <cmath>
#include <memory>

#include "tessel/autograd/engine.h"
#include "tessel/core/error.h"
#include "tessel/core/profile.h"
#include "tessel/core/rng.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/kernel_observer.h"
#include "tessel/kernels/meta/meta_backend.h"
#include "tessel/models/family.h"
#include "tessel/ops/activation.h"
#include "tessel/ops/loss.h"
#include "tessel/ops/matmul.h"
#include "tessel/ops/norm.h"
#include "tessel/plan/calibrate_timing.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/plan/trace.h"
#include "tessel/plan/trace_recorder.h"
#include "tessel/tensor/default_device.h"

namespace tessel::plan {

namespace {

using kernels::Backend;
using Call = std::function<void(Backend&)>;
using Probe = std::function<Call()>;

// What the meta backend reported for one call.
struct Counted final : kernels::KernelObserver {
  std::string kernel;
  double bytes = 0, flops = 0;
  void on_kernel(const kernels::KernelEvent& e) override {
    if (kernel.empty()) kernel = std::string(e.kernel);
    bytes += e.bytes_read + e.bytes_written;
    flops += e.flops;
  }
};

Counted count(const Probe& probe) {
  Counted c;
  DefaultDeviceScope meta(Device::meta());
  const Call call = probe();
  kernels::KernelObserverScope observe(c);
  call(kernels::meta_backend());
  return c;
}

// The slowest rank's median seconds of `fn` with its operands evicted from the private caches
// before every repetition, then in them (the call repeated on the same operands; half the budget,
// as nothing is evicted between those repetitions and they vary less).
struct EvictedAndWarm {
  double evicted = 0, warm = 0;
};
EvictedAndWarm time_both(const std::function<void()>& fn, double budget, const Agreement& agree,
                         calibration::CacheEviction& cache) {
  EvictedAndWarm t;
  agree.before();
  t.evicted = agree.slowest(calibration::median_time(fn, budget, [&] { cache.evict(); }));
  agree.before();
  t.warm = agree.slowest(calibration::median_time(fn, budget / 2));
  return t;
}

KernelPoint measure(const Probe& probe, double budget, const Agreement& agree,
                    calibration::CacheEviction& cache) {
  const Counted c = count(probe);
  TESSEL_CHECK(!c.kernel.empty() && c.bytes > 0, "plan calibrate: a kernel probe reported ",
               "nothing on meta");
  const Call call = probe();
  Backend& cpu = kernels::cpu_backend();
  const EvictedAndWarm t = time_both([&] { call(cpu); }, budget, agree, cache);
  return KernelPoint{c.kernel, c.bytes, c.flops, t.evicted, t.warm};
}

constexpr int64_t kWidth = 256;  // features per row of the element-wise probes

}  // namespace

std::vector<int64_t> gemm_grid_sizes(bool quick) {
  if (quick) return {16, 64, 256, 1024};
  return {8, 32, 128, 512, 2048};
}

std::vector<GemmPoint> measure_gemm_grid(DType dtype, bool quick, double budget,
                                         const Agreement& agree,
                                         const std::function<void(const GemmPoint&)>& say) {
  const std::string name = dtype == DType::F32 ? "f32" : "bf16";
  const std::vector<int64_t> sizes = gemm_grid_sizes(quick);
  std::vector<GemmPoint> out;
  calibration::CacheEviction cache;
  for (const char* layout : {"nt", "nn", "tn"}) {
    const bool ta = layout[0] == 't', tb = layout[1] == 't';
    for (int64_t m : sizes)
      for (int64_t n : sizes)
        for (int64_t k : sizes) {
          const Tensor a = ta ? randn({k, m}, dtype) : randn({m, k}, dtype);
          const Tensor b = tb ? randn({n, k}, dtype) : randn({k, n}, dtype);
          Tensor c = zeros({m, n}, dtype);
          const kernels::GemmDesc desc = kernels::dense_gemm_desc(1, m, n, k, ta, tb);
          Backend& cpu = kernels::cpu_backend();
          const EvictedAndWarm t =
              time_both([&] { cpu.gemm(desc, a, b, c); }, budget, agree, cache);
          const double flop = 2.0 * double(m) * double(n) * double(k);
          GemmPoint p{name, m, n, k, flop / t.evicted, layout, flop / t.warm};
          if (say) say(p);
          out.push_back(p);
        }
  }
  return out;
}

std::vector<KernelPoint> measure_kernels(bool quick, double budget, const Agreement& agree,
                                         const std::function<void(const KernelPoint&)>& say) {
  using kernels::UnaryOp;
  const std::vector<int64_t> rows = quick ? std::vector<int64_t>{2, 32, 512, 2048}
                                          : std::vector<int64_t>{1, 8, 64, 512, 4096, 16384};
  const int64_t c = kWidth;
  // Every probe in f32, and in bf16 as a mixed-precision step calls it (activations and their
  // gradients in bf16; statistics, log-sum-exps and losses in f32): the 16-bit kernels widen and
  // narrow, so their time per byte is not the f32 kernels' (docs/PLANNER.md, "Step time").
  struct Probed {
    Probe probe;
    DType dtype;
  };
  std::vector<Probed> probes;
  for (const DType dt : {DType::F32, DType::BF16}) {
    auto add = [&](Probe p) { probes.push_back({std::move(p), dt}); };
    const DType other = dt == DType::F32 ? DType::BF16 : DType::F32;
    for (int64_t r : rows) {
      add([=] {
        Tensor x = randn({r, c}, dt), y = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable { b.unary(UnaryOp::Gelu, x, y); });
      });
      add([=] {
        Tensor x = randn({r, c}, dt), y = randn({r, c}, dt), dy = randn({r, c}, dt);
        Tensor dx = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable { b.unary_backward(UnaryOp::Gelu, x, y, dy, dx); });
      });
      add([=] {
        Tensor x = randn({r, c}, dt), y = randn({r, c}, dt), out = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable { b.binary(kernels::BinaryOp::Add, x, y, out); });
      });
      add([=] {
        Tensor x = randn({r, c}, dt), out = zeros({1, c}, dt);
        return Call([=](Backend& b) mutable {
          const int dims[] = {0};
          b.reduce(kernels::ReduceOp::Sum, x, dims, out);
        });
      });
      add([=] {
        Tensor x = randn({r, c}, dt), y = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable { b.softmax(x, y, false); });
      });
      add([=] {
        Tensor y = randn({r, c}, dt), dy = randn({r, c}, dt), dx = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable { b.softmax_backward(y, dy, dx, false); });
      });
      add([=] {
        Tensor x = randn({r, c}, dt), w = randn({c}, dt), bias = randn({c}, dt);
        Tensor y = zeros({r, c}, dt), mean = zeros({r}), rstd = zeros({r});
        return Call([=](Backend& b) mutable { b.layer_norm(x, w, bias, 1e-5, y, mean, rstd); });
      });
      add([=] {
        Tensor dy = randn({r, c}, dt), x = randn({r, c}, dt), w = randn({c}, dt);
        Tensor mean = zeros({r}), rstd = full({r}, 1.0), dx = zeros({r, c}, dt);
        Tensor dw = zeros({c}, dt), db = zeros({c}, dt);
        return Call(
            [=](Backend& b) mutable { b.layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db); });
      });
      add([=] {
        Tensor logits = randn({r, c}, dt), targets = zeros({r}, DType::I64);
        Tensor losses = zeros({r}), lse = zeros({r});
        return Call(
            [=](Backend& b) mutable { b.cross_entropy(logits, targets, -100, losses, lse); });
      });
      add([=] {
        Tensor logits = randn({r, c}, dt), targets = zeros({r}, DType::I64);
        Tensor lse = full({r}, 6.0), dlosses = full({r}, 1.0), dlogits = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable {
          b.cross_entropy_backward(logits, targets, lse, dlosses, -100, dlogits);
        });
      });
      add([=] {
        Tensor w = randn({c, c}, dt), ids = zeros({r}, DType::I64), out = zeros({r, c}, dt);
        return Call([=](Backend& b) mutable { b.embedding(w, ids, out); });
      });
      add([=] {
        Tensor dout = randn({r, c}, dt), ids = zeros({r}, DType::I64), dw = zeros({c, c}, dt);
        return Call([=](Backend& b) mutable { b.embedding_backward(dout, ids, dw); });
      });
      // A mixed-precision step casts its f32 master weights to bf16 and its bf16 weight
      // gradients back (a probe per direction, keyed by the source's dtype).
      add([=] {
        Tensor src = randn({r, c}, dt), dst = zeros({r, c}, other);
        return Call([=](Backend& b) mutable { b.convert(src, dst); });
      });
      if (dt == DType::F32)  // the optimizer keeps f32 state whatever the compute dtype
        add([=] {
          Tensor p = randn({r * c}), g = randn({r * c}), m = zeros({r * c}), v = zeros({r * c});
          return Call([=](Backend& b) mutable { b.adamw(p, g, m, v, kernels::AdamWParams{}); });
        });
    }
    // Causal attention of 4 heads of width 32: FLOP-bound, so its curve is indexed by FLOPs
    // where the others' are by bytes. Batches of sequences as training calls it (a micro-batch
    // of short sequences costs more per FLOP than one long sequence of the same FLOPs, the
    // kernel's tiles being smaller), the FLOPs growing from point to point.
    using BatchSeq = std::pair<int64_t, int64_t>;
    for (const BatchSeq& bt :
         quick ? std::vector<BatchSeq>{{8, 16}, {8, 64}, {4, 256}, {1, 1024}}
               : std::vector<BatchSeq>{{8, 8}, {8, 32}, {8, 128}, {4, 512}, {1, 2048}}) {
      const int64_t n = bt.first, t = bt.second;
      kernels::AttentionDesc d{n, t, t, 4, 4, 32, true, 1.0 / std::sqrt(32.0), 0};
      const Shape s{n, t, 4, 32};
      add([=] {
        Tensor q = randn(s, dt), k = randn(s, dt), v = randn(s, dt);
        Tensor out = zeros(s, dt), lse = zeros({n, 4, t});
        return Call([=](Backend& b) mutable { b.attention(d, q, k, v, Tensor(), out, lse); });
      });
      add([=] {
        Tensor q = randn(s, dt), k = randn(s, dt), v = randn(s, dt);
        Tensor out = zeros(s, dt), lse = zeros({n, 4, t}), dout = randn(s, dt);
        Tensor dq = zeros(s, dt), dk = zeros(s, dt), dv = zeros(s, dt);
        return Call([=](Backend& b) mutable {
          b.attention_backward(d, q, k, v, Tensor(), out, lse, dout, dq, dk, dv);
        });
      });
    }
  }
  std::vector<KernelPoint> out;
  calibration::CacheEviction cache;
  for (const Probed& p : probes) {
    out.push_back(measure(p.probe, budget, agree, cache));
    out.back().dtype = p.dtype == DType::BF16 ? "bf16" : "f32";
    if (say) say(out.back());
  }
  return out;
}

OpOverhead fit_op_overhead(const OverheadSample& small, const OverheadSample& large) {
  TESSEL_CHECK(small.ops > 0 && large.ops > 0, "plan calibrate: an overhead probe traced no ops (",
               small.ops, ", ", large.ops, ")");
  // [ops bytes] [per_op per_byte]^T = seconds, two rows.
  const double det = small.ops * large.bytes_written - large.ops * small.bytes_written;
  if (std::abs(det) > 1e-9 * small.ops * large.bytes_written) {
    const OpOverhead fit{
        (small.seconds * large.bytes_written - large.seconds * small.bytes_written) / det,
        (small.ops * large.seconds - large.ops * small.seconds) / det};
    if (fit.per_op >= 0 && fit.per_byte >= 0) return fit;
    if (fit.per_byte > 0)  // the bytes explain all of it
      return OpOverhead{0, std::max(0.0, large.seconds) / std::max(1.0, large.bytes_written)};
  }
  return OpOverhead{std::max(0.0, small.seconds) / small.ops, 0};
}

namespace {

// One profiled training step of a small dense model (`width` wide, 2 layers, `rows` x `seq`
// tokens): what it spends outside its kernels against what its trace records.
OverheadSample profile_overhead(int64_t width, int64_t rows, int64_t seq, double budget,
                                const Agreement& agree) {
  // A real model's step, so that the ops and autograd layers' work between kernels (views,
  // reshapes, transposes, autograd nodes, allocation, checks, the host-side copies of concat and
  // split) comes in the mix a training step has, as the trainer runs it (gradients dropped
  // before each step). Through the family interface (the first registered family's probe model):
  // the planner names no model family.
  const models::ConfigPtr config_ptr = models::families().front()->probe_config(width, 2, seq);
  const models::ModelConfig& config = *config_ptr;
  TraceOptions options;
  options.batch = rows;
  options.seq = seq;
  const Graph graph = trace_training_step(config, options);
  OverheadSample sample;
  sample.ops = double(graph.ops.size());
  for (const OpNode& op : graph.ops) sample.bytes_written += op.cost.bytes_written;
  TESSEL_CHECK(sample.ops > 0, "plan calibrate: the overhead probe traced no kernel");
  Generator generator(1);
  std::shared_ptr<models::CausalLM> model = config.build_random(generator);
  model->train();
  const Tensor ids = zeros({rows, seq}, DType::I64), targets = zeros({rows, seq}, DType::I64);
  auto step = [&] {
    model->zero_grad();
    autograd::backward(model->loss(ids, targets));
  };
  step();  // warm-up: the allocator's blocks, the kernels' first touch
  // The step's CPU time less its kernels' CPU time is what the ops cost outside them; CPU time,
  // so that a loaded machine's waits are not counted. The kernels are timed in profiled steps
  // (core/profile.h), the step in unprofiled ones between them: the profiler's own work per call
  // (its label, its clock reads, its table) falls outside the kernels and would otherwise be
  // counted as the ops' (1.2-1.3 us a call on a 2-vCPU Xeon, more than the ops' own 0.9).
  std::vector<double> whole, kernels;
  agree.before();
  const auto start = calibration::Clock::now();
  while (whole.size() < 5 || (calibration::seconds_since(start) < budget && whole.size() < 10000)) {
    const double c0 = calibration::process_cpu_seconds();
    step();
    whole.push_back(calibration::process_cpu_seconds() - c0);
    profile::reset();
    profile::set_enabled(true);
    step();
    profile::set_enabled(false);
    double k = 0;
    for (const profile::Entry& e : profile::snapshot()) k += e.cpu_seconds;
    kernels.push_back(k);
  }
  profile::reset();
  const double outside = std::max(0.0, calibration::median(whole) - calibration::median(kernels));
  sample.seconds = agree.slowest(outside);
  return sample;
}

}  // namespace

OpOverhead measure_op_overhead(double budget, const Agreement& agree) {
  // One thread while profiled: the profiler reads the issuing thread's CPU time, so with a pool
  // the workers' share of each kernel would count as work outside it. The work between kernels
  // is the issuing thread's either way.
  struct OneThread {
    int saved = num_threads();
    OneThread() { set_num_threads(1); }
    ~OneThread() { set_num_threads(saved); }
  } one_thread;
  // The same ops at two sizes: 2 rows of 16 tokens 32 wide, and 8 rows of 32 tokens 128 wide
  // (32 times the rows' bytes); what grows between them is the part that grows with the bytes.
  const OverheadSample small = profile_overhead(32, 2, 16, budget, agree);
  const OverheadSample large = profile_overhead(128, 8, 32, budget, agree);
  return fit_op_overhead(small, large);
}

}  // namespace tessel::plan
