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

KernelPoint measure(const Probe& probe, double budget, const Agreement& agree,
                    calibration::CacheEviction& cache) {
  const Counted c = count(probe);
  TESSEL_CHECK(!c.kernel.empty() && c.bytes > 0, "plan calibrate: a kernel probe reported ",
               "nothing on meta");
  const Call call = probe();
  Backend& cpu = kernels::cpu_backend();
  agree.before();
  const double local = calibration::median_time([&] { call(cpu); }, budget, [&] { cache.evict(); });
  return KernelPoint{c.kernel, c.bytes, c.flops, agree.slowest(local)};
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
          agree.before();
          const double t = calibration::median_time([&] { cpu.gemm(desc, a, b, c); }, budget,
                                                    [&] { cache.evict(); });
          GemmPoint p{name,  m, n, k, 2.0 * double(m) * double(n) * double(k) / agree.slowest(t),
                      layout};
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
  std::vector<Probe> probes;
  for (int64_t r : rows) {
    probes.push_back([=] {
      Tensor x = randn({r, c}), y = zeros({r, c});
      return Call([=](Backend& b) mutable { b.unary(UnaryOp::Gelu, x, y); });
    });
    probes.push_back([=] {
      Tensor x = randn({r, c}), y = randn({r, c}), dy = randn({r, c}), dx = zeros({r, c});
      return Call([=](Backend& b) mutable { b.unary_backward(UnaryOp::Gelu, x, y, dy, dx); });
    });
    probes.push_back([=] {
      Tensor x = randn({r, c}), y = randn({r, c}), out = zeros({r, c});
      return Call([=](Backend& b) mutable { b.binary(kernels::BinaryOp::Add, x, y, out); });
    });
    probes.push_back([=] {
      Tensor x = randn({r, c}), out = zeros({1, c});
      return Call([=](Backend& b) mutable {
        const int dims[] = {0};
        b.reduce(kernels::ReduceOp::Sum, x, dims, out);
      });
    });
    probes.push_back([=] {
      Tensor x = randn({r, c}), y = zeros({r, c});
      return Call([=](Backend& b) mutable { b.softmax(x, y, false); });
    });
    probes.push_back([=] {
      Tensor y = randn({r, c}), dy = randn({r, c}), dx = zeros({r, c});
      return Call([=](Backend& b) mutable { b.softmax_backward(y, dy, dx, false); });
    });
    probes.push_back([=] {
      Tensor x = randn({r, c}), w = randn({c}), bias = randn({c}), y = zeros({r, c});
      Tensor mean = zeros({r}), rstd = zeros({r});
      return Call([=](Backend& b) mutable { b.layer_norm(x, w, bias, 1e-5, y, mean, rstd); });
    });
    probes.push_back([=] {
      Tensor dy = randn({r, c}), x = randn({r, c}), w = randn({c}), mean = zeros({r});
      Tensor rstd = full({r}, 1.0), dx = zeros({r, c}), dw = zeros({c}), db = zeros({c});
      return Call(
          [=](Backend& b) mutable { b.layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db); });
    });
    probes.push_back([=] {
      Tensor logits = randn({r, c}), targets = zeros({r}, DType::I64);
      Tensor losses = zeros({r}), lse = zeros({r});
      return Call([=](Backend& b) mutable { b.cross_entropy(logits, targets, -100, losses, lse); });
    });
    probes.push_back([=] {
      Tensor logits = randn({r, c}), targets = zeros({r}, DType::I64), lse = full({r}, 6.0);
      Tensor dlosses = full({r}, 1.0), dlogits = zeros({r, c});
      return Call([=](Backend& b) mutable {
        b.cross_entropy_backward(logits, targets, lse, dlosses, -100, dlogits);
      });
    });
    probes.push_back([=] {
      Tensor w = randn({c, c}), ids = zeros({r}, DType::I64), out = zeros({r, c});
      return Call([=](Backend& b) mutable { b.embedding(w, ids, out); });
    });
    probes.push_back([=] {
      Tensor dout = randn({r, c}), ids = zeros({r}, DType::I64), dw = zeros({c, c});
      return Call([=](Backend& b) mutable { b.embedding_backward(dout, ids, dw); });
    });
    probes.push_back([=] {
      Tensor p = randn({r * c}), g = randn({r * c}), m = zeros({r * c}), v = zeros({r * c});
      return Call([=](Backend& b) mutable { b.adamw(p, g, m, v, kernels::AdamWParams{}); });
    });
  }
  // Causal attention of 4 heads of width 32 over a few sequence lengths: FLOP-bound, so its
  // curve is indexed by FLOPs where the others' are by bytes.
  for (int64_t t : quick ? std::vector<int64_t>{8, 32, 128, 512}
                         : std::vector<int64_t>{8, 32, 128, 512, 2048}) {
    kernels::AttentionDesc d{1, t, t, 4, 4, 32, true, 1.0 / std::sqrt(32.0), 0};
    probes.push_back([=] {
      Tensor q = randn({1, t, 4, 32}), k = randn({1, t, 4, 32}), v = randn({1, t, 4, 32});
      Tensor out = zeros({1, t, 4, 32}), lse = zeros({1, 4, t});
      return Call([=](Backend& b) mutable { b.attention(d, q, k, v, Tensor(), out, lse); });
    });
    probes.push_back([=] {
      Tensor q = randn({1, t, 4, 32}), k = randn({1, t, 4, 32}), v = randn({1, t, 4, 32});
      Tensor out = zeros({1, t, 4, 32}), lse = zeros({1, 4, t});
      Tensor dout = randn({1, t, 4, 32});
      Tensor dq = zeros({1, t, 4, 32}), dk = zeros({1, t, 4, 32}), dv = zeros({1, t, 4, 32});
      return Call([=](Backend& b) mutable {
        b.attention_backward(d, q, k, v, Tensor(), out, lse, dout, dq, dk, dv);
      });
    });
  }
  std::vector<KernelPoint> out;
  calibration::CacheEviction cache;
  for (const Probe& p : probes) {
    out.push_back(measure(p, budget, agree, cache));
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

// One profiled training step of a small GPT-2 (`width` wide, 2 layers, `rows` x `seq` tokens):
// what it spends outside its kernels against what its trace records.
OverheadSample profile_overhead(int64_t width, int64_t rows, int64_t seq, double budget,
                                const Agreement& agree) {
  // A real model's step, so that the ops and autograd layers' work between kernels (views,
  // reshapes, transposes, autograd nodes, allocation, checks, the host-side copies of concat and
  // split) comes in the mix a training step has, as the trainer runs it (gradients dropped
  // before each step). Through the family interface: the planner names no model family.
  const std::string json = R"({"model_type": "gpt2", "vocab_size": 64, "n_positions": )" +
                           std::to_string(seq) + R"(, "n_embd": )" + std::to_string(width) +
                           R"(, "n_layer": 2, "n_head": 2, "resid_pdrop": 0, "embd_pdrop": 0,
                           "attn_pdrop": 0})";
  const models::ConfigPtr config_ptr =
      models::parse_model_config(json, "plan calibrate's overhead probe");
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
  // Each step profiled (core/profile.h): the step's CPU time less its kernels' CPU time is what
  // the ops cost outside them; CPU time, so that a loaded machine's waits are not counted.
  std::vector<double> outside;
  agree.before();
  const auto start = calibration::Clock::now();
  profile::set_enabled(true);
  while (outside.size() < 5 ||
         (calibration::seconds_since(start) < budget && outside.size() < 10000)) {
    profile::reset();
    const double c0 = calibration::process_cpu_seconds();
    step();
    const double cpu = calibration::process_cpu_seconds() - c0;
    double kernels = 0;
    for (const profile::Entry& e : profile::snapshot()) kernels += e.cpu_seconds;
    outside.push_back(std::max(0.0, cpu - kernels));
  }
  profile::set_enabled(false);
  profile::reset();
  sample.seconds = agree.slowest(calibration::median(outside));
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
