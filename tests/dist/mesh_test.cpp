// SPDX-License-Identifier: Apache-2.0
// DeviceMesh: parsing, Megatron-compatible rank order (checked against Megatron's documented
// 16-GPU example), groups, and refusal of a mesh that does not match the world before any work.
#include "tessel/dist/mesh.h"

#include <gtest/gtest.h>

#include "tessel/dist/threads/thread_world.h"

namespace tessel::dist {
namespace {

using Groups = std::vector<std::vector<int>>;

Groups all_groups(const MeshShape& s, const std::vector<std::string>& axes) {
  Groups out;
  for (int r = 0; r < s.num_ranks(); ++r) {
    std::vector<int> g = s.group(r, axes);
    if (g.front() == r) out.push_back(g);
  }
  return out;
}

TEST(MeshShape, ParsesInAnyOrderAndSortsTpFastest) {
  MeshShape s = MeshShape::parse("dp=2, pp=2,tp=2");
  EXPECT_EQ(s.str(), "tp=2,dp=2,pp=2");
  EXPECT_EQ(s.num_ranks(), 8);
  // rank = tp + 2 * dp + 4 * pp
  EXPECT_EQ(s.coords(5), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(s.rank_of({1, 1, 1}), 7);
  EXPECT_EQ(s.label({"pp", "tp"}), "tp+pp");
  EXPECT_EQ(s.axis_size("cp"), 1);
}

TEST(MeshShape, MatchesMegatronExampleOf16Ranks) {
  // Megatron-LM parallel_state: 16 GPUs, TP=2, PP=4, DP=2, order tp-dp-pp.
  MeshShape s = MeshShape::parse("tp=2,pp=4,dp=2");
  EXPECT_EQ(all_groups(s, {"tp"}),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(all_groups(s, {"dp"}),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(all_groups(s, {"pp"}),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(s.group(5, {"tp", "dp"}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(s.group_rank(7, {"tp", "dp"}), 3);
}

TEST(MeshShape, CustomOrderAndAllFiveAxes) {
  MeshShape s = MeshShape::parse("pp=2,tp=3,dp=2", "tp-pp-dp");
  EXPECT_EQ(s.str(), "tp=3,pp=2,dp=2");
  EXPECT_EQ(s.rank_of({2, 1, 1}), 2 + 3 * 1 + 6 * 1);
  MeshShape f = MeshShape::parse("pp=1,dp=2,ep=2,cp=1,tp=2");
  EXPECT_EQ(f.str(), "tp=2,cp=1,ep=2,dp=2,pp=1");
  EXPECT_EQ(f.group(0, {"ep"}), (std::vector<int>{0, 2}));
}

TEST(MeshShape, BadSpecsNameTheProblem) {
  auto message = [](const char* spec) {
    try {
      MeshShape::parse(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("dp=2,xx=2").find("unknown axis 'xx'"), std::string::npos);
  EXPECT_NE(message("dp=0").find("axis 'dp' has size '0'"), std::string::npos);
  EXPECT_NE(message("dp=two").find("axis 'dp' has size 'two'"), std::string::npos);
  EXPECT_NE(message("dp").find("'dp' in \"dp\" is not name=size"), std::string::npos);
  EXPECT_NE(message("dp=2,dp=2").find("axis 'dp' appears twice"), std::string::npos);
  EXPECT_NE(message("").find("empty mesh spec"), std::string::npos);
}

TEST(DeviceMesh, WrongProductIsRefusedBeforeAnyCommunication) {
  ThreadWorld::run(3, [](Communicator& world) {
    CommPtr w(&world, [](Communicator*) {});
    try {
      DeviceMesh mesh(w, "dp=2,tp=2");
      ADD_FAILURE() << "accepted a 4-rank mesh on 3 ranks";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mesh tp=2 x dp=2 = 4 ranks, but the world has 3 ranks"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(world.context().issued_count(), 0u) << "a call was issued before the refusal";
  });
}

TEST(DeviceMesh, CoordinatesAndCommunicatorLookup) {
  ThreadWorld::run(4, [](Communicator& world) {
    CommPtr w(&world, [](Communicator*) {});
    DeviceMesh mesh(w, "dp=2,tp=2");
    EXPECT_EQ(mesh.coord("tp"), world.rank() % 2);
    EXPECT_EQ(mesh.coord("dp"), world.rank() / 2);
    EXPECT_EQ(&mesh.comm("tp+dp"), &world);
    EXPECT_EQ(&mesh.comm({"tp", "dp"}), &mesh.comm("dp,tp"));
    EXPECT_EQ(mesh.comm("dp").label(), "dp");
    EXPECT_EQ(mesh.coords_str(),
              "tp=" + std::to_string(world.rank() % 2) + " dp=" + std::to_string(world.rank() / 2));
    EXPECT_THROW(mesh.comm("pp"), Error);
  });
}

}  // namespace
}  // namespace tessel::dist
