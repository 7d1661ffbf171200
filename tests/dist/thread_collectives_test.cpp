// SPDX-License-Identifier: Apache-2.0
// Every collective on the in-process backend (threads as ranks) for world sizes 1, 2, 3, 4 and 8,
// against locally computed values; asynchronous overlap; the sub-communicators of a 2x2x2 mesh.
#include <gtest/gtest.h>

#include <mutex>

#include "dist/common/collective_checks.h"
#include "tessel/dist/reduce.h"
#include "tessel/dist/threads/thread_world.h"

namespace tessel::dist {
namespace {

using testing::CheckLog;

// Runs `body` on n thread-ranks and expects no failed check on any of them.
void expect_clean(int n, const std::function<void(Communicator&, CheckLog&)>& body) {
  std::mutex mutex;
  int failures = 0, checks = 0;
  std::string report;
  ThreadWorld::run(n, [&](Communicator& world) {
    CheckLog log;
    body(world, log);
    std::lock_guard lock(mutex);
    failures += log.failures();
    checks += log.checks();
    report += log.report();
  });
  EXPECT_EQ(failures, 0) << report;
  EXPECT_GT(checks, 0);
}

class ThreadCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ThreadCollectives, EveryCollectiveEveryDtype) {
  expect_clean(GetParam(),
               [](Communicator& c, CheckLog& log) { testing::check_collectives(c, log); });
}

TEST_P(ThreadCollectives, AsyncOverlap) {
  expect_clean(GetParam(), [](Communicator& c, CheckLog& log) { testing::check_async(c, log); });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ThreadCollectives, ::testing::Values(1, 2, 3, 4, 8));

TEST(ThreadMesh, SubCommunicatorsOf2x2x2) {
  expect_clean(8, [](Communicator& world, CheckLog& log) {
    // A shared_ptr that does not own: the mesh keeps the world by pointer for its lifetime here.
    CommPtr w(&world, [](Communicator*) {});
    DeviceMesh mesh(w, "dp=2,pp=2,tp=2");
    testing::check_mesh(mesh, log);
    testing::check_collectives(mesh.comm("tp"), log, {1, 33},
                               {DType::F32, DType::BF16, DType::I64});
    testing::check_collectives(mesh.comm("dp+pp"), log, {7}, {DType::F16, DType::I32});
    testing::check_async(mesh.comm("pp"), log);
  });
}

TEST(ThreadCollectives, Bf16SumAccumulatesInF32) {
  // 1 + 7 * 2^-9: rounding after every addition would stay at 1.0 (each 2^-9 is a quarter of a
  // bf16 step at 1); one f32 accumulator gives 1.0137 -> 1.015625.
  ThreadWorld::run(8, [](Communicator& c) {
    Tensor t = full({5}, c.rank() == 0 ? 1.0 : 1.0 / 512, DType::BF16);
    c.all_reduce(t);
    for (double v : t.to_vector<float>()) EXPECT_EQ(v, 1.015625) << "rank " << c.rank();
  });
}

TEST(ThreadCollectives, MismatchedCallsNameEveryRank) {
  try {
    ThreadWorld::run(3, [](Communicator& c) {
      Tensor t = ones({7});
      if (c.rank() == 1) {
        c.barrier();
      } else {
        c.all_reduce(t);
      }
    });
    FAIL() << "expected a mismatch error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("collective mismatch on axis 'world'"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 [world 1]: barrier #1"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 [world 0]: all_reduce(sum) #1 f32 [7]"), std::string::npos) << m;
  }
}

TEST(ThreadCollectives, ExceptionOnOneRankEndsTheOthers) {
  try {
    ThreadWorld::run(4, [](Communicator& c) {
      if (c.rank() == 2) throw Error("simulated failure");
      c.barrier();  // would wait forever for rank 2
    });
    FAIL() << "expected the rank's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in-process rank 2: simulated failure"), std::string::npos)
        << e.what();
  }
}

TEST(ThreadCollectives, BadArgumentsNameTheOpAndValues) {
  ThreadWorld::run(2, [](Communicator& c) {
    auto expect_error = [](const std::function<void()>& f, const std::string& words) {
      try {
        f();
        ADD_FAILURE() << "no error; expected: " << words;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      }
    };
    expect_error([&] { c.all_reduce(ones({7}), ones({8})); },
                 "all_reduce on 'world': input has 7 elements, output 8");
    expect_error([&] { c.all_reduce(ones({7}), ones({7}, DType::BF16)); },
                 "input is f32 but output is bf16");
    expect_error([&] { c.all_reduce(ones({3}, DType::I32), ReduceOp::Avg); },
                 "avg needs a floating dtype, got i32");
    expect_error([&] { c.reduce_scatter(ones({7}), ones({3})); },
                 "input has 7 elements, expected 2 ranks x 3 output elements = 6");
    expect_error([&] { c.all_gather(ones({3}), ones({7})); },
                 "output has 7 elements, expected 2 ranks x 3");
    const std::vector<int64_t> bad = {1, 2, 3};
    expect_error([&] { c.all_gather_v(ones({1}), ones({6}), bad); }, "3 counts for 2 ranks");
    expect_error([&] { c.all_to_all(ones({7}), ones({7})); }, "divisible by 2 ranks");
    expect_error([&] { c.broadcast(ones({1}), 2); }, "broadcast on 'world': root 2 outside 0..1");
    expect_error([&] { c.send(ones({1}), c.rank(), 0); }, "must be another rank");
    expect_error([&] { c.send(ones({1}), 1 - c.rank(), 40000); }, "tag 40000 outside 0..32767");
    Tensor t = zeros({8});
    expect_error([&] { c.all_reduce(t.narrow(0, 0, 6), t.narrow(0, 2, 6)); },
                 "input and output overlap");
  });
}

TEST(Reduce, HalfTypesCombineInF32) {
  std::vector<BF16> a = {float_to_bf16(1.0f), float_to_bf16(3.0f)},
                    b = {float_to_bf16(1.0f / 256), float_to_bf16(-5.0f)};
  combine_into(a.data(), b.data(), 2, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(bf16_to_float(b[0]), 1.0f);  // 1 + 2^-8 rounds to even
  EXPECT_EQ(bf16_to_float(b[1]), -2.0f);
  std::vector<int32_t> x = {INT32_MAX, 4}, y = {1, -9};
  combine_into(x.data(), y.data(), 2, DType::I32, ReduceOp::Sum);
  EXPECT_EQ(y[0], INT32_MIN);  // wraps, as MPI and NCCL do in practice
  combine_into(x.data(), y.data(), 2, DType::I32, ReduceOp::Max);
  EXPECT_EQ(y[1], 4);
  EXPECT_THROW(divide_by(y.data(), 2, DType::I32, 2), Error);
}

}  // namespace
}  // namespace tessel::dist
