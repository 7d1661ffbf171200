// SPDX-License-Identifier: Apache-2.0
// The NVMe tier's bandwidth (docs/MEMORY.md): chunk writes and reads through io_uring with
// O_DIRECT, every chunk of the set in flight at once, and the same through the ChunkManager's
// moves (host tier <-> NVMe), printed as one JSON line per figure. Compare with fio on the same
// directory, block size and queue depth (docs/BENCHMARKS.md has both commands).
//   nvme_tier_bench --dir D [--chunk-mib 64] [--chunks 16] [--block-kib 1024] [--depth 32]
//                   [--repeat 3]
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

struct Options {
  std::string dir;
  size_t chunk_mib = 64, chunks = 16, block_kib = 1024;
  unsigned depth = 32;
  int repeat = 3;
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
    } else {
      TESSEL_FAIL("nvme_tier_bench: unknown option ", arg,
                  " (expected --dir, --chunk-mib, --chunks, --block-kib, --depth, --repeat)");
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

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    bench_tier(o);
    bench_manager(o);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "nvme_tier_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
