// SPDX-License-Identifier: Apache-2.0
// `tessel bench comm`: time of one collective per message size through tessel's communicator and
// through the bare MPI call on the same buffers, with algorithm and bus bandwidth as nccl-tests
// defines them (busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
// all_to_all, 1 for broadcast). One JSON line per size, printed by rank 0. Run under mpirun (MPI)
// or a torchrun-style launcher (tcp backend, no bare MPI figures).
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/commands.h"
#include "tessel/dist/mpi/mpi_communicator.h"
#include "tessel/dist/world.h"

namespace tessel::cli {

namespace {

using dist::Communicator;
using nlohmann::json;

struct CommOptions {
  std::string op = "all_reduce";
  std::string sizes = "1K:256M";
  std::string dtype = "f32";
  double factor = 2;
  double seconds = 0.2;
};

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    TESSEL_FAIL("bench comm: size '", s, "' is not a number with an optional K, M or G suffix");
  }
  std::string suffix = s.substr(pos);
  double scale = suffix.empty()  ? 1
                 : suffix == "K" ? 1024.0
                 : suffix == "M" ? 1048576.0
                 : suffix == "G" ? 1073741824.0
                                 : -1;
  TESSEL_CHECK(scale > 0 && v > 0, "bench comm: size '", s,
               "' is not a positive number with an "
               "optional K, M or G suffix");
  return int64_t(v * scale);
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return double(n - 1) / n;  // all_gather, reduce_scatter, all_to_all
}

double max_over_ranks(Communicator& world, double x) {
  Tensor t = full({1}, x, DType::F64);
  world.all_reduce(t, dist::ReduceOp::Max);
  return t.item();
}

// Seconds per call of `a` and of `b`: warm-up, an iteration count agreed by all ranks (from the
// slowest rank's warm-up), then rounds that alternate a and b so that load from other processes
// hits both alike; each figure is the median over rounds of the slowest rank's average.
std::pair<double, double> time_pair(Communicator& world, const std::function<void()>& a,
                                    const std::function<void()>& b, double budget, int& iters) {
  using Clock = std::chrono::steady_clock;
  constexpr int kRounds = 5;
  auto average = [&](const std::function<void()>& call, int n) {
    world.barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) call();
    return max_over_ranks(world, std::chrono::duration<double>(Clock::now() - t0).count() / n);
  };
  average(a, 2);
  double warm = b ? std::max(average(a, 1), average(b, 2)) : average(a, 1);
  iters = int(std::clamp(budget / kRounds / std::max(warm, 1e-9), 1.0, 2000.0));
  std::vector<double> ta, tb;
  for (int r = 0; r < kRounds; ++r) {
    ta.push_back(average(a, iters));
    if (b) tb.push_back(average(b, iters));
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(ta), median(tb)};
}

void run_op(Communicator& world, MPI_Comm raw, const std::string& op, DType dtype, int64_t bytes,
            const CommOptions& opt) {
  const int n = world.size();
  const int64_t es = int64_t(dtype_size(dtype));
  int64_t count = bytes / es;  // elements in the figure's "size" (nccl-tests' convention)
  if (op != "all_reduce" && op != "broadcast") count -= count % n;
  if (count == 0) return;
  const int64_t part = op == "all_reduce" || op == "broadcast" ? count : count / n;
  Tensor in = full({op == "all_gather" ? part : count}, 1.0, dtype);
  Tensor out = full({op == "reduce_scatter" ? part : count}, 0.0, dtype);
  std::function<void()> ours, bare;
  const MPI_Datatype type = dist::mpi::datatype(dtype);
  if (op == "all_reduce") {
    ours = [&] { world.all_reduce(in, out); };
    bare = [&] {
      MPI_Allreduce(in.data_ptr(), out.data_ptr(), int(count), type,
                    dist::mpi::reduce_op(dtype, dist::ReduceOp::Sum), raw);
    };
  } else if (op == "reduce_scatter") {
    ours = [&] { world.reduce_scatter(in, out); };
    bare = [&] {
      MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), int(part), type,
                               dist::mpi::reduce_op(dtype, dist::ReduceOp::Sum), raw);
    };
  } else if (op == "all_gather") {
    ours = [&] { world.all_gather(in, out); };
    bare = [&] {
      MPI_Allgather(in.data_ptr(), int(part), type, out.data_ptr(), int(part), type, raw);
    };
  } else if (op == "all_to_all") {
    ours = [&] { world.all_to_all(in, out); };
    bare = [&] {
      MPI_Alltoall(in.data_ptr(), int(part), type, out.data_ptr(), int(part), type, raw);
    };
  } else {
    ours = [&] { world.broadcast(in, 0); };
    bare = [&] { MPI_Bcast(in.data_ptr(), int(count), type, 0, raw); };
  }
  int iters = 0;
  if (raw == MPI_COMM_NULL) bare = nullptr;
  const auto [t, tb] = time_pair(world, ours, bare, opt.seconds, iters);
  const double size = double(count * es);
  json j = {{"bench", "comm"},
            {"op", op},
            {"dtype", dtype_name(dtype)},
            {"ranks", n},
            {"backend", world.backend()},
            {"bytes", count * es},
            {"count", count},
            {"iters", iters},
            {"us", t * 1e6},
            {"algbw_gbs", size / t / 1e9},
            {"busbw_gbs", size / t / 1e9 * bus_factor(op, n)}};
  if (bare) {
    j["mpi_us"] = tb * 1e6;
    j["mpi_busbw_gbs"] = size / tb / 1e9 * bus_factor(op, n);
    j["overhead"] = t / tb;
  }
  if (world.rank() == 0) std::cout << j.dump() << std::endl;
}

void bench_comm(const CommOptions& opt) {
  dist::CommPtr world = dist::init_world();
  const DType dtype = dtype_from_name(opt.dtype);
  const size_t colon = opt.sizes.find(':');
  const int64_t lo = parse_bytes(opt.sizes.substr(0, colon));
  const int64_t hi = colon == std::string::npos ? lo : parse_bytes(opt.sizes.substr(colon + 1));
  TESSEL_CHECK(lo <= hi, "bench comm: sizes ", opt.sizes, " run from ", lo, " down to ", hi,
               " bytes");
  // The bare MPI calls run on their own duplicate of the world's communicator.
  MPI_Comm raw = MPI_COMM_NULL;
  if (auto* mpi = dynamic_cast<dist::MpiCommunicator*>(world.get()))
    MPI_Comm_dup(mpi->handle(), &raw);
  if (world->rank() == 0)
    std::cerr << "tessel bench comm: " << opt.op << ", " << world->size() << " ranks ("
              << world->backend() << "), " << opt.dtype << ", " << lo << " to " << hi << " bytes"
              << (raw == MPI_COMM_NULL ? "; no MPI world, so no bare MPI figures" : "") << "\n";
  std::vector<std::string> ops = {opt.op};
  if (opt.op == "all")
    ops = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"};
  for (const std::string& op : ops)
    for (double b = double(lo); b <= double(hi) * 1.0001; b *= opt.factor)
      run_op(*world, raw, op, dtype, int64_t(b), opt);
  if (raw != MPI_COMM_NULL) MPI_Comm_free(&raw);
}

}  // namespace

void add_bench_comm_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "comm", "collective time and bandwidth per message size (under mpirun or torchrun)");
  static CommOptions opt;
  cmd->add_option("--op", opt.op, "collective")
      ->check(CLI::IsMember(
          {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "all"}));
  cmd->add_option("--sizes", opt.sizes,
                  "bytes per call, MIN:MAX with K/M/G suffixes (default 1K:256M)");
  cmd->add_option("--factor", opt.factor, "size multiplier between steps")
      ->check(CLI::Range(1.1, 1024.0));
  cmd->add_option("--dtype", opt.dtype, "element type")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "i32", "i64", "f64"}));
  cmd->add_option("--seconds", opt.seconds, "time budget per figure")
      ->check(CLI::Range(0.001, 60.0));
  cmd->callback([] {
    try {
      bench_comm(opt);
    } catch (const std::exception& e) {
      dist::abort_job(1, std::string("tessel bench comm: ") + e.what());  // ends every rank
    }
  });
}

}  // namespace tessel::cli
