// SPDX-License-Identifier: Apache-2.0
// The measurements behind `tessel plan calibrate`. Medians, not best runs: the cost model should
// predict what a step sees on a machine shared with other work, and one lucky repetition must not
// set a rate. Every figure is agreed across ranks (the slowest rank's), so all ranks write the
// same description.
#include "tessel/plan/calibrate.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

#include "tessel/core/cpu_features.h"
#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/plan/calibrate_disk.h"
#include "tessel/plan/calibrate_kernels.h"
#include "tessel/plan/calibrate_timing.h"
#include "tessel/tensor/tensor.h"

namespace tessel::plan {

namespace {

using calibration::Clock;
using calibration::median;
using calibration::median_time;
using calibration::seconds_since;

double max_over_ranks(dist::Communicator& world, double x) {
  Tensor t = full({1}, x, DType::F64);
  world.all_reduce(t, dist::ReduceOp::Max);
  return t.item();
}

// STREAM's copy (c = a: 2 words moved per element) and triad (a = b + q c: 3 words), on the one
// thread pool, arrays far larger than the caches. Bytes per second as STREAM counts them (no
// write-allocate traffic).
std::pair<double, double> stream_bandwidth(int64_t n, double budget) {
  std::unique_ptr<float[]> a(new float[size_t(n)]), b(new float[size_t(n)]),
      c(new float[size_t(n)]);
  float* pa = a.get();
  float* pb = b.get();
  float* pc = c.get();
  constexpr int64_t kGrain = int64_t(1) << 16;
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {  // first touch by the pool's threads
    for (int64_t i = lo; i < hi; ++i) pa[i] = 1.0f, pb[i] = 2.0f, pc[i] = 0.0f;
  });
  const double copy = median_time(
      [&] {
        parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) pc[i] = pa[i];
        });
      },
      budget);
  const float q = 3.0f;
  const double triad = median_time(
      [&] {
        parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + q * pc[i];
        });
      },
      budget);
  return {2.0 * 4.0 * double(n) / copy, 3.0 * 4.0 * double(n) / triad};
}

std::vector<double> message_sizes(bool quick) {
  std::vector<double> sizes;
  const double top = quick ? 512.0 * 1024 : 16.0 * 1024 * 1024;
  for (double s = 8; s <= top; s *= quick ? 16 : 4) sizes.push_back(s);
  return sizes;
}

Tensor message(double bytes) {
  return full({std::max<int64_t>(1, int64_t(bytes) / 4)}, 1.0, DType::F32);
}

// Calls per figure: as many as fill `budget` at the warm-up's pace, at least 9 so that a median
// of single calls has points on both sides of a stall.
int repetitions(double budget, double warm) {
  return int(std::clamp(budget / std::max(warm, 1e-7), 9.0, 2000.0));
}

// One-way time per message between ranks `a` and `b` (half a round trip), the median over single
// round trips timed by `a`; the other ranks wait. Single calls rather than the average of a loop:
// on a shared machine a few round trips wait a whole time slice for the peer, and an average
// charges every message a share of that.
double ping_pong(dist::Communicator& world, int a, int b, double bytes, double budget) {
  Tensor buf = message(bytes);
  Tensor count = full({1}, 0.0, DType::F64);
  const int me = world.rank();
  double result = 0;
  if (me == a || me == b) {
    const int peer = me == a ? b : a;
    auto round_trip = [&] {
      if (me == a) {
        world.send(buf, peer, 1);
        world.recv(buf, peer, 2);
      } else {
        world.recv(buf, peer, 1);
        world.send(buf, peer, 2);
      }
    };
    std::vector<double> warm;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      round_trip();
      warm.push_back(seconds_since(t0));
    }
    // Rank a chooses the repetitions from its warm-up and tells b, so both loop alike.
    if (me == a) {
      count.data<double>()[0] = repetitions(budget, median(warm));
      world.send(count, peer, 3);
    } else {
      world.recv(count, peer, 3);
    }
    std::vector<double> times;
    for (int i = 0; i < int(count.item()); ++i) {
      const auto t0 = Clock::now();
      round_trip();
      times.push_back(seconds_since(t0) / 2);
    }
    if (me == a) result = median(times);
  }
  return max_over_ranks(world, result);
}

// Seconds per all-reduce of `bytes` over the world: a repetition count agreed from the slowest
// rank's warm-up, each rank's median over single calls, the slowest rank's median.
double all_reduce_time(dist::Communicator& world, double bytes, double budget) {
  Tensor buf = message(bytes);
  std::vector<double> warm;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    world.all_reduce(buf);
    warm.push_back(seconds_since(t0));
  }
  const int iters = repetitions(budget, max_over_ranks(world, median(warm)));
  std::vector<double> times;
  world.barrier();
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    world.all_reduce(buf);
    times.push_back(seconds_since(t0));
  }
  return max_over_ranks(world, median(times));
}

double load_average() {
  double avg[1] = {0};
  return getloadavg(avg, 1) == 1 ? avg[0] : 0.0;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Every rank's host name, by rank (fixed-width rows of an all_gather).
std::vector<std::string> host_names(dist::Communicator& world) {
  constexpr int64_t kWidth = 64;
  const std::string mine = host_name().substr(0, kWidth - 1);
  Tensor in = zeros({kWidth}, DType::I32);
  for (size_t i = 0; i < mine.size(); ++i)
    in.data<int32_t>()[i] = static_cast<unsigned char>(mine[i]);
  Tensor out = zeros({kWidth * world.size()}, DType::I32);
  world.all_gather(in, out);
  std::vector<std::string> names;
  for (int r = 0; r < world.size(); ++r) {
    std::string s;
    for (int64_t i = 0; i < kWidth; ++i) {
      const int32_t ch = out.data<int32_t>()[r * kWidth + i];
      if (ch == 0) break;
      s.push_back(char(ch));
    }
    names.push_back(s);
  }
  return names;
}

std::string format(double v, int precision = 4) {
  std::ostringstream out;
  out.precision(precision);
  out << v;
  return out.str();
}

LinkSpec link_from(const AlphaBeta& fit) {
  return LinkSpec{1.0 / fit.beta, fit.alpha, {}};  // a switch: no torus
}

}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  TESSEL_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2,
               "alpha-beta fit: needs two or more (bytes, seconds) points, got ", bytes.size(),
               " sizes and ", seconds.size(), " times");
  std::vector<size_t> order(bytes.size());
  for (size_t i = 0; i < order.size(); ++i) {
    TESSEL_CHECK(seconds[i] > 0 && bytes[i] >= 0, "alpha-beta fit: point ", i, " has ", bytes[i],
                 " bytes in ", seconds[i], " s");
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return bytes[x] < bytes[y]; });
  const size_t lo = order.front(), hi = order.back();
  TESSEL_CHECK(bytes[hi] > bytes[lo], "alpha-beta fit: the message sizes are all equal");
  // Alpha from the smallest third of the sizes, beta from the largest third, each a median, then
  // refined against each other: on a shared machine a few points land a time slice late, and a
  // least-squares line would follow them.
  const size_t k = std::max<size_t>(1, order.size() / 3);
  auto alpha_given = [&](double beta) {
    std::vector<double> v;
    for (size_t i = 0; i < k; ++i) v.push_back(seconds[order[i]] - beta * bytes[order[i]]);
    return median(v);
  };
  auto beta_given = [&](double alpha) {
    std::vector<double> v;
    for (size_t i = order.size() - k; i < order.size(); ++i)
      if (bytes[order[i]] > 0) v.push_back((seconds[order[i]] - alpha) / bytes[order[i]]);
    return v.empty() ? 0.0 : median(v);
  };
  AlphaBeta fit{alpha_given(0.0), 0.0};
  for (int iter = 0; iter < 4; ++iter) {
    fit.beta = beta_given(fit.alpha);
    fit.alpha = alpha_given(fit.beta);
  }
  if (fit.alpha > 0 && fit.beta > 0) return fit;
  // Noise made one term non-positive: the two ends of the range still bound the line.
  fit.alpha = seconds[lo];
  fit.beta = std::max(seconds[hi] - seconds[lo], seconds[hi] * 1e-3) / (bytes[hi] - bytes[lo]);
  return fit;
}

Cluster calibrate(dist::Communicator& world, const CalibrateOptions& options) {
  const bool quick = options.quick;
  const double budget = quick ? 0.03 : 0.3;
  auto say = [&](const std::string& line) {
    if (world.rank() == 0 && options.progress) options.progress(line);
  };

  // Where the ranks are: ranks on one host form a node; nodes must be filled in rank order.
  const std::vector<std::string> hosts = host_names(world);
  std::map<std::string, int> per_host;
  for (const std::string& h : hosts) ++per_host[h];
  const int p = per_host[hosts[0]];
  for (const auto& [h, count] : per_host)
    TESSEL_CHECK(count == p, "plan calibrate: host ", hosts[0], " runs ", p, " ranks but host ", h,
                 " runs ", count, "; calibrate with the same number of ranks on every host");
  for (int r = 0; r < world.size(); ++r)
    TESSEL_CHECK(hosts[size_t(r)] == hosts[size_t(r / p * p)], "plan calibrate: rank ", r,
                 " is on host ", hosts[size_t(r)], " but rank ", r / p * p, " on ",
                 hosts[size_t(r / p * p)],
                 ": ranks must fill hosts in order (mpirun --map-by slot)");

  // The disk's directory is checked before the minutes of other measurements.
  DiskOptions d;
  d.dir = options.disk_dir;
  d.bytes = options.disk_bytes > 0 ? options.disk_bytes : int64_t(quick ? 256 : 1024) << 20;
  d.file_tag = std::to_string(world.rank());
  if (!d.dir.empty()) check_disk_dir(d.dir, d.bytes * p);

  Cluster c;
  c.name = "calibrated " + hosts[0];
  c.source = "calibration";
  c.devices_per_node = p;
  c.nodes = world.size() / p;
  c.device.kind = std::string("cpu (") +
                  std::string(kernels::kernel_set_name(kernels::active_kernel_set())) + ", " +
                  std::to_string(num_threads()) + " threads per rank)";
  const int64_t ram = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  c.device.memory_bytes = std::max<int64_t>(1, ram / p);
  c.device.peak_flops.assign(std::size(kPeakDtypes), 0.0);
  say("tessel plan calibrate: " + std::to_string(world.size()) + " rank(s), " +
      std::to_string(c.nodes) + " node(s) of " + std::to_string(p) + ", " +
      std::to_string(num_threads()) + " threads per rank, " + (quick ? "quick" : "full"));

  const Agreement agree{[&] { world.barrier(); },
                        [&](double seconds) { return max_over_ranks(world, seconds); }};

  // GEMM rates over a grid of shapes per operand layout, all ranks at once; the peak of a CPU is
  // the best rate measured.
  std::vector<DType> dtypes = {DType::F32};
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx512_bf16 || cpu.amx_bf16) dtypes.push_back(DType::BF16);
  for (DType dt : dtypes) {
    const std::string name = dt == DType::F32 ? "f32" : "bf16";
    double& peak = c.device.peak_flops[peak_dtype_index(name)];
    for (const GemmPoint& p : measure_gemm_grid(dt, quick, budget, agree, [&](const GemmPoint& p) {
           say("  gemm " + name + " " + std::to_string(p.m) + "x" + std::to_string(p.n) + "x" +
               std::to_string(p.k) + " " + p.layout + ": " + format(p.flops / 1e9) +
               " GFLOP/s (in cache " + format(p.warm_flops / 1e9) + ")");
         })) {
      c.gemm.push_back(p);
      peak = std::max(peak, p.flops);
    }
  }

  // Memory bandwidth: all ranks stream at once, so each device gets its share of the node's.
  const int64_t n = int64_t(quick ? 8 : 32) << 20;
  world.barrier();
  const auto [copy, triad] = stream_bandwidth(n, budget);
  const double copy_all = 1.0 / max_over_ranks(world, 1.0 / copy);
  const double triad_all = 1.0 / max_over_ranks(world, 1.0 / triad);
  c.device.memory_bandwidth = triad_all;
  say("  stream copy: " + format(copy_all / 1e9) + " GB/s, triad: " + format(triad_all / 1e9) +
      " GB/s per rank (" + std::to_string(n * 4 >> 20) + " MiB arrays)");

  // The other kernels of a step, then what an op costs outside its kernel.
  c.kernels = measure_kernels(quick, budget, agree, [&](const KernelPoint& p) {
    say("  kernel " + p.kernel + " " + p.dtype + " " + format(p.bytes, 8) + " B " +
        format(p.flops, 8) + " FLOP: " + format(p.seconds * 1e6) + " us (in cache " +
        format(p.warm_seconds * 1e6) + ")");
  });
  // What the kernels' operands were evicted from: each pool thread's L1 data and L2.
  c.device.cache_bytes = calibration::private_cache_bytes() * std::max(1, num_threads());
  const OpOverhead overhead = measure_op_overhead(budget, agree);
  c.device.op_overhead = overhead.per_op;
  c.device.op_overhead_per_byte = overhead.per_byte;
  say("  op overhead: " + format(c.device.op_overhead * 1e6) + " us per op and " +
      format(c.device.op_overhead_per_byte * 1e9) + " ns per byte it writes, outside its kernel");
  {
    // The load: every rank keeps its threads busy with 256^3 products, as a step would.
    const Tensor a = randn({256, 256}), b = randn({256, 256});
    Tensor out = zeros({256, 256});
    const kernels::GemmDesc desc = kernels::dense_gemm_desc(1, 256, 256, 256, false, false);
    kernels::Backend& backend = kernels::cpu_backend();
    world.barrier();
    const double share =
        calibration::cpu_share([&] { backend.gemm(desc, a, b, out); }, quick ? 0.5 : 2.0);
    c.device.cpu_share = std::min(1.0, 1.0 / max_over_ranks(world, 1.0 / std::max(share, 1e-3)));
    say("  cpu share: " + format(c.device.cpu_share) + " of the wall clock per rank (load " +
        format(load_average()) + ")");
  }

  // Links: ping-pong inside a node (ranks 0, 1) and across nodes (ranks 0, p); then all-reduce.
  const std::vector<double> sizes = message_sizes(quick);
  auto measure_link = [&](int a, int b, const char* what) {
    std::vector<double> t;
    for (double s : sizes) {
      t.push_back(ping_pong(world, a, b, s, budget));
      say(std::string("  send_recv ") + what + " " + format(s, 8) +
          " B: " + format(t.back() * 1e6) + " us");
    }
    const AlphaBeta fit = fit_alpha_beta(sizes, t);
    c.collectives.push_back(CollectiveFit{"send_recv", 2, fit.alpha, fit.beta});
    say(std::string("  send_recv ") + what + " fit: alpha " + format(fit.alpha * 1e6) +
        " us, bandwidth " + format(1e-9 / fit.beta) + " GB/s");
    return fit;
  };
  if (p > 1) c.intra_node = link_from(measure_link(0, 1, "in node"));
  if (c.nodes > 1) c.inter_node = link_from(measure_link(0, p, "across nodes"));
  if (world.size() > 1) {
    std::vector<double> t;
    for (double s : sizes) {
      t.push_back(all_reduce_time(world, s, budget));
      say("  all_reduce " + format(s, 8) + " B: " + format(t.back() * 1e6) + " us");
    }
    const AlphaBeta fit = fit_alpha_beta(sizes, t);
    c.collectives.push_back(CollectiveFit{"all_reduce", world.size(), fit.alpha, fit.beta});
    say("  all_reduce fit: alpha " + format(fit.alpha * 1e6) + " us, beta " +
        format(fit.beta * 1e9) + " ns/B (" + format(1e-9 / fit.beta) + " GB/s of buffer)");
  }
  if (!options.disk_dir.empty()) {
    // Each rank swaps to its own file at the same time, as offloaded ranks do.
    world.barrier();
    const DiskResult disk = measure_disk(d);
    c.storage = StorageSpec{1.0 / max_over_ranks(world, 1.0 / disk.storage.read_bandwidth),
                            1.0 / max_over_ranks(world, 1.0 / disk.storage.write_bandwidth)};
    say("  disk " + options.disk_dir + ": write " + format(c.storage->write_bandwidth / 1e9) +
        " GB/s, read " + format(c.storage->read_bandwidth / 1e9) + " GB/s per rank (" +
        std::to_string(d.bytes >> 20) + " MiB, 1 MiB requests, 8 in flight" +
        (disk.direct ? ", direct I/O)" : "; no direct I/O here: the page cache's figures)"));
  }
  return c;
}

}  // namespace tessel::plan
