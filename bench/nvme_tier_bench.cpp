// SPDX-License-Identifier: Apache-2.0
// The NVMe tier's bandwidth (docs/MEMORY.md): chunk writes and reads through io_uring with
// O_DIRECT, every chunk of the set in flight at once, and the same through the ChunkManager's
// moves (host tier <-> NVMe), printed as one JSON line per figure. Compare with fio on the same
// directory, block size and queue depth (docs/BENCHMARKS.md has both commands).
//   nvme_tier_bench --dir D [--chunk-mib 64] [--chunks 16] [--block-kib 1024] [--depth 32]
//                   [--repeat 3] [--overlap-passes P --prefetch D]
// With --overlap-passes, a scripted step with P passes of compute over each chunk instead: in
// memory, from NVMe on demand, and with prefetch D chunks ahead (bench_overlap).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/memory/chunk_manager.h"
#include "tessel/memory/nvme_tier.h"

namespace {

using namespace tessel;
using namespace tessel::memory;
using Clock = std::chrono::steady_clock;

volatile double g_sink = 0;  // keeps the overlap benchmark's compute from being optimised away

struct Options {
  std::string dir;
  size_t chunk_mib = 64, chunks = 16, block_kib = 1024;
  unsigned depth = 32;
  int repeat = 3;
  int overlap_passes = 0;  // > 0: run the overlap benchmark instead, this much compute per chunk
  int prefetch = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    TESSEL_CHECK(i + 1 < argc, "nvme_tier_bench: ", arg, " needs a value");
    const std::string value = argv[++i];
    if (arg == "--dir") {
      o.dir = value;
    } else if (arg == "--chunk-mib") {
      o.chunk_mib = std::stoul(value);
    } else if (arg == "--chunks") {
      o.chunks = std::stoul(value);
    } else if (arg == "--block-kib") {
      o.block_kib = std::stoul(value);
    } else if (arg == "--depth") {
      o.depth = unsigned(std::stoul(value));
    } else if (arg == "--repeat") {
      o.repeat = std::stoi(value);
    } else if (arg == "--overlap-passes") {
      o.overlap_passes = std::stoi(value);
    } else if (arg == "--prefetch") {
      o.prefetch = std::stoi(value);
    } else {
      TESSEL_FAIL("nvme_tier_bench: unknown option ", arg,
                  " (expected --dir, --chunk-mib, --chunks, --block-kib, --depth, --repeat, "
                  "--overlap-passes, --prefetch)");
    }
  }
  TESSEL_CHECK(!o.dir.empty(), "nvme_tier_bench: --dir is required");
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void print(const char* what, const Options& o, bool direct, double bytes, double best,
           double median) {
  std::printf(
      "{\"bench\":\"nvme_tier\",\"op\":\"%s\",\"chunk_mib\":%zu,\"chunks\":%zu,\"block_kib\":%zu,"
      "\"depth\":%u,\"direct\":%s,\"gb_per_s_best\":%.3f,\"gb_per_s_median\":%.3f}\n",
      what, o.chunk_mib, o.chunks, o.block_kib, o.depth, direct ? "true" : "false",
      bytes / best / 1e9, bytes / median / 1e9);
  std::fflush(stdout);
}

// Times `fn` o.repeat times; returns {best, median} seconds.
template <typename Fn>
std::pair<double, double> timed(const Options& o, Fn fn) {
  std::vector<double> t;
  for (int r = 0; r < o.repeat; ++r) {
    auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

// The tier alone: every chunk's write (then read) submitted at once, then all waited for.
void bench_tier(const Options& o) {
  const size_t cb = o.chunk_mib << 20;
  NvmeTier tier(o.dir, cb, o.depth, o.block_kib << 10);
  tier.reserve(o.chunks);
  std::vector<void*> bufs;
  for (size_t i = 0; i < o.chunks; ++i) {
    bufs.push_back(std::aligned_alloc(kIoAlignment, cb));
    std::memset(bufs.back(), int(i + 1), cb);
  }
  const double bytes = double(cb) * double(o.chunks);
  auto all = [&](bool write) {
    std::vector<IoTicket> tickets;
    for (size_t i = 0; i < o.chunks; ++i) {
      tickets.push_back(write ? tier.write(int64_t(i), bufs[i]) : tier.read(int64_t(i), bufs[i]));
    }
    for (auto& t : tickets) tier.wait(t);
  };
  auto [wb, wm] = timed(o, [&] { all(true); });
  print("tier_write", o, tier.direct(), bytes, wb, wm);
  auto [rb, rm] = timed(o, [&] { all(false); });
  print("tier_read", o, tier.direct(), bytes, rb, rm);
  for (void* p : bufs) std::free(p);
  if (!tier.direct())
    std::printf("{\"direct_io_fallback\":\"%s\"}\n", tier.fallback_reason().c_str());
}

// Through the ChunkManager: dirty host-tier chunks moved out to NVMe (each move waits for its
// chunk, whose requests fill the queue), then all prefetched back into the host tier at once.
void bench_manager(const Options& o) {
  const size_t cb = o.chunk_mib << 20;
  MemoryConfig config;
  config.chunk_bytes = cb;
  config.device_budget = cb;
  config.host_budget = cb * o.chunks;
  config.nvme_dir = o.dir;
  config.io_block_bytes = o.block_kib << 10;
  config.io_depth = o.depth;
  ChunkManager manager(config);
  {
    std::vector<Tensor> tensors;
    for (size_t i = 0; i < o.chunks + 1; ++i) {
      tensors.push_back(full({int64_t(cb / 4)}, double(i)));
      manager.add(tensors.back(), "param");
    }
    manager.seal();  // chunk 0 on the device tier, the others in the host tier
  }
  const int n = int(o.chunks);
  std::vector<double> write_s, read_s;
  for (int r = 0; r < o.repeat; ++r) {
    for (int c = 1; c <= n; ++c) {
      manager.access(c, AccessMode::ReadWrite, Tier::Host);  // dirty: the move must write
      manager.release(c);
    }
    auto t0 = Clock::now();
    for (int c = 1; c <= n; ++c) manager.move(c, Tier::Nvme);
    write_s.push_back(seconds_since(t0));
    t0 = Clock::now();
    for (int c = 1; c <= n; ++c) manager.prefetch(c, Tier::Host);
    manager.wait_all();
    read_s.push_back(seconds_since(t0));
    manager.check_accounting();
  }
  std::sort(write_s.begin(), write_s.end());
  std::sort(read_s.begin(), read_s.end());
  const double bytes = double(cb) * double(n);
  print("manager_write", o, manager.direct_io(), bytes, write_s.front(),
        write_s[write_s.size() / 2]);
  print("manager_read", o, manager.direct_io(), bytes, read_s.front(), read_s[read_s.size() / 2]);
}

// Overlap: a scripted step sweeps the chunks in order (as a forward pass sweeps the layers),
// each access running `passes` reads over its chunk as its compute. The same step with every
// chunk in memory (compute alone), from NVMe with the trace but no prefetch (reads on demand),
// and with prefetch `distance` ahead; a device tier of `distance` + 1 chunks, no host tier.
void bench_overlap(const Options& o, int passes, int distance) {
  const size_t cb = o.chunk_mib << 20;
  const int n = int(o.chunks);
  auto step = [&](ChunkManager& m, const std::vector<Tensor>& tensors) {
    double sink = 0;
    for (int c = 0; c < n; ++c) {
      m.access(c, AccessMode::Read);
      const float* p = tensors[size_t(c)].data<float>();
      for (int r = 0; r < passes; ++r) {
        float acc = 0;
        for (size_t i = 0; i < cb / 4; ++i) acc += p[i];
        sink += acc;
      }
      m.release(c, ChunkState::HoldAfterForward);
    }
    return sink;
  };
  auto run = [&](bool on_nvme, int prefetch, const char* what) {
    MemoryConfig config;
    config.chunk_bytes = cb;
    config.device_budget = on_nvme ? cb * size_t(distance + 1) : cb * o.chunks;
    config.nvme_dir = o.dir;
    config.io_block_bytes = o.block_kib << 10;
    config.io_depth = o.depth;
    ChunkManager m(config);
    std::vector<Tensor> tensors;
    for (int c = 0; c < n; ++c) {
      tensors.push_back(full({int64_t(cb / 4)}, 1.0));
      m.add(tensors.back(), "param");
    }
    m.seal();
    m.start_trace();
    g_sink = g_sink + step(m, tensors);  // the recorded step
    m.use_trace(m.stop_trace(), prefetch);
    std::vector<double> t;
    MemoryStats before = m.stats();
    for (int r = 0; r < o.repeat; ++r) {
      auto t0 = Clock::now();
      g_sink = g_sink + step(m, tensors);
      t.push_back(seconds_since(t0));
    }
    std::sort(t.begin(), t.end());
    const MemoryStats& s = m.stats();
    std::printf(
        "{\"bench\":\"nvme_overlap\",\"mode\":\"%s\",\"chunk_mib\":%zu,\"chunks\":%d,"
        "\"passes\":%d,\"prefetch_distance\":%d,\"step_s_median\":%.3f,\"step_s_best\":%.3f,"
        "\"reads_per_step\":%.1f,\"demand_reads_per_step\":%.1f,\"waits_per_step\":%.1f}\n",
        what, o.chunk_mib, n, passes, prefetch, t[t.size() / 2], t.front(),
        double(s.nvme_reads - before.nvme_reads) / o.repeat,
        double(s.demand_reads - before.demand_reads) / o.repeat,
        double(s.io_waits - before.io_waits) / o.repeat);
    std::fflush(stdout);
  };
  run(false, 0, "in_memory");
  run(true, 0, "nvme_on_demand");
  run(true, distance, "nvme_prefetch");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.overlap_passes > 0) {
      bench_overlap(o, o.overlap_passes, o.prefetch);
    } else {
      bench_tier(o);
      bench_manager(o);
    }
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "nvme_tier_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
