// SPDX-License-Identifier: Apache-2.0
// Hang diagnosis: a rank that skips a collective, one stuck in local work, a receive nobody sends
// to, a hang on a mesh axis; and the classification of peers' replies (different op, no answer).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tessel/dist/diagnosis.h"
#include "tessel/dist/mesh.h"
#include "tessel/dist/threads/thread_world.h"

namespace tessel::dist {
namespace {

// Short deadlines for the duration of a test.
class ShortDeadlines : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = comm_timeouts();
    set_comm_timeouts({1, 1});
  }
  void TearDown() override { set_comm_timeouts(saved_); }
  CommTimeouts saved_;
};

std::string failure_of(int n, const std::function<void(Communicator&)>& fn) {
  try {
    ThreadWorld::run(n, fn);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the world did not fail";
  return "";
}

void expect_has(const std::string& text, const std::string& words) {
  EXPECT_NE(text.find(words), std::string::npos) << "missing: " << words << "\nin: " << text;
}

TEST_F(ShortDeadlines, RankThatSkipsACollectiveIsNamed) {
  std::string m = failure_of(3, [](Communicator& c) {
    Tensor t = ones({7});
    c.all_reduce(t);
    if (c.rank() != 1) c.all_reduce(t);  // rank 1 skips #2 and returns
  });
  expect_has(m, "all_reduce(sum) #2 f32 [7] on axis 'world' did not complete within 1 s");
  expect_has(m,
             "Not reached by rank 1 [world 1]: last issued on 'world': all_reduce(sum) #1 f32 [7]");
  expect_has(m, "now finished");
  expect_has(m, "Reached by ranks 0, 2");
}

TEST_F(ShortDeadlines, RankStuckInLocalWorkIsNamed) {
  std::string m = failure_of(2, [](Communicator& c) {
    if (c.rank() == 0) {
      c.barrier();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    }
  });
  expect_has(m, "barrier #1 on axis 'world' did not complete");
  expect_has(m,
             "Not reached by rank 1 [world 1]: last issued on 'world': nothing; now not waiting "
             "in any communication call");
}

TEST_F(ShortDeadlines, ReceiveWithoutSenderNamesThePeer) {
  std::string m = failure_of(2, [](Communicator& c) {
    Tensor t = zeros({3});
    if (c.rank() == 0) c.recv(t, 1, 4);
  });
  expect_has(m, "recv #1 f32 [3] from 1 tag 4 on axis 'world' did not complete");
  expect_has(m, "Peer rank 1 [world 1]");
}

TEST_F(ShortDeadlines, HangOnAMeshAxisNamesTheAxisAndWorldRanks) {
  set_comm_timeouts({60, 60});  // building the mesh must not be what times out on a loaded machine
  std::string m = failure_of(8, [](Communicator& world) {
    CommPtr w(&world, [](Communicator*) {});
    DeviceMesh mesh(w, "dp=2,pp=2,tp=2");
    world.barrier();
    if (world.rank() == 0) set_comm_timeouts({1, 1});
    world.barrier();
    Tensor t = ones({13}, DType::BF16);
    // World rank 5 (tp=1 dp=0 pp=1) never joins its dp all-reduce; its partner is world rank 7.
    if (world.rank() != 5) mesh.comm("dp").all_reduce(t);
  });
  expect_has(m, "all_reduce(sum) #1 bf16 [13] on axis 'dp' did not complete within 1 s");
  expect_has(m, "Not reached by rank 0 [world 5]");
}

TEST(Diagnosis, ClassifiesDifferentOpsAndSilentRanks) {
  CommInfo comm{"tp", 2, 4, {8, 9, 10, 11}, "mpi"};
  Record stuck;
  stuck.seq = 5;
  stuck.kind = OpKind::AllReduce;
  stuck.has_tensor = true;
  stuck.shape = Shape{33};
  stuck.label = {'t', 'p'};
  std::vector<PeerReply> peers(4);
  peers[0].answered = true;  // reached it and waits
  peers[0].has_at = true;
  peers[0].at = stuck;
  peers[0].at.state = OpState::Running;
  peers[0].last_seq = 5;
  peers[1].answered = true;  // issued a broadcast as #5
  peers[1].has_at = true;
  peers[1].at = stuck;
  peers[1].at.kind = OpKind::Broadcast;
  peers[1].at.peer = 0;
  peers[1].last_seq = 5;
  // peers[3]: no answer
  HangReport r = diagnose_hang(stuck, comm, 2.5, 2, peers);
  EXPECT_EQ(r.reached, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.different_op, (std::vector<int>{1}));
  EXPECT_EQ(r.unresponsive, (std::vector<int>{3}));
  EXPECT_EQ(r.reporter, 0);  // the lowest rank waiting in it
  expect_has(r.message,
             "At a different op: rank 1 [world 9] issued #5 as broadcast #5 f32 [33] root 0");
  expect_has(r.message, "No answer from rank 3 [world 11]");
  expect_has(r.message, "rank 2 [world 10] of 4 waited 2.5 s");
}

TEST(Diagnosis, EveryRankPresentMeansTheTransportIsStuck) {
  CommInfo comm{"world", 0, 2, {0, 1}, "mpi"};
  Record stuck;
  stuck.seq = 1;
  stuck.kind = OpKind::Barrier;
  std::vector<PeerReply> peers(2);
  peers[1].answered = true;
  peers[1].has_at = true;
  peers[1].at = stuck;
  HangReport r = diagnose_hang(stuck, comm, 1, 1, peers);
  expect_has(r.message, "Every rank reached it");
}

TEST(Diagnosis, TimeoutsFromTheEnvironment) {
  setenv("TESSEL_COMM_TIMEOUT", "2.5", 1);
  setenv("TESSEL_COMM_FIRST_TIMEOUT", "9", 1);
  CommTimeouts t = CommTimeouts::from_env();
  EXPECT_EQ(t.steady_s, 2.5);
  EXPECT_EQ(t.first_s, 9);
  Record first, later;
  first.seq = 1;
  later.seq = 2;
  EXPECT_EQ(t.for_record(first), 9);
  EXPECT_EQ(t.for_record(later), 2.5);
  setenv("TESSEL_COMM_TIMEOUT", "soon", 1);
  try {
    CommTimeouts::from_env();
    ADD_FAILURE() << "accepted a malformed timeout";
  } catch (const Error& e) {
    expect_has(e.what(), "TESSEL_COMM_TIMEOUT='soon' is not a positive number of seconds");
  }
  unsetenv("TESSEL_COMM_TIMEOUT");
  unsetenv("TESSEL_COMM_FIRST_TIMEOUT");
}

}  // namespace
}  // namespace tessel::dist
