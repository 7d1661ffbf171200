// SPDX-License-Identifier: Apache-2.0
// Inputs are small integers (exact in every dtype and in every partial sum), so sums and maxima
// must match exactly; averages are compared with one rounding of the dtype as tolerance.
#include "collective_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace tessel::dist::testing {

void CheckLog::expect(bool ok, const std::string& what) {
  ++checks_;
  if (ok) return;
  if (++failures_ <= 20) detail_ << what << "\n";
}

int agree_on_exit(Communicator& world, const CheckLog& log) {
  if (log.failures() > 0)
    std::fprintf(stderr, "rank %d: %d of %d checks failed:\n%s", world.rank(), log.failures(),
                 log.checks(), log.report().c_str());
  Tensor failed = full({2}, 0, DType::I64);
  failed.data<int64_t>()[0] = log.failures();
  failed.data<int64_t>()[1] = log.checks();
  world.all_reduce(failed);
  const int64_t failures = failed.data<int64_t>()[0], checks = failed.data<int64_t>()[1];
  if (world.rank() == 0)
    std::printf("%s backend, %d ranks: %lld checks, %lld failed\n",
                std::string(world.backend()).c_str(), world.size(), (long long)checks,
                (long long)failures);
  return failures == 0 && checks > 0 ? 0 : 1;
}

namespace {

double value(int rank, int64_t i, int salt) {
  return double((rank * 5 + i * 3 + salt * 7) % 13) - 6;
}

// The values are small integers (-6..6): every sum over ranks is exact in any order, on any vector
// width; only Avg's one division (and the half types' storage) rounds, once, whatever the machine.
double tolerance(DType d) {
  switch (d) {
    case DType::BF16:
      return 1.0 / 128;
    case DType::F16:
      return 1.0 / 1024;
    case DType::F32:
      return 1e-6;
    case DType::F64:
      return 1e-12;
    default:
      return 0;
  }
}

Tensor make(int64_t n, DType d, const std::function<double(int64_t)>& f) {
  Tensor t = empty({n}, d);
  for (int64_t i = 0; i < n; ++i) store_from_double(t.data_ptr(), d, size_t(i), f(i));
  return t;
}

struct Ctx {
  Communicator& comm;
  CheckLog& log;
  int n, me;
};

// Compares t with f(i), element by element; reports the first mismatch.
void compare(Ctx& c, const std::string& what, const Tensor& t,
             const std::function<double(int64_t)>& f, double tol = 0) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    double got = load_as_double(t.data_ptr(), t.dtype(), size_t(i)), want = f(i);
    if (std::abs(got - want) > tol * std::max(1.0, std::abs(want))) {
      std::ostringstream out;
      out << what << " " << dtype_name(t.dtype()) << " on '" << c.comm.label() << "' rank " << c.me
          << " of " << c.n << ": element " << i << " of " << t.numel() << " is " << got
          << ", expected " << want;
      c.log.expect(false, out.str());
      return;
    }
  }
  c.log.expect(true, what);
}

void check_reductions(Ctx& c, int64_t k, DType d) {
  auto sum_of = [&](int salt, int64_t i) {
    double s = 0;
    for (int r = 0; r < c.n; ++r) s += value(r, i, salt);
    return s;
  };
  auto max_of = [&](int salt, int64_t i) {
    double m = -1e9;
    for (int r = 0; r < c.n; ++r) m = std::max(m, value(r, i, salt));
    return m;
  };
  const bool fp = dtype_is_float(d);
  Tensor in = make(k, d, [&](int64_t i) { return value(c.me, i, 1); });
  Tensor out = make(k, d, [](int64_t) { return -99; });
  c.comm.all_reduce(in, out);
  compare(c, "all_reduce(sum) out-of-place", out, [&](int64_t i) { return sum_of(1, i); });
  compare(c, "all_reduce input untouched", in, [&](int64_t i) { return value(c.me, i, 1); });
  c.comm.all_reduce(in, ReduceOp::Max);
  compare(c, "all_reduce(max) in-place", in, [&](int64_t i) { return max_of(1, i); });
  if (fp) {
    Tensor a = make(k, d, [&](int64_t i) { return value(c.me, i, 2); });
    c.comm.all_reduce(a, ReduceOp::Avg);
    compare(
        c, "all_reduce(avg) in-place", a, [&](int64_t i) { return sum_of(2, i) / c.n; },
        tolerance(d));
  }
  // reduce_scatter: block `me` of the sum over ranks.
  Tensor big = make(k * c.n, d, [&](int64_t i) { return value(c.me, i, 3); });
  Tensor part = make(k, d, [](int64_t) { return -99; });
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
    if (op == ReduceOp::Avg && !fp) continue;
    c.comm.reduce_scatter(big, part, op);
    compare(
        c, std::string("reduce_scatter(") + std::string(reduce_op_name(op)) + ")", part,
        [&](int64_t i) {
          int64_t j = c.me * k + i;
          return op == ReduceOp::Max   ? max_of(3, j)
                 : op == ReduceOp::Avg ? sum_of(3, j) / c.n
                                       : sum_of(3, j);
        },
        op == ReduceOp::Avg ? tolerance(d) : 0);
  }
}

void check_gathers(Ctx& c, int64_t k, DType d) {
  Tensor in = make(k, d, [&](int64_t i) { return value(c.me, i, 4); });
  Tensor out = make(k * c.n, d, [](int64_t) { return -99; });
  c.comm.all_gather(in, out);
  compare(c, "all_gather", out, [&](int64_t i) { return value(int(i / k), i % k, 4); });
  Tensor whole =
      make(k * c.n, d, [&](int64_t i) { return i / k == c.me ? value(c.me, i % k, 5) : -99; });
  c.comm.all_gather(whole.narrow(0, c.me * k, k), whole);
  compare(c, "all_gather in-place", whole, [&](int64_t i) { return value(int(i / k), i % k, 5); });

  std::vector<int64_t> counts;
  for (int r = 0; r < c.n; ++r) counts.push_back((k + r) % 4);
  int64_t total = 0;
  for (int64_t x : counts) total += x;
  std::vector<int64_t> displ = displacements(counts);
  Tensor vin = make(counts[size_t(c.me)], d, [&](int64_t i) { return value(c.me, i, 6); });
  Tensor vout = make(total, d, [](int64_t) { return -99; });
  c.comm.all_gather_v(vin, vout, counts);
  compare(c, "all_gather_v", vout, [&](int64_t i) {
    int r = int(std::upper_bound(displ.begin(), displ.end(), i) - displ.begin()) - 1;
    while (counts[size_t(r)] == 0) --r;  // empty blocks share their displacement
    return value(r, i - displ[size_t(r)], 6);
  });
}

void check_all_to_all(Ctx& c, int64_t k, DType d) {
  Tensor in = make(k * c.n, d, [&](int64_t i) { return value(c.me, i, 7); });
  Tensor out = make(k * c.n, d, [](int64_t) { return -99; });
  auto expected = [&](int salt) {
    return [&, salt](int64_t i) { return value(int(i / k), c.me * k + i % k, salt); };
  };
  c.comm.all_to_all(in, out);
  compare(c, "all_to_all", out, expected(7));
  c.comm.all_to_all(in, in);
  compare(c, "all_to_all in-place", in, expected(7));

  auto cnt = [&](int s, int dst) { return (k + s + 2 * dst) % 4; };
  std::vector<int64_t> sc, rc;
  for (int r = 0; r < c.n; ++r) {
    sc.push_back(cnt(c.me, r));
    rc.push_back(cnt(r, c.me));
  }
  std::vector<int64_t> sd = displacements(sc), rd = displacements(rc);
  int64_t ns = sd.back() + sc.back(), nr = rd.back() + rc.back();
  Tensor vin = make(ns, d, [&](int64_t i) {
    int dst = int(std::upper_bound(sd.begin(), sd.end(), i) - sd.begin()) - 1;
    while (sc[size_t(dst)] == 0) --dst;
    return value(c.me, dst * 100 + (i - sd[size_t(dst)]), 8);
  });
  Tensor vout = make(nr, d, [](int64_t) { return -99; });
  c.comm.all_to_all_v(vin, sc, vout, rc);
  compare(c, "all_to_all_v", vout, [&](int64_t i) {
    int src = int(std::upper_bound(rd.begin(), rd.end(), i) - rd.begin()) - 1;
    while (rc[size_t(src)] == 0) --src;
    return value(src, c.me * 100 + (i - rd[size_t(src)]), 8);
  });
}

void check_broadcast_p2p(Ctx& c, int64_t k, DType d) {
  for (int root = 0; root < c.n; ++root) {
    Tensor t = make(k, d, [&](int64_t i) { return c.me == root ? value(root, i, 9) : -99; });
    c.comm.broadcast(t, root);
    compare(c, "broadcast from root " + std::to_string(root), t,
            [&](int64_t i) { return value(root, i, 9); });
  }
  if (c.n < 2) return;
  // A ring with two tags, received in the opposite order of sending.
  const int next = (c.me + 1) % c.n, prev = (c.me + c.n - 1) % c.n;
  Tensor a = make(k, d, [&](int64_t i) { return value(c.me, i, 10); });
  Tensor b = make(k, d, [&](int64_t i) { return value(c.me, i, 11); });
  WorkPtr wa = c.comm.send_async(a, next, 3), wb = c.comm.send_async(b, next, 7);
  Tensor ra = make(k, d, [](int64_t) { return -99; }), rb = make(k, d, [](int64_t) { return -99; });
  c.comm.recv(rb, prev, 7);
  c.comm.recv(ra, prev, 3);
  wa->wait();
  wb->wait();
  compare(c, "recv tag 3 in a ring", ra, [&](int64_t i) { return value(prev, i, 10); });
  compare(c, "recv tag 7 in a ring", rb, [&](int64_t i) { return value(prev, i, 11); });
  // Blocking pairs (0,1), (2,3), ...: even sends first, odd receives first.
  const int partner = c.me % 2 == 0 ? c.me + 1 : c.me - 1;
  if (partner >= c.n) return;
  Tensor mine = make(k, d, [&](int64_t i) { return value(c.me, i, 12); });
  Tensor theirs = make(k, d, [](int64_t) { return -99; });
  if (c.me % 2 == 0) {
    c.comm.send(mine, partner, 1);
    c.comm.recv(theirs, partner, 1);
  } else {
    c.comm.recv(theirs, partner, 1);
    c.comm.send(mine, partner, 1);
  }
  compare(c, "blocking send/recv pair", theirs, [&](int64_t i) { return value(partner, i, 12); });
}

}  // namespace

void check_collectives(Communicator& comm, CheckLog& log, const std::vector<int64_t>& counts,
                       const std::vector<DType>& dtypes) {
  Ctx c{comm, log, comm.size(), comm.rank()};
  for (DType d : dtypes) {
    for (int64_t k : counts) {
      check_reductions(c, k, d);
      check_gathers(c, k, d);
      check_all_to_all(c, k, d);
      check_broadcast_p2p(c, k, d);
    }
  }
  comm.barrier();
}

void check_async(Communicator& comm, CheckLog& log) {
  Ctx c{comm, log, comm.size(), comm.rank()};
  const int64_t k = 4097;
  Tensor a = make(k, DType::F32, [&](int64_t i) { return value(c.me, i, 20); });
  Tensor b = make(k * c.n, DType::BF16, [&](int64_t i) { return value(c.me, i, 21); });
  Tensor bs = make(k, DType::BF16, [](int64_t) { return -99; });
  Tensor g = make(33, DType::I64, [&](int64_t i) { return value(c.me, i, 22); });
  Tensor gout = make(33 * c.n, DType::I64, [](int64_t) { return -99; });
  WorkPtr wa = comm.all_reduce_async(a);
  WorkPtr wb = comm.reduce_scatter_async(b, bs);
  WorkPtr wg = comm.all_gather_async(g, gout);
  // A blocking call while three asynchronous ones are in flight.
  Tensor now = make(7, DType::I32, [&](int64_t) { return c.me; });
  comm.all_reduce(now, ReduceOp::Max);
  compare(c, "blocking all_reduce during async calls", now, [&](int64_t) { return c.n - 1; });
  // Local work meanwhile (what a backward pass does while gradients are reduced).
  double acc = 0;
  for (int i = 1; i < 200000; ++i) acc += std::sqrt(double(i));
  log.expect(acc > 0, "local work");
  wg->wait();
  wb->wait();
  wa->wait();
  log.expect(wa->test() && wb->test() && wg->test(), "test() after wait()");
  auto sum_of = [&](int salt, int64_t i) {
    double s = 0;
    for (int r = 0; r < c.n; ++r) s += value(r, i, salt);
    return s;
  };
  compare(c, "all_reduce_async", a, [&](int64_t i) { return sum_of(20, i); });
  compare(c, "reduce_scatter_async bf16", bs, [&](int64_t i) { return sum_of(21, c.me * k + i); });
  compare(c, "all_gather_async", gout, [&](int64_t i) { return value(int(i / 33), i % 33, 22); });

  Tensor t = make(13, DType::F16, [&](int64_t i) { return c.me == 0 ? value(0, i, 23) : -99; });
  WorkPtr wt = comm.broadcast_async(t, 0);
  WorkPtr wbar = comm.barrier_async();
  wbar->wait();
  wt->wait();
  compare(c, "broadcast_async", t, [&](int64_t i) { return value(0, i, 23); });
  if (c.n >= 2) {  // receives posted before the matching sends
    const int next = (c.me + 1) % c.n, prev = (c.me + c.n - 1) % c.n;
    Tensor r = make(257, DType::F32, [](int64_t) { return -99; });
    WorkPtr wr = comm.recv_async(r, prev, 11);
    comm.barrier();
    Tensor s = make(257, DType::F32, [&](int64_t i) { return value(c.me, i, 24); });
    WorkPtr ws = comm.send_async(s, next, 11);
    wr->wait();
    ws->wait();
    compare(c, "recv_async posted before send", r, [&](int64_t i) { return value(prev, i, 24); });
  }
}

void check_mesh(const DeviceMesh& mesh, CheckLog& log) {
  const MeshShape& shape = mesh.shape();
  const int me = mesh.rank();
  const size_t k = shape.axes().size();
  for (uint32_t mask = 1; mask < (1u << k); ++mask) {
    std::vector<std::string> names;
    for (size_t i = 0; i < k; ++i)
      if (mask & (1u << i)) names.push_back(shape.axes()[i].name);
    const std::string label = shape.label(names);
    Communicator& comm = mesh.comm(label);
    std::vector<int> members = shape.group(me, names);
    std::ostringstream what;
    what << "mesh " << shape.str() << " axis '" << label << "' on world rank " << me;
    log.expect(comm.size() == int(members.size()) && comm.rank() == shape.group_rank(me, names),
               what.str() + ": size/rank " + std::to_string(comm.size()) + "/" +
                   std::to_string(comm.rank()) + " differ from the mesh");
    log.expect(comm.info().world_ranks == members, what.str() + ": members differ from the mesh");
    Tensor wr = full({int64_t(members.size())}, -1, DType::I64);
    comm.all_gather(full({1}, me, DType::I64), wr);
    std::vector<int64_t> got = wr.to_vector<int64_t>();
    log.expect(std::equal(got.begin(), got.end(), members.begin()),
               what.str() + ": all_gather of world ranks is not the group in order");
    Tensor s = full({3}, me, DType::I32);
    comm.all_reduce(s);
    int64_t want = 0;
    for (int m : members) want += m;
    log.expect(s.to_vector<int32_t>()[2] == want, what.str() + ": sum of world ranks is " +
                                                      std::to_string(s.to_vector<int32_t>()[2]) +
                                                      ", expected " + std::to_string(want));
  }
}

}  // namespace tessel::dist::testing
