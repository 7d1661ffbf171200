// SPDX-License-Identifier: Apache-2.0
// Launcher detection from environment variables (mpirun, PMI, srun, torchrun), their precedence,
// malformed values, and the flight recorder's bookkeeping.
#include "tessel/dist/launch.h"

#include <gtest/gtest.h>

#include <map>

#include "tessel/dist/record.h"

namespace tessel::dist {
namespace {

LaunchInfo detect(const std::map<std::string, std::string>& vars) {
  return detect_launch([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, NoVariablesIsAWorldOfOne) {
  LaunchInfo i = detect({});
  EXPECT_EQ(i.launcher, Launcher::None);
  EXPECT_EQ(i.size, 1);
  EXPECT_FALSE(i.mpi_capable());
}

TEST(Launch, EachLauncher) {
  LaunchInfo o = detect({{"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(o.launcher, Launcher::OpenMpi);
  EXPECT_EQ(o.describe(), "mpirun rank 3 of 8 (local 1 of 2)");
  LaunchInfo s = detect({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(s.launcher, Launcher::Slurm);
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_TRUE(s.mpi_capable());
  LaunchInfo t = detect({{"RANK", "2"},
                         {"WORLD_SIZE", "4"},
                         {"LOCAL_RANK", "0"},
                         {"MASTER_ADDR", "10.0.0.1"},
                         {"MASTER_PORT", "29500"}});
  EXPECT_EQ(t.launcher, Launcher::Torchrun);
  EXPECT_EQ(t.master_addr, "10.0.0.1");
  EXPECT_EQ(t.master_port, 29500);
  EXPECT_FALSE(t.mpi_capable());
  LaunchInfo p = detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(p.launcher, Launcher::Pmi);
}

TEST(Launch, MpirunWinsOverSlurmAndTorchrun) {
  LaunchInfo i = detect({{"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "2"},
                         {"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "1"},
                         {"RANK", "0"},
                         {"WORLD_SIZE", "1"}});
  EXPECT_EQ(i.launcher, Launcher::OpenMpi);
  EXPECT_EQ(i.rank, 1);
}

TEST(Launch, MalformedValuesNameTheVariable) {
  auto message = [](const std::map<std::string, std::string>& vars) {
    try {
      detect(vars);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not a valid"),
            std::string::npos);
  EXPECT_NE(
      message({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("RANK=4 must lie in 0..WORLD_SIZE-1 = 3"),
      std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "0"}}).find("SLURM_PROCID is set but SLURM_NTASKS is not"),
            std::string::npos);
}

TEST(FlightRecorder, SequencesPerCommunicatorAndAnswers) {
  RankContext ctx(3, 16);
  EXPECT_EQ(ctx.unique_label("tp"), "tp");
  EXPECT_EQ(ctx.unique_label("tp"), "tp#2");
  CommInfo tp{"tp", 0, 2, {3, 4}, "mpi"};
  LabelState& tps = *ctx.label_state("tp");
  LabelState& dps = *ctx.label_state("dp");
  OpCall ar;
  ar.kind = OpKind::AllReduce;
  ar.in = ar.out = ones({7}, DType::BF16);
  OpCall send;
  send.kind = OpKind::Send;
  send.in = ones({2});
  send.peer = 1;
  Record a = ctx.issue(tps, ar), b = ctx.issue(dps, ar), c = ctx.issue(tps, send),
         d = ctx.issue(tps, ar);
  EXPECT_EQ(a.seq, 1u);
  EXPECT_EQ(b.seq, 1u);
  EXPECT_EQ(c.seq, 1u);  // point-to-point calls count separately
  EXPECT_EQ(d.seq, 2u);
  ctx.set_state(a, OpState::Done);
  PeerQuery q;
  q.label = a.label;
  q.seq = 1;
  PeerReply r = ctx.answer(q);
  EXPECT_TRUE(r.answered && r.known_label && r.has_at);
  EXPECT_EQ(r.last_seq, 2u);
  EXPECT_EQ(r.at.state, OpState::Done);
  EXPECT_EQ(describe(r.at), "all_reduce(sum) #1 bf16 [7]");
  EXPECT_EQ(describe(c), "send #1 f32 [2] to 1 tag 0");
  uint64_t w = ctx.begin_wait(d, std::make_shared<CommInfo>(tp), 5);
  EXPECT_NE(ctx.now_doing().find("in all_reduce(sum) #2 bf16 [7] on 'tp'"), std::string::npos);
  ctx.end_wait(w);
  EXPECT_EQ(ctx.now_doing(), "not waiting in any communication call");
  for (int i = 0; i < 40; ++i) ctx.issue(dps, ar);  // the ring keeps the newest 16
  EXPECT_EQ(ctx.recent(100).size(), 16u);
  EXPECT_EQ(ctx.issued_count(), 44u);
  EXPECT_EQ(ctx.recent(1)[0].serial, 44u);
  EXPECT_EQ(describe(ctx.recent(16)[0]), "all_reduce(sum) #26 bf16 [7]");  // dp: #1, then #2..#41
}

}  // namespace
}  // namespace tessel::dist
