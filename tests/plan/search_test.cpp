// SPDX-License-Identifier: Apache-2.0
// The plan search (plan/search.h) on the tiny GPT-2 (4 layers, 6 heads) with odd batch and
// sequence sizes: every predicted layout is the memory and step models' own figure, pruned
// exactly where it passes the device's memory and ranked by step time; the factorisations the
// models do not cover are listed with the reason (and, under pp, the inter-operator DP's stage
// split); pipeline layouts carry the largest rank's memory and the pipeline's step time; a
// request nothing fits names the least memory per rank any layout needs; the traced
// layers' costs add up to the trace's.
#include "tessel/plan/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <map>
#include <set>

#include "common/error_text.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/tensor/default_device.h"

namespace tessel::plan {
namespace {

using TpTransform = std::function<void(models::CausalLM&)>;

models::ConfigPtr tiny_gpt2() {
  return models::family_named("gpt2").preset("tiny");
}

Cluster node(int64_t memory_bytes, int devices) {
  return Cluster::parse(
      "name = \"test\"\ndevices_per_node = " + std::to_string(devices) +
          "\nnodes = 1\n[device]\nkind = \"t\"\nmemory_bytes = " + std::to_string(memory_bytes) +
          "\nmemory_bandwidth = 2e10\n[device.peak_flops]\nf32 = 3e10\n"
          "[links.intra_node]\nbandwidth = 5e9\nlatency = 3e-6\n",
      "test.toml");
}

SearchRequest request(int devices) {
  SearchRequest r;
  r.devices = devices;
  r.global_batch = 9;
  r.seq = 13;
  // The hand-made pipeline ranks below cut only the balanced stages; the DP's split has a test
  // of its own (TheInterOperatorDpsSplitIsALayoutOfItsOwn).
  r.dp_stages = false;
  // Counts of recomputed blocks add rows where memory is short; a test of their own
  // (ARankRecomputesOnlyTheBlocksItsMemoryNeeds) turns them on.
  r.block_recompute = false;
  return r;
}

TEST(PlanSearch, PredictsPrunesAndRanksDataParallelLayouts) {
  const auto config = tiny_gpt2();
  // First with room for everything, to find a memory that splits the layouts.
  const SearchResult all = search_plans(*config, node(int64_t(1) << 40, 3), request(3));
  // dp 3 over 9 rows: micro-batches 1 and 3, ZeRO 0-3, three recompute modes.
  ASSERT_EQ(all.ranked.size(), 24u);
  std::vector<double> peaks;
  for (const PlanResult& r : all.ranked) peaks.push_back(r.memory.peak());
  std::sort(peaks.begin(), peaks.end());
  const int64_t memory = int64_t(peaks[peaks.size() / 2]);
  const SearchResult res = search_plans(*config, node(memory, 3), request(3));
  size_t oom = 0;
  for (const PlanResult& r : res.pruned) oom += r.status == PlanStatus::OutOfMemory;
  EXPECT_EQ(res.ranked.size() + oom, 24u);
  EXPECT_GT(oom, 0u);
  EXPECT_GT(res.ranked.size(), 0u);
  const Cluster cluster = node(memory, 3);
  for (const PlanResult& r : res.ranked) {
    EXPECT_LE(r.memory.peak(), double(memory)) << r.layout.str();
    EXPECT_EQ(r.layout.dp, 3);
    EXPECT_EQ(r.layout.micro_batch * r.layout.grad_accum, 3);
    // The models' own figures for the layout.
    const MemoryLayout ml = memory_layout(r.layout, request(3));
    const Graph g = trace_for_layout(*config, ml);
    const MemoryEstimate m = estimate_memory(*config, ml, g);
    EXPECT_DOUBLE_EQ(r.memory.peak(), m.peak()) << r.layout.str();
    EXPECT_DOUBLE_EQ(r.step_seconds, estimate_step_time(cluster, g, m, ml).total());
    EXPECT_DOUBLE_EQ(r.tokens_per_second, 9.0 * 13.0 / r.step_seconds);
  }
  for (size_t i = 1; i < res.ranked.size(); ++i)
    EXPECT_LE(res.ranked[i - 1].step_seconds, res.ranked[i].step_seconds);
  for (const PlanResult& r : res.pruned)
    if (r.status == PlanStatus::OutOfMemory) {
      EXPECT_GT(r.memory.peak(), double(memory)) << r.layout.str();
      EXPECT_NE(r.reason.find("per rank"), std::string::npos) << r.reason;
    }
  // One prediction of the best layout equals its ranked entry.
  const PlanResult& best = best_plan(res);
  const PlanResult one = predict_layout(*config, node(memory, 3), request(3), best.layout);
  EXPECT_EQ(one.status, PlanStatus::Ranked);
  EXPECT_DOUBLE_EQ(one.step_seconds, best.step_seconds);
  EXPECT_DOUBLE_EQ(one.memory.peak(), best.memory.peak());
}

TEST(PlanSearch, UnmodelledAndInvalidFactorisationsSayWhy) {
  const auto config = tiny_gpt2();
  const SearchResult res = search_plans(*config, node(int64_t(1) << 40, 3), request(3));
  // 3 devices, a request without the runtime's tensor-parallel transform and pipeline stages:
  // dp 3 is predicted; tp 3 and pp 3 (each schedule: 1f1b, gpipe and interleaved with 2 chunks,
  // the only count whose 3 x V stages the 6 pipeline layers hold) are listed once each with the
  // reason.
  std::vector<const PlanResult*> other;
  for (const PlanResult& r : res.pruned)
    if (r.status != PlanStatus::OutOfMemory) other.push_back(&r);
  ASSERT_EQ(other.size(), 4u);
  int interleaved = 0;
  for (const PlanResult* r : other) interleaved += r->layout.schedule == "interleaved:2";
  EXPECT_EQ(interleaved, 1);
  for (const PlanResult* r : other) {
    EXPECT_EQ(r->status, PlanStatus::NotModelled);
    if (r->layout.pp == 3) {
      EXPECT_NE(r->reason.find("pp > 1"), std::string::npos) << r->reason;
      // The inter-operator DP split the 6 pipeline layers into 3 non-empty stages (interleaved:
      // 3 x 2 chunks).
      ASSERT_TRUE(r->stages.feasible);
      EXPECT_EQ(r->stages.first_layer.size(), r->layout.schedule == "interleaved:2" ? 7u : 4u);
      EXPECT_EQ(r->stages.first_layer.back(), 6);
      EXPECT_GE(r->layout.grad_accum, 3);  // micro-batches >= stages where the rows allow
    } else {
      EXPECT_EQ(r->layout.tp, 3);
      EXPECT_NE(r->reason.find("tp > 1"), std::string::npos) << r->reason;
    }
  }
  // 5 devices: 9 rows do not divide over dp 5, 6 heads not over tp 5, and 6 pipeline layers do
  // not hold two chunks on each of pp 5 ranks.
  const SearchResult five = search_plans(*config, node(int64_t(1) << 40, 5), request(5));
  EXPECT_TRUE(five.ranked.empty());
  int invalid = 0;
  for (const PlanResult& r : five.pruned)
    if (r.status == PlanStatus::Invalid) {
      ++invalid;
      EXPECT_TRUE(r.reason.find("dp 5") != std::string::npos ||
                  r.reason.find("tp 5") != std::string::npos ||
                  r.reason.find("interleaved at pp 5 needs at least 10 pipeline layers") !=
                      std::string::npos)
          << r.reason;
    }
  EXPECT_EQ(invalid, 3);
  const std::string e = test::error_of([&] { best_plan(five); });
  EXPECT_NE(e.find("no layout"), std::string::npos) << e;
  EXPECT_NE(e.find("dp 5"), std::string::npos) << e;
}

// Two pipeline ranks of the 4-block tiny GPT-2, stages {embedding, h.0, h.1} and {h.2, h.3,
// head}, m micro-batches, in the orders parallel/pipeline's generators make (the runtime's
// generators sit above plan/; `tessel plan search` uses them, tests/plan/search_check.py checks
// it against `tessel plan memory`).
PipelineRank two_rank(const std::string& schedule, int m, int rank) {
  using K = PipelineActionKind;
  const bool gpipe = schedule == "gpipe";
  PipelineRank pr;
  pr.schedule = schedule;
  pr.ranks = 2;
  pr.rank = rank;
  pr.microbatches = m;
  pr.stage_layers = {{0, 3}, {3, 6}};
  auto& a = pr.actions;
  auto forward = [&](int i) {
    if (rank == 1) a.push_back({K::RecvActivation, i, 0});
    a.push_back({K::Forward, i, rank});
    if (rank == 0) a.push_back({K::SendActivation, i, 0});
  };
  auto backward = [&](int i) {
    if (rank == 0) a.push_back({K::RecvGradient, i, 1});
    a.push_back({K::Backward, i, rank});
    if (rank == 1) a.push_back({K::SendGradient, i, 1});
  };
  if (gpipe) {
    for (int i = 0; i < m; ++i) forward(i);
    for (int i = 0; i < m; ++i) backward(i);
  } else if (rank == 0) {
    forward(0);  // one warm-up forward, then one forward one backward
    for (int i = 1; i < m; ++i) {
      forward(i);
      backward(i - 1);
    }
    backward(m - 1);
  } else {
    for (int i = 0; i < m; ++i) {
      forward(i);
      backward(i);
    }
  }
  return pr;
}

TEST(PlanSearch, PipelineLayoutsCarryTheModelsOwnFigures) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.schedules = {"1f1b", "gpipe"};  // two_rank makes these two
  req.pipeline_rank = [](const std::string& schedule, int pp, int m, int rank, const std::string&,
                         const TpTransform&) {
    EXPECT_EQ(pp, 2);
    return two_rank(schedule, m, rank);
  };
  const Cluster cluster = node(int64_t(1) << 40, 2);
  const SearchResult res = search_plans(*config, cluster, req);
  // 9 rows: dp 2 is invalid and tp 2 has no transform in the request; pp 2 is ranked for both
  // schedules, micro-batches 1, 3 and 9, three recompute modes.
  ASSERT_EQ(res.ranked.size(), 18u);
  for (const PlanResult& r : res.ranked) {
    EXPECT_EQ(r.layout.pp, 2);
    EXPECT_EQ(r.layout.micro_batch * r.layout.grad_accum, 9);
    std::vector<Graph> graphs;
    std::vector<MemoryEstimate> ranks;
    double peak = 0;
    for (int p = 0; p < 2; ++p) {
      const MemoryLayout ml = memory_layout(r.layout, req, p);
      EXPECT_EQ(ml.pipeline.rank, p);
      EXPECT_EQ(ml.pipeline.microbatches, r.layout.grad_accum);
      graphs.push_back(trace_for_layout(*config, ml));
      ranks.push_back(estimate_memory(*config, ml, graphs.back()));
      peak = std::max(peak, ranks.back().peak());
    }
    // The largest rank's memory and the pipeline's step time.
    EXPECT_DOUBLE_EQ(r.memory.peak(), peak) << r.layout.str();
    const StepTime t =
        estimate_pipeline_step_time(cluster, graphs, ranks, memory_layout(r.layout, req, 0));
    EXPECT_DOUBLE_EQ(r.step_seconds, t.total()) << r.layout.str();
    EXPECT_GT(r.time.bubble_seconds, 0) << r.layout.str();
    const PlanResult one = predict_layout(*config, cluster, req, r.layout);
    EXPECT_DOUBLE_EQ(one.step_seconds, r.step_seconds);
    EXPECT_DOUBLE_EQ(one.memory.peak(), r.memory.peak());
  }
  for (const PlanResult& r : res.pruned) {
    EXPECT_NE(r.status, PlanStatus::OutOfMemory) << r.layout.str();
    if (r.layout.tp == 2) {
      EXPECT_NE(r.reason.find("tensor-parallel"), std::string::npos);
    }
  }
  // The models cover interleaved schedules and ZeRO-3 under pp; a request without the runtime's
  // data parallelism cannot trace ZeRO-3 under pp (its units gather inside the stages), and one
  // without the runtime's pieces no tp/pp layout. An unknown schedule is refused by name.
  Layout l;
  l.pp = 2;
  l.schedule = "interleaved:2";
  EXPECT_EQ(model_coverage(l), "");
  l.schedule = "zigzag";
  EXPECT_NE(model_coverage(l).find("'zigzag'"), std::string::npos);
  l.schedule = "1f1b";
  EXPECT_EQ(model_coverage(l), "");
  l.dp = 2;
  l.zero_stage = 3;
  EXPECT_EQ(model_coverage(l), "");
  SearchRequest four = request(4);
  four.global_batch = 8;
  four.pipeline_rank = req.pipeline_rank;
  const PlanResult z3 = predict_layout(*config, node(int64_t(1) << 40, 4), four, l);
  EXPECT_EQ(z3.status, PlanStatus::NotModelled);
  EXPECT_NE(z3.reason.find("data-parallel runtime"), std::string::npos) << z3.reason;
  Layout tp;
  tp.tp = 3;
  EXPECT_EQ(model_coverage(tp), "");
  EXPECT_EQ(predict_layout(*config, node(int64_t(1) << 40, 3), request(3), tp).status,
            PlanStatus::NotModelled);
}

// The traces' cache drops the least recently used beyond trace_cache_ops: a search that can keep
// only the trace it just made (so every pipeline rank and every ZeRO stage traces again) ranks the
// same layouts with the same figures as one that keeps them all, and traces more often.
TEST(PlanSearch, ATraceCacheOfOneGraphRanksTheSame) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.global_batch = 8;  // dp 2 too, whose ZeRO stages 0, 1 and 3 share one trace
  req.schedules = {"1f1b", "gpipe"};
  req.pipeline_rank = [](const std::string& schedule, int, int m, int rank, const std::string&,
                         const TpTransform&) { return two_rank(schedule, m, rank); };
  const Cluster cluster = node(int64_t(1) << 40, 2);
  const SearchResult all = search_plans(*config, cluster, req);
  req.trace_cache_ops = 1;
  const SearchResult one = search_plans(*config, cluster, req);
  ASSERT_EQ(one.ranked.size(), all.ranked.size());
  ASSERT_FALSE(all.ranked.empty());
  for (size_t i = 0; i < all.ranked.size(); ++i) {
    EXPECT_EQ(one.ranked[i].layout.str(), all.ranked[i].layout.str());
    EXPECT_DOUBLE_EQ(one.ranked[i].step_seconds, all.ranked[i].step_seconds);
    EXPECT_DOUBLE_EQ(one.ranked[i].memory.peak(), all.ranked[i].memory.peak());
  }
  EXPECT_EQ(one.pruned.size(), all.pruned.size());
  EXPECT_GT(one.traces, all.traces);
}

// Pipeline layouts composed from their stages' traces (compose_above 0) rank the same layouts
// with the figures of their whole-schedule traces (compose_above -1), with a handful of stage
// traces in place of one trace per rank and layout; the results say which way each was made.
TEST(PlanSearch, ComposedPipelinesRankTheSame) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.schedules = {"1f1b", "gpipe"};
  req.pipeline_rank = [](const std::string& schedule, int, int m, int rank, const std::string&,
                         const TpTransform&) { return two_rank(schedule, m, rank); };
  const Cluster cluster = node(int64_t(1) << 40, 2);
  req.compose_above = -1;
  const SearchResult whole = search_plans(*config, cluster, req);
  req.compose_above = 0;
  const SearchResult composed = search_plans(*config, cluster, req);
  ASSERT_EQ(whole.ranked.size(), composed.ranked.size());
  std::map<std::string, const PlanResult*> by_layout;
  for (const PlanResult& r : whole.ranked) by_layout[r.layout.str()] = &r;
  int pipelines = 0;
  for (const PlanResult& r : composed.ranked) {
    ASSERT_TRUE(by_layout.contains(r.layout.str())) << r.layout.str();
    const PlanResult& w = *by_layout[r.layout.str()];
    EXPECT_EQ(r.composed, r.layout.pp > 1) << r.layout.str();
    EXPECT_FALSE(w.composed);
    EXPECT_EQ(r.memory.peak(), w.memory.peak()) << r.layout.str();
    EXPECT_NEAR(r.step_seconds, w.step_seconds, 1e-12 * w.step_seconds) << r.layout.str();
    EXPECT_NEAR(r.mfu, w.mfu, 1e-12 * w.mfu) << r.layout.str();
    pipelines += r.layout.pp > 1;
  }
  EXPECT_EQ(pipelines, 18);
  EXPECT_EQ(whole.stage_traces, 0);
  // Two stages (the embedding's and the head's) for each micro-batch size and recompute mode.
  EXPECT_GT(composed.stage_traces, 0);
  EXPECT_LT(composed.traces, whole.traces);
}

// The search asks for interleaved:V for every V whose 2 x V stages the 6 pipeline layers hold (2
// and 3) and only micro-batch counts that are multiples of pp (8 rows: 8, 4 and 2, never 1).
// A GPT-2 of 7 blocks and a small vocabulary, and a request over two pipeline ranks (1F1B) with
// the inter-operator DP's splits, whose "runtime" cuts {embedding, h.0} | {h.1..h.6, head} or
// where a split puts the first stage's end; `asked` (if given) receives every split asked for.
models::ConfigPtr seven_block_gpt2() {
  models::GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 13;
  c.n_embd = 36;
  c.n_layer = 7;
  c.n_head = 4;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return std::make_shared<models::GPT2Config>(c);
}

SearchRequest dp_split_request(std::set<std::string>* asked = nullptr) {
  SearchRequest req = request(2);
  req.dp_stages = true;
  req.schedules = {"1f1b"};
  req.pipeline_rank = [asked](const std::string& schedule, int, int m, int rank,
                              const std::string& split, const TpTransform&) {
    if (asked) asked->insert(split);
    PipelineRank pr = two_rank(schedule, m, rank);
    const int first = split.empty() ? 2 : 1 + std::stoi(split.substr(0, split.find(',')));
    pr.stage_layers = {{0, first}, {first, 9}};
    return pr;
  };
  return req;
}

// Alpa's inter-operator DP (plan/stage_split.h) over one micro-batch's traced layers: where its
// stages differ from the runtime's cut and each keeps a block, the search predicts the layout
// again with that split (parallel.pipeline_split in its train flags), beside the balanced one;
// with balanced_stages off, only the split. A GPT-2 of 7 blocks and a small vocabulary, whose
// "runtime" here cuts {embedding, h.0} | {h.1..h.6, head}, which the DP, balancing compute, moves.
TEST(PlanSearch, TheInterOperatorDpsSplitIsALayoutOfItsOwn) {
  const models::ConfigPtr config = seven_block_gpt2();
  std::set<std::string> asked;
  SearchRequest req = dp_split_request(&asked);
  req.recompute = {nn::Recompute::None};
  const Cluster cluster = node(int64_t(1) << 40, 2);
  const SearchResult res = search_plans(*config, cluster, req);
  // The DP's split, worked out here from the same trace.
  std::shared_ptr<models::CausalLM> meta;
  {
    DefaultDeviceScope scope(Device::meta());
    meta = config->build_empty();
  }
  std::map<int64_t, std::string> expected;  // by micro-batch
  for (int64_t mb : {1, 3, 9}) {
    Layout one;
    one.micro_batch = mb;
    const Graph g = trace_for_layout(*config, memory_layout(one, req));
    StageSplitRequest sr;
    sr.stages = 2;
    sr.micro_batches = 9 / mb;
    const StageSplit dp = split_stages(traced_layer_costs(cluster, g, *meta, 16), sr);
    ASSERT_TRUE(dp.feasible);
    ASSERT_GT(dp.first_layer[1], 2) << "the test needs the DP to move the cut";
    ASSERT_LT(dp.first_layer[1], 8) << "and to leave the head a block";
    expected[mb] =
        std::to_string(dp.first_layer[1] - 1) + "," + std::to_string(8 - dp.first_layer[1]);
  }
  int balanced = 0, split = 0;
  for (const auto* list : {&res.ranked, &res.pruned})
    for (const PlanResult& r : *list) {
      if (r.layout.pp != 2 || r.status == PlanStatus::NotModelled) continue;
      if (r.layout.pipeline_split.empty()) {
        ++balanced;
        continue;
      }
      ++split;
      EXPECT_EQ(r.layout.pipeline_split, expected.at(r.layout.micro_batch)) << r.layout.str();
      const std::vector<std::string> args = r.layout.train_args();
      EXPECT_NE(
          std::find(args.begin(), args.end(), "parallel.pipeline_split=" + r.layout.pipeline_split),
          args.end());
      EXPECT_NE(r.layout.str().find(" split=" + r.layout.pipeline_split), std::string::npos);
      // The same layout as predict_layout makes it: the split's own stages were traced.
      const PlanResult again = predict_layout(*config, cluster, req, r.layout);
      EXPECT_DOUBLE_EQ(again.step_seconds, r.step_seconds);
      EXPECT_DOUBLE_EQ(again.memory.peak(), r.memory.peak());
    }
  EXPECT_GT(split, 0);
  EXPECT_EQ(split, balanced);
  for (const auto& [mb, spec] : expected) EXPECT_TRUE(asked.count(spec)) << spec;
  req.balanced_stages = false;
  const SearchResult only = search_plans(*config, cluster, req);
  for (const auto* list : {&only.ranked, &only.pruned})
    for (const PlanResult& r : *list)
      if (r.layout.pp == 2 && r.status != PlanStatus::NotModelled) {
        EXPECT_FALSE(r.layout.pipeline_split.empty()) << r.layout.str();
      }
}

// The DP's cut gets recomputation per rank and on a count of blocks too: with the memory just
// below a DP-cut layout's peak without recomputation (full recomputation fitting on that cut),
// the search ranks that cut with each rank's least mode, or on its fewest blocks, which fit and
// which predict_layout predicts alike; with room for everything, no such row on any cut.
TEST(PlanSearch, TheDpsCutRecomputesPerRankAndPerBlockToo) {
  const models::ConfigPtr config = seven_block_gpt2();
  SearchRequest req = dp_split_request();
  req.block_recompute = req.rank_recompute = true;
  const SearchResult roomy = search_plans(*config, node(int64_t(1) << 40, 2), req);
  const PlanResult* plain = nullptr;
  for (const PlanResult& r : roomy.ranked) {
    EXPECT_TRUE(r.layout.recompute_blocks.empty() && r.layout.rank_recompute.empty())
        << r.layout.str();
    if (!plain && r.layout.pp == 2 && !r.layout.pipeline_split.empty() &&
        r.layout.recompute == nn::Recompute::None)
      plain = &r;
  }
  ASSERT_NE(plain, nullptr) << "the test needs a DP cut";
  const double memory = plain->memory.peak() - 1;
  Layout full = plain->layout;
  full.recompute = nn::Recompute::Full;
  const Cluster cluster = node(int64_t(memory), 2);
  ASSERT_LE(predict_layout(*config, cluster, req, full).memory.peak(), memory)
      << "the test needs full recomputation to fit on the cut";
  int rows = 0;
  for (const PlanResult& r : search_plans(*config, cluster, req).ranked) {
    if (r.layout.pipeline_split != plain->layout.pipeline_split ||
        r.layout.micro_batch != plain->layout.micro_batch || r.layout.rank_recompute.empty())
      continue;
    ++rows;
    std::cout << r.layout.str() << ": ranks " << r.rank_peaks[0] << ", " << r.rank_peaks[1]
              << " bytes of " << memory << "\n";
    EXPECT_LE(r.memory.peak(), memory);
    const PlanResult again = predict_layout(*config, cluster, req, r.layout);
    EXPECT_DOUBLE_EQ(again.step_seconds, r.step_seconds);
    EXPECT_EQ(again.rank_peaks, r.rank_peaks);
  }
  EXPECT_GT(rows, 0);
}

// train.recompute per pipeline rank: with the device's memory between the ranks' peaks, each rank
// takes its least recomputation that fits; the layout is ranked with those modes (in its name and
// flags), each rank's peak that of the layout with the rank's mode on every rank, its figures
// predict_layout's, and it is at least as fast as every layout of one mode that fits.
TEST(PlanSearch, EachPipelineRankTakesTheLeastRecomputationThatFits) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.schedules = {"1f1b", "gpipe"};
  req.pipeline_rank = [](const std::string& schedule, int, int m, int rank, const std::string&,
                         const TpTransform&) { return two_rank(schedule, m, rank); };
  req.rank_recompute = false;
  const SearchResult roomy = search_plans(*config, node(int64_t(1) << 40, 2), req);
  // The ranks' peaks by layout (schedule, micro-batch) and mode.
  using Key = std::pair<std::string, int64_t>;
  std::map<Key, std::map<nn::Recompute, std::vector<double>>> peaks;
  for (const PlanResult& r : roomy.ranked) {
    EXPECT_TRUE(r.layout.rank_recompute.empty());
    if (r.layout.pp != 2) continue;
    ASSERT_EQ(r.rank_peaks.size(), 2u);
    EXPECT_DOUBLE_EQ(std::max(r.rank_peaks[0], r.rank_peaks[1]), r.memory.peak());
    peaks[{r.layout.schedule, r.layout.micro_batch}][r.layout.recompute] = r.rank_peaks;
  }
  // A memory at which one layout's ranks take different modes.
  const auto assign = [&](const Key& key, double memory) {
    std::vector<nn::Recompute> modes;
    for (int rank = 0; rank < 2; ++rank)
      for (const auto& [mode, p] : peaks.at(key))
        if (p[size_t(rank)] <= memory) {
          modes.push_back(mode);
          break;
        }
    return modes;
  };
  double memory = 0;
  for (const auto& [key, by_mode] : peaks)
    for (const auto& [mode, p] : by_mode)
      for (double m : p) {
        const std::vector<nn::Recompute> modes = assign(key, m);
        if (memory == 0 && modes.size() == 2 && modes[0] != modes[1]) memory = m;
      }
  ASSERT_GT(memory, 0) << "the test needs ranks whose least fitting modes differ";
  const Cluster cluster = node(int64_t(memory), 2);
  req.rank_recompute = true;
  const SearchResult res = search_plans(*config, cluster, req);
  int mixed = 0;
  for (const auto& [key, by_mode] : peaks) {
    const std::vector<nn::Recompute> want = assign(key, double(int64_t(memory)));
    const bool differ = want.size() == 2 && want[0] != want[1];
    const PlanResult* found = nullptr;
    for (const PlanResult& r : res.ranked)
      if (r.layout.pp == 2 && !r.layout.rank_recompute.empty() &&
          Key{r.layout.schedule, r.layout.micro_batch} == key) {
        EXPECT_EQ(found, nullptr) << "twice: " << r.layout.str();
        found = &r;
      }
    ASSERT_EQ(found != nullptr, differ) << key.first << " micro-batch " << key.second;
    if (!found) continue;
    ++mixed;
    const PlanResult& r = *found;
    EXPECT_EQ(r.layout.rank_recompute, want);
    const std::string spec = nn::recompute_list_name(want);
    EXPECT_NE(r.layout.str().find(" recompute=" + spec + " "), std::string::npos) << r.layout.str();
    const std::vector<std::string> args = r.layout.train_args();
    EXPECT_NE(std::find(args.begin(), args.end(), "train.recompute=" + spec), args.end());
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(memory_layout(r.layout, req, rank).recompute, want[size_t(rank)]);
      EXPECT_DOUBLE_EQ(r.rank_peaks[size_t(rank)], by_mode.at(want[size_t(rank)])[size_t(rank)]);
    }
    const PlanResult again = predict_layout(*config, cluster, req, r.layout);
    EXPECT_DOUBLE_EQ(again.step_seconds, r.step_seconds);
    EXPECT_DOUBLE_EQ(again.memory.peak(), r.memory.peak());
    for (const PlanResult& u : res.ranked)
      if (u.layout.pp == 2 && u.layout.rank_recompute.empty() &&
          Key{u.layout.schedule, u.layout.micro_batch} == key) {
        EXPECT_LE(r.step_seconds, u.step_seconds) << r.layout.str() << " vs " << u.layout.str();
      }
  }
  EXPECT_GT(mixed, 0);
  // A list of the wrong length is not a layout the models predict.
  Layout l;
  l.pp = 2;
  l.schedule = "1f1b";
  l.rank_recompute = {nn::Recompute::Full, nn::Recompute::None, nn::Recompute::None};
  EXPECT_NE(model_coverage(l).find("3 modes for pp 2"), std::string::npos) << model_coverage(l);
}

// Finer than a rank (SearchRequest::block_recompute): where a layout needs recomputation, the
// search also ranks its least fitting mode on only the fewest of its first blocks that fit
// (train.recompute = "selective:2", the other blocks none): that count fits, one fewer does not,
// it is no slower than the mode on every block, predict_layout gives its figures and the flags
// carry it; with block_recompute off no such row.
TEST(PlanSearch, ARankRecomputesOnlyTheBlocksItsMemoryNeeds) {
  const auto config = tiny_gpt2();  // 4 blocks
  SearchRequest req = request(1);
  req.block_recompute = false;
  const SearchResult roomy = search_plans(*config, node(int64_t(1) << 40, 1), req);
  std::map<int64_t, std::map<nn::Recompute, const PlanResult*>> by_mode;
  for (const PlanResult& r : roomy.ranked) {
    EXPECT_TRUE(r.layout.recompute_blocks.empty()) << r.layout.str();
    by_mode[r.layout.micro_batch][r.layout.recompute] = &r;
  }
  // Just below the largest micro-batch's peak without recomputation.
  const int64_t largest = by_mode.rbegin()->first;
  const double memory = by_mode[largest].at(nn::Recompute::None)->memory.peak() - 1;
  ASSERT_LT(by_mode[largest].at(nn::Recompute::Full)->memory.peak(), memory);
  const Cluster cluster = node(int64_t(memory), 1);
  req.block_recompute = true;
  const SearchResult res = search_plans(*config, cluster, req);
  int rows = 0;
  for (const PlanResult& r : res.ranked) {
    // Rows with another mode on the other blocks: StrongerModeOnTheFirstBlocksWeakerOnTheRest.
    if (r.layout.recompute_blocks.empty() || !r.layout.recompute_rest.empty()) continue;
    ++rows;
    const auto& modes = by_mode.at(r.layout.micro_batch);
    // The least mode that fits on every block.
    nn::Recompute least = nn::Recompute::Full;
    for (const auto& [mode, p] : modes)
      if (p->memory.peak() <= memory) {
        least = mode;
        break;
      }
    EXPECT_EQ(r.layout.recompute, least) << r.layout.str();
    ASSERT_EQ(r.layout.recompute_blocks.size(), 1u);
    const int64_t n = r.layout.recompute_blocks[0];
    std::cout << r.layout.str() << ": " << r.memory.peak() << " bytes of " << memory << ", "
              << r.step_seconds << " s against " << modes.at(least)->step_seconds << " s\n";
    EXPECT_GE(n, 1);
    EXPECT_LT(n, 4);
    EXPECT_LE(r.memory.peak(), memory);
    const std::string spec = std::string(nn::recompute_name(least)) + ":" + std::to_string(n);
    EXPECT_EQ(r.layout.recompute_spec(), spec);
    const std::vector<std::string> args = r.layout.train_args();
    EXPECT_NE(std::find(args.begin(), args.end(), "train.recompute=" + spec), args.end());
    EXPECT_EQ(memory_layout(r.layout, req).recompute_blocks, n);
    const PlanResult again = predict_layout(*config, cluster, req, r.layout);
    EXPECT_DOUBLE_EQ(again.step_seconds, r.step_seconds);
    EXPECT_DOUBLE_EQ(again.memory.peak(), r.memory.peak());
    Layout fewer = r.layout;
    if (n > 1) {
      fewer.recompute_blocks = {n - 1};
    } else {
      fewer.recompute = nn::Recompute::None;
      fewer.recompute_blocks.clear();
    }
    EXPECT_GT(predict_layout(*config, cluster, req, fewer).memory.peak(), memory) << fewer.str();
    EXPECT_LE(r.step_seconds, modes.at(least)->step_seconds) << r.layout.str();
    EXPECT_LT(r.memory.peak(), modes.at(nn::Recompute::None)->memory.peak());
  }
  EXPECT_GT(rows, 0);
  req.block_recompute = false;
  for (const PlanResult& r : search_plans(*config, cluster, req).ranked)
    EXPECT_TRUE(r.layout.recompute_blocks.empty()) << r.layout.str();
  // Under pp each rank's count on its own (two_rank: blocks 0-1 on rank 0, 2-3 on rank 1): just
  // below rank 0's peak without recomputation, rank 0 recomputes one block and rank 1, which
  // holds fewer micro-batches under 1F1B, none.
  SearchRequest pipe = request(2);
  pipe.schedules = {"1f1b"};
  pipe.pipeline_rank = [](const std::string& schedule, int, int m, int rank, const std::string&,
                          const TpTransform&) { return two_rank(schedule, m, rank); };
  std::map<int64_t, const PlanResult*> plain;
  const SearchResult pipe_roomy = search_plans(*config, node(int64_t(1) << 40, 2), pipe);
  for (const PlanResult& r : pipe_roomy.ranked)
    if (r.layout.pp == 2 && r.layout.recompute == nn::Recompute::None)
      plain[r.layout.micro_batch] = &r;
  const PlanResult& widest = *plain.begin()->second;  // micro-batch 1: nine in flight
  ASSERT_GT(widest.rank_peaks[0], widest.rank_peaks[1]);
  const double pipe_memory = widest.rank_peaks[0] - 1;
  pipe.block_recompute = true;
  const Cluster two = node(int64_t(pipe_memory), 2);
  int pipe_rows = 0;
  for (const PlanResult& r : search_plans(*config, two, pipe).ranked) {
    if (r.layout.recompute_blocks.empty() || r.layout.pp != 2) continue;
    ++pipe_rows;
    std::cout << r.layout.str() << ": ranks " << r.rank_peaks[0] << ", " << r.rank_peaks[1]
              << " bytes of " << pipe_memory << "\n";
    ASSERT_EQ(r.layout.rank_recompute.size(), 2u);
    ASSERT_EQ(r.layout.recompute_blocks.size(), 2u);
    EXPECT_LE(r.memory.peak(), pipe_memory);
    const PlanResult again = predict_layout(*config, two, pipe, r.layout);
    EXPECT_DOUBLE_EQ(again.step_seconds, r.step_seconds);
    EXPECT_EQ(again.rank_peaks, r.rank_peaks);
    for (int rank = 0; rank < 2; ++rank) {
      const int64_t n = r.layout.recompute_blocks[size_t(rank)];
      EXPECT_EQ(memory_layout(r.layout, pipe, rank).recompute_blocks, n);
      if (n == nn::kAllBlocks) continue;
      EXPECT_GE(n, 1);
      EXPECT_LT(n, 2);
      Layout fewer = r.layout;
      fewer.rank_recompute[size_t(rank)] = nn::Recompute::None;
      fewer.recompute_blocks[size_t(rank)] = nn::kAllBlocks;
      EXPECT_GT(predict_layout(*config, two, pipe, fewer).rank_peaks[size_t(rank)], pipe_memory);
    }
  }
  EXPECT_GT(pipe_rows, 0);
  // A count for each of two modes where one mode is given is not a layout the models predict.
  Layout l;
  l.recompute = nn::Recompute::Full;
  l.recompute_blocks = {1, 2};
  EXPECT_NE(model_coverage(l).find("2 block counts for 1 modes"), std::string::npos)
      << model_coverage(l);
}

// Where selective recomputation on every block does not fit and full does, the search also ranks
// full on the fewest of the first blocks with selective on the others (train.recompute =
// "full:2+selective"): that count fits and one fewer does not (0: selective everywhere), it needs
// no more fully recomputed blocks than the count without selective on the rest, is no slower than
// full on every block, predict_layout gives its figures, memory_layout hands the rest on and the
// flags carry it.
TEST(PlanSearch, StrongerModeOnTheFirstBlocksWeakerOnTheRest) {
  const auto config = tiny_gpt2();  // 4 blocks
  SearchRequest req = request(1);
  const SearchResult roomy = search_plans(*config, node(int64_t(1) << 40, 1), req);
  std::map<int64_t, std::map<nn::Recompute, const PlanResult*>> by_mode;
  for (const PlanResult& r : roomy.ranked) by_mode[r.layout.micro_batch][r.layout.recompute] = &r;
  // Just below the largest micro-batch's peak under selective recomputation.
  const int64_t largest = by_mode.rbegin()->first;
  const auto& modes = by_mode[largest];
  const double memory = modes.at(nn::Recompute::Selective)->memory.peak() - 1;
  ASSERT_LT(modes.at(nn::Recompute::Full)->memory.peak(), memory);
  const Cluster cluster = node(int64_t(memory), 1);
  req.block_recompute = true;
  const SearchResult res = search_plans(*config, cluster, req);
  const PlanResult* rest = nullptr;
  const PlanResult* alone = nullptr;
  for (const PlanResult& r : res.ranked) {
    if (r.layout.micro_batch != largest || r.layout.recompute_blocks.empty()) continue;
    (r.layout.recompute_rest.empty() ? alone : rest) = &r;
  }
  ASSERT_NE(rest, nullptr);
  ASSERT_NE(alone, nullptr);
  const Layout& l = rest->layout;
  ASSERT_EQ(l.recompute_blocks.size(), 1u);
  ASSERT_EQ(l.recompute_rest.size(), 1u);
  EXPECT_EQ(l.recompute, nn::Recompute::Full);
  EXPECT_EQ(l.recompute_rest[0], nn::Recompute::Selective);
  const int64_t n = l.recompute_blocks[0];
  std::cout << l.str() << ": " << rest->memory.peak() << " bytes of " << memory << ", "
            << rest->step_seconds << " s; " << alone->layout.str() << ": " << alone->step_seconds
            << " s; full: " << modes.at(nn::Recompute::Full)->step_seconds << " s\n";
  EXPECT_GE(n, 1);
  EXPECT_LT(n, 4);
  EXPECT_LE(n, alone->layout.recompute_blocks[0]);
  EXPECT_LE(rest->memory.peak(), memory);
  const std::string spec = "full:" + std::to_string(n) + "+selective";
  EXPECT_EQ(l.recompute_spec(), spec);
  const std::vector<std::string> args = l.train_args();
  EXPECT_NE(std::find(args.begin(), args.end(), "train.recompute=" + spec), args.end());
  const MemoryLayout m = memory_layout(l, req);
  EXPECT_EQ(m.recompute_blocks, n);
  EXPECT_EQ(m.recompute_rest, nn::Recompute::Selective);
  const PlanResult again = predict_layout(*config, cluster, req, l);
  EXPECT_DOUBLE_EQ(again.step_seconds, rest->step_seconds);
  EXPECT_DOUBLE_EQ(again.memory.peak(), rest->memory.peak());
  Layout fewer = l;
  if (n > 1) {
    fewer.recompute_blocks = {n - 1};
  } else {
    fewer.recompute = nn::Recompute::Selective;
    fewer.recompute_blocks.clear();
    fewer.recompute_rest.clear();
  }
  EXPECT_GT(predict_layout(*config, cluster, req, fewer).memory.peak(), memory) << fewer.str();
  EXPECT_LE(rest->step_seconds, modes.at(nn::Recompute::Full)->step_seconds);
  // Without selective among the searched modes, no such row.
  req.recompute = {nn::Recompute::None, nn::Recompute::Full};
  for (const PlanResult& r : search_plans(*config, cluster, req).ranked)
    EXPECT_TRUE(r.layout.recompute_rest.empty()) << r.layout.str();
  // A rest for each of two counts where one is given is not a layout the models predict.
  Layout two = l;
  two.recompute_rest = {nn::Recompute::Selective, nn::Recompute::Selective};
  EXPECT_NE(model_coverage(two).find("2 modes of the other blocks for 1 block counts"),
            std::string::npos)
      << model_coverage(two);
}

// A mixture of experts refuses full recomputation (its replay would route again): the search
// leaves that mode out, with one entry that gives the model's reason, and ranks the others; a
// request of only modes the model refuses is one error.
TEST(PlanSearch, RecomputeModesTheModelRefusesAreNotSearched) {
  const auto config = models::family_named("mixtral").preset("tiny");
  SearchRequest req = request(1);
  const SearchResult res = search_plans(*config, node(int64_t(1) << 40, 1), req);
  ASSERT_FALSE(res.ranked.empty());
  std::set<nn::Recompute> ranked;
  for (const PlanResult& r : res.ranked) ranked.insert(r.layout.recompute);
  EXPECT_EQ(ranked, (std::set<nn::Recompute>{nn::Recompute::None, nn::Recompute::Selective}));
  int notes = 0;
  for (const PlanResult& r : res.pruned)
    if (r.reason.find("recompute full is not searched") != std::string::npos) {
      ++notes;
      EXPECT_EQ(r.status, PlanStatus::NotModelled);
      EXPECT_NE(r.reason.find("mixture-of-experts"), std::string::npos) << r.reason;
    }
  EXPECT_EQ(notes, 1);
  req.recompute = {nn::Recompute::Full};
  test::expect_error([&] { (void)search_plans(*config, node(int64_t(1) << 40, 1), req); },
                     {"accepts none of the recompute modes searched"});
}

// Tensor-parallel plan files are searched beside the family's built-in plan: every tp layout once
// per plan, the file in its name and flags (parallel.tp_plan); a plan the runtime refuses at a tp
// is one invalid entry with the runtime's reason, not an aborted search. The callback stands in
// for the runtime's transform (cli/plan_layout.h's, which plan.search_train_auto runs).
TEST(PlanSearch, TensorParallelPlanFilesAreSearchedBesideTheBuiltIn) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.recompute = {nn::Recompute::None};
  req.sequence_parallel = {false};
  req.tp_plans = {"", "mlp.json", "broken.json"};
  std::set<std::string> asked;
  req.tensor_parallel = [&](MemoryLayout& m, int tp, bool, const std::string& plan) {
    asked.insert(plan);
    if (plan == "broken.json") TESSEL_FAIL("broken.json: no module matches 'h.*.nothing'");
    m.tp = tp;
    m.tp_plan = plan;
    m.tp_transform = [](models::CausalLM&) {};  // the model whole: only the bookkeeping is tested
  };
  const SearchResult res = search_plans(*config, node(int64_t(1) << 40, 2), req);
  EXPECT_EQ(asked, (std::set<std::string>{"", "mlp.json", "broken.json"}));
  std::map<std::string, int> tp_rows;
  for (const PlanResult& r : res.ranked) {
    if (r.layout.tp != 2) continue;
    ++tp_rows[r.layout.tp_plan];
    const std::vector<std::string> args = r.layout.train_args();
    const bool flag =
        std::find(args.begin(), args.end(), "parallel.tp_plan=mlp.json") != args.end();
    EXPECT_EQ(flag, r.layout.tp_plan == "mlp.json") << r.layout.str();
    EXPECT_EQ(r.layout.str().find(" tp_plan=mlp.json") != std::string::npos, flag);
  }
  EXPECT_GT(tp_rows[""], 0);
  EXPECT_EQ(tp_rows["mlp.json"], tp_rows[""]);
  EXPECT_EQ(tp_rows.count("broken.json"), 0u);
  int broken = 0;
  for (const PlanResult& r : res.pruned)
    if (r.layout.tp_plan == "broken.json") {
      ++broken;
      EXPECT_EQ(r.status, PlanStatus::Invalid);
      EXPECT_NE(r.reason.find("tp plan broken.json: broken.json: no module matches"),
                std::string::npos)
          << r.reason;
    }
  EXPECT_EQ(broken, 1);
  // Layouts without tp are searched once, whatever the plans.
  for (const PlanResult& r : res.ranked) {
    if (r.layout.tp == 1) {
      EXPECT_TRUE(r.layout.tp_plan.empty());
    }
  }
}

// Plan files scoped to a tp and micro-batches (the sharding ILP's, solved per layout by `plan
// search --shard-plans`) are searched with those layouts only; unscoped files with every tp layout.
TEST(PlanSearch, ScopedPlanFilesOnlyWithTheirLayouts) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.recompute = {nn::Recompute::None};
  req.sequence_parallel = {false};
  req.tp_plans = {"", "small.json", "large.json", "other-tp.json", "any.json"};
  req.tp_plan_scopes["small.json"] = {2, {1, 3}};
  req.tp_plan_scopes["large.json"] = {2, {9}};
  req.tp_plan_scopes["other-tp.json"] = {4, {1, 3, 9}};
  req.tensor_parallel = [&](MemoryLayout& m, int tp, bool, const std::string& plan) {
    m.tp = tp;
    m.tp_plan = plan;
    m.tp_transform = [](models::CausalLM&) {};
  };
  const SearchResult res = search_plans(*config, node(int64_t(1) << 40, 2), req);
  std::map<std::string, std::set<int64_t>> seen;  // plan -> micro-batches of its tp 2 rows
  for (const auto* list : {&res.ranked, &res.pruned})
    for (const PlanResult& r : *list)
      if (r.layout.tp == 2 && r.status != PlanStatus::NotModelled)
        seen[r.layout.tp_plan].insert(r.layout.micro_batch);
  EXPECT_EQ(seen[""], (std::set<int64_t>{1, 3, 9}));
  EXPECT_EQ(seen["any.json"], (std::set<int64_t>{1, 3, 9}));
  EXPECT_EQ(seen["small.json"], (std::set<int64_t>{1, 3}));
  EXPECT_EQ(seen["large.json"], (std::set<int64_t>{9}));
  EXPECT_EQ(seen.count("other-tp.json"), 0u);
}

TEST(PlanSearch, InterleavedSchedulesByChunksAndMicroBatchGroups) {
  const auto config = tiny_gpt2();
  SearchRequest req = request(2);
  req.global_batch = 8;
  req.schedules = {"interleaved"};
  req.recompute = {nn::Recompute::None};
  std::set<std::pair<std::string, int>> asked;
  req.pipeline_rank = [&](const std::string& schedule, int pp, int m, int rank, const std::string&,
                          const TpTransform&) {
    EXPECT_EQ(pp, 2);
    asked.insert({schedule, m});
    // The two-rank 1F1B list stands in for the runtime's generator (above plan/), which
    // plan.memory_model_mpi and plan.search_train_auto run.
    return two_rank("1f1b", m, rank);
  };
  const SearchResult res = search_plans(*config, node(int64_t(1) << 40, 2), req);
  const std::set<std::pair<std::string, int>> expected = {
      {"interleaved:2", 8}, {"interleaved:2", 4}, {"interleaved:2", 2},
      {"interleaved:3", 8}, {"interleaved:3", 4}, {"interleaved:3", 2}};
  EXPECT_EQ(asked, expected);
  int ranked = 0;
  for (const PlanResult& r : res.ranked)
    if (r.layout.pp == 2) {
      ++ranked;
      EXPECT_EQ(r.layout.grad_accum % 2, 0) << r.layout.str();
      EXPECT_EQ(r.layout.schedule.rfind("interleaved:", 0), 0u) << r.layout.str();
    }
  EXPECT_EQ(ranked, 6);
}

TEST(PlanSearch, ImpossibleRequestNamesTheLeastMemory) {
  const auto config = tiny_gpt2();
  const Cluster small = node(100000, 3);
  const SearchResult res = search_plans(*config, small, request(3));
  ASSERT_TRUE(res.ranked.empty());
  // The least over every data-parallel layout, from the memory model directly.
  double least = std::numeric_limits<double>::infinity();
  for (int zero : {0, 1, 2, 3})
    for (auto rc : {nn::Recompute::None, nn::Recompute::Selective, nn::Recompute::Full})
      for (int64_t mb : {1, 3}) {
        MemoryLayout ml;
        ml.dp = 3;
        ml.zero_stage = zero;
        ml.recompute = rc;
        ml.micro_batch = mb;
        ml.grad_accum = 3 / mb;
        ml.seq = 13;
        least = std::min(least, estimate_memory(*config, ml).peak());
      }
  const std::string e = test::error_of([&] { best_plan(res); });
  EXPECT_NE(e.find("the least it needs is"), std::string::npos) << e;
  EXPECT_NE(e.find("(" + std::to_string(int64_t(least)) + " bytes) per rank"), std::string::npos)
      << e << "\nexpected " << int64_t(least);
}

TEST(PlanSearch, LayerCostsAddUpToTheTrace) {
  const auto config = tiny_gpt2();
  const Cluster cluster = node(int64_t(1) << 40, 1);
  MemoryLayout ml;
  ml.micro_batch = 3;
  ml.seq = 13;
  const Graph g = trace_for_layout(*config, ml);
  std::shared_ptr<models::CausalLM> model;
  {
    DefaultDeviceScope meta(Device::meta());
    model = config->build_empty();
  }
  const auto layers = traced_layer_costs(cluster, g, *model, 16);
  ASSERT_EQ(layers.size(), size_t(config->num_layers()) + 2);
  double seconds = 0, state = 0, saved = 0;
  for (const LayerCost& l : layers) {
    seconds += l.seconds;
    state += l.state_bytes;
    saved += l.activation_bytes;
  }
  EXPECT_NEAR(seconds, graph_compute_time(cluster, g).total(), 1e-12);
  EXPECT_DOUBLE_EQ(state, 16.0 * double(config->parameter_count()));
  EXPECT_NEAR(saved, g.saved_bytes, 1e-6 * g.saved_bytes);
  // The blocks are alike: equal compute and activations.
  for (int64_t i = 2; i <= config->num_layers(); ++i) {
    EXPECT_NEAR(layers[size_t(i)].seconds, layers[1].seconds, 1e-9 * layers[1].seconds);
    EXPECT_DOUBLE_EQ(layers[size_t(i)].activation_bytes, layers[1].activation_bytes);
  }
  EXPECT_GT(layers[0].seconds, 0);
  EXPECT_GT(layers.back().seconds, 0);
}

// A CPU node (the offload model's tiers are its memory) with a disk for the NVMe tier.
Cluster cpu_node(int64_t memory_bytes, const std::string& kind = "cpu (test)") {
  return Cluster::parse(
      "name = \"cpu-test\"\ndevices_per_node = 1\nnodes = 1\n[device]\nkind = \"" + kind +
          "\"\nmemory_bytes = " + std::to_string(memory_bytes) +
          "\nmemory_bandwidth = 2e10\n[device.peak_flops]\nf32 = 3e10\n"
          "[storage]\nread_bandwidth = 2e9\nwrite_bandwidth = 1e9\n",
      "cpu.toml");
}

// One process's offload input, as the trainer offloads it.
SearchRequest offloading(const models::ConfigPtr& config, int64_t chunk, bool nvme) {
  SearchRequest r = request(1);
  r.offload_chunk_bytes = chunk;
  if (nvme) r.offload_nvme_dir = "/swap";
  r.offload_input = [config](const MemoryLayout& l, const OffloadBudgets& b) {
    return offload_input(*config, l.compute_dtype, b, l.grad_accum, l.tp_transform, l.pipeline);
  };
  return r;
}

// Layouts whose state does not fit are planned offloaded: budgets that the rank's memory holds
// beside what the step keeps outside the tiers, the offload model's own traffic for them, a step
// no shorter than its disk time, and the memory.* settings in the command; where the memory
// leaves no chunk, on an accelerator's description, or without room for the state (no NVMe),
// the row stays out of memory and says why.
TEST(PlanSearch, OffloadsLayoutsThatDoNotFit) {
  // Small enough tensors for chunks of 32 KiB (the embedding is 26.7 KB).
  models::GPT2Config c;
  c.vocab_size = 257;
  c.n_positions = 32;
  c.n_embd = 26;
  c.n_layer = 5;
  c.n_head = 2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  const models::ConfigPtr config = std::make_shared<models::GPT2Config>(c);
  const int64_t chunk = 32 << 10;
  const SearchResult roomy = search_plans(*config, cpu_node(int64_t(1) << 40), request(1));
  ASSERT_FALSE(roomy.ranked.empty());
  double least = std::numeric_limits<double>::infinity();
  for (const PlanResult& r : roomy.ranked) least = std::min(least, r.memory.peak());
  // The state in chunks and the device working set, from a run with every chunk on the device.
  OffloadBudgets all;
  all.chunk_bytes = chunk;
  all.device_budget = int64_t(1) << 40;
  all.host_budget = 5 * chunk;
  all.nvme = true;
  const OffloadPrediction probe = predict_offload(offload_input(*config, DType::F32, all, 1));
  const double plain = least - double(probe.state_bytes);
  // The least layout gets a device tier of the working set and three chunks more, the host tier
  // five chunks; the rest of the state goes to NVMe.
  const int64_t memory = int64_t(plain) + (5 + probe.device_working_set + 3) * chunk;
  ASSERT_LT(probe.device_working_set + 8, probe.chunks);
  const Cluster node1 = cpu_node(memory);
  EXPECT_TRUE(search_plans(*config, node1, request(1)).ranked.empty());

  const SearchResult res = search_plans(*config, node1, offloading(config, chunk, true));
  ASSERT_FALSE(res.ranked.empty());
  for (const PlanResult& r : res.ranked) {
    const Layout& l = r.layout;
    ASSERT_TRUE(l.offloaded()) << l.str();
    EXPECT_EQ(l.offload_device_budget % chunk, 0) << l.str();
    EXPECT_EQ(l.offload_host_budget, 5 * chunk);
    EXPECT_LE(r.offload_plain_bytes + double(l.offload_device_budget + l.offload_host_budget),
              double(memory))
        << l.str();
    EXPECT_NE(l.str().find(" offload="), std::string::npos);
    // The offload model's own steady step for these budgets, and the disk's time for it.
    OffloadBudgets b;
    b.chunk_bytes = chunk;
    b.device_budget = l.offload_device_budget;
    b.host_budget = l.offload_host_budget;
    b.nvme = true;
    const MemoryLayout ml = memory_layout(l, request(1));
    const OffloadTraffic t =
        predict_offload(offload_input(*config, ml.compute_dtype, b, ml.grad_accum)).steady();
    EXPECT_EQ(r.offload.nvme_read_bytes, t.nvme_read_bytes) << l.str();
    EXPECT_EQ(r.offload.nvme_write_bytes, t.nvme_write_bytes) << l.str();
    EXPECT_GT(t.nvme_read_bytes, 0) << l.str();
    EXPECT_DOUBLE_EQ(r.offload_io_seconds, offload_io_seconds(t, 2e9, 1e9));
    EXPECT_DOUBLE_EQ(r.step_seconds, std::max(r.time.total(), r.offload_io_seconds));
    const std::vector<std::string> args = l.train_args();
    for (const std::string& set :
         {"memory.device_budget=" + std::to_string(l.offload_device_budget),
          "memory.host_budget=" + std::to_string(5 * chunk),
          "memory.chunk_size=" + std::to_string(chunk), std::string("memory.nvme_dir=/swap")})
      EXPECT_NE(std::find(args.begin(), args.end(), set), args.end()) << set;
  }
  // Without NVMe the two memory tiers cannot hold the state.
  const SearchResult no_nvme = search_plans(*config, node1, offloading(config, chunk, false));
  EXPECT_TRUE(no_nvme.ranked.empty());
  for (const PlanResult& r : no_nvme.pruned)
    EXPECT_NE(r.reason.find("; offloaded"), std::string::npos) << r.reason;
  // An accelerator's description: not offered.
  const SearchResult gpu =
      search_plans(*config, cpu_node(memory, "H200"), offloading(config, chunk, true));
  EXPECT_TRUE(gpu.ranked.empty());
  EXPECT_NE(gpu.pruned.front().reason.find("offload on H200 devices is not modelled"),
            std::string::npos)
      << gpu.pruned.front().reason;
  // Memory for the step alone: no chunk left for the device tier.
  const SearchResult tight =
      search_plans(*config, cpu_node(int64_t(plain)), offloading(config, chunk, true));
  EXPECT_TRUE(tight.ranked.empty());
  EXPECT_NE(tight.pruned.front().reason.find("for the device tier"), std::string::npos)
      << tight.pruned.front().reason;
  // NVMe without the description's disk: refused up front.
  Cluster no_disk = cpu_node(memory);
  no_disk.storage.reset();
  EXPECT_NE(test::error_of([&] {
              search_plans(*config, no_disk, offloading(config, chunk, true));
            }).find("has no [storage] table"),
            std::string::npos);
}

}  // namespace
}  // namespace tessel::plan
