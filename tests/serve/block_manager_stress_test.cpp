// SPDX-License-Identifier: Apache-2.0
// The block manager under a simulated engine: 10,000 random requests with shared prefixes,
// chunked prefill, decode, forks (n > 1), cancellations mid-prefill and preemptions (the newest
// sequence is freed when an append fails). The test keeps its own KV pool in which each slot
// holds a fingerprint of the prefix whose KV it stands for; writes go to the slots the manager
// gives, copies follow its copy list, and every computed position of every live sequence must
// read back its own prefix's fingerprint, so a wrongly shared, leaked or overwritten block fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <string>

#include "tessel/serve/block_manager.h"

namespace tessel::serve {
namespace {

using Copies = std::vector<std::pair<BlockId, BlockId>>;

struct Pending {
  std::vector<int64_t> prompt;
  int64_t max_new = 1;
  int64_t n = 1;
};

struct Live {
  std::vector<int64_t> tokens;        // the last one has no KV yet once prefill is done
  std::vector<uint64_t> fingerprint;  // of tokens [0, p] for each computed p
  int64_t computed = 0;
  int64_t prompt_len = 0;
  int64_t max_new = 1;
  int64_t n = 1;  // choices still to fork when prefill ends
  int64_t generated = 0;
};

// The test's own prefix fingerprint (FNV-1a over the token ids), independent of the manager.
uint64_t extend(uint64_t prev, int64_t token) {
  uint64_t h = prev ^ static_cast<uint64_t>(token);
  return h * 0x100000001b3ULL;
}

// Sixteen keys in all: chains collide all the time, and only the verification keeps KV right.
uint64_t weak_hash(uint64_t parent_key, std::span<const int64_t> tokens) {
  return block_hash(parent_key, tokens) & 15;
}

struct Config {
  int64_t block_size, num_blocks;
  bool prefix_caching;
  BlockHashFn hash = block_hash;
};

class Stress : public ::testing::TestWithParam<Config> {};

TEST_P(Stress, TenThousandRequestsKeepEveryInvariantAndLeakNothing) {
  const Config cfg = GetParam();
  const int64_t bs = cfg.block_size;
  BlockManager bm(cfg.num_blocks, bs, cfg.prefix_caching, cfg.hash);
  std::mt19937_64 rng(1234 + bs * 7 + cfg.num_blocks);  // a fixed run per configuration
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  // A few shared "system prompts"; small vocabularies make equal blocks (and duplicates) common.
  std::vector<std::vector<int64_t>> prefixes(5);
  for (auto& p : prefixes) {
    p.resize(uniform(0, 5 * bs));
    for (auto& t : p) t = uniform(0, 7);
  }
  const int64_t max_prompt = cfg.num_blocks * bs / 3;

  std::vector<uint64_t> pool(cfg.num_blocks * bs, 0);  // the KV each slot holds (fingerprint)
  std::map<int64_t, Live> live;  // by sequence id: the newest sequence is the last one
  std::deque<Pending> waiting;
  int64_t submitted = 0, next_id = 0, finished = 0, cancelled = 0, preempted = 0, forks = 0;
  int64_t copies_done = 0, reused_tokens = 0;
  const int64_t kRequests = 10000;

  auto compute = [&](int64_t id, Live& s, int64_t count) {
    for (int64_t p = s.computed; p < s.computed + count; ++p) {
      const uint64_t prev = p == 0 ? 0xcbf29ce484222325ULL : s.fingerprint[p - 1];
      s.fingerprint.push_back(extend(prev, s.tokens[p]));
      pool[bm.slot(id, p)] = s.fingerprint[p];
    }
    s.computed += count;
    bm.mark_computed(id, s.tokens, s.computed);
  };
  auto apply = [&](const Copies& copies) {
    for (const auto& [src, dst] : copies) {
      std::copy_n(pool.begin() + int64_t{src} * bs, bs, pool.begin() + int64_t{dst} * bs);
    }
    copies_done += static_cast<int64_t>(copies.size());
  };
  auto preempt_newest = [&]() {
    auto it = std::prev(live.end());
    Live& s = it->second;
    // Recompute later: everything so far becomes the prompt of a new request.
    waiting.push_front({s.tokens, std::max<int64_t>(1, s.max_new - s.generated), s.n});
    bm.free_sequence(it->first);
    live.erase(it);
    ++preempted;
  };

  while (submitted < kRequests || !waiting.empty() || !live.empty()) {
    for (int64_t k = uniform(0, 2); k > 0 && submitted < kRequests; --k, ++submitted) {
      Pending r;
      r.prompt = prefixes[uniform(0, 4)];
      for (int64_t extra = uniform(1, 3 * bs); extra > 0; --extra)
        r.prompt.push_back(uniform(0, 7));
      if (static_cast<int64_t>(r.prompt.size()) > max_prompt) r.prompt.resize(max_prompt);
      r.max_new = uniform(1, 2 * bs);
      r.n = uniform(0, 4) == 0 ? uniform(2, 3) : 1;
      waiting.push_back(std::move(r));
    }
    // Admission: begin, and give the first chunk slots; roll back when the pool is short.
    while (!waiting.empty() && live.size() < 12) {
      Pending& r = waiting.front();
      const int64_t expect_reused = bm.cached_prefix(r.prompt);
      const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
      const int64_t chunk = std::min(prompt_len - expect_reused, uniform(1, 3 * bs));
      const int64_t need = bm.blocks_needed_to_begin(r.prompt, expect_reused + chunk);
      const int64_t available = bm.free_blocks();
      const int64_t id = next_id++;
      const int64_t reused = bm.begin_sequence(id, r.prompt);
      ASSERT_EQ(reused, expect_reused);
      ASSERT_EQ(reused % bs, 0);
      ASSERT_LT(reused, prompt_len);
      Copies copies;
      const bool ok = bm.append_slots(id, chunk, copies);
      ASSERT_EQ(ok, need <= available) << "need " << need << ", available " << available;
      ASSERT_TRUE(copies.empty());
      if (!ok) {
        bm.free_sequence(id);
        break;
      }
      Live s;
      s.tokens = r.prompt;
      s.prompt_len = prompt_len;
      s.max_new = r.max_new;
      s.n = r.n;
      // The reused prefix must already hold exactly this prompt's KV.
      uint64_t fp = 0xcbf29ce484222325ULL;
      for (int64_t p = 0; p < reused; ++p) {
        fp = extend(fp, s.tokens[p]);
        s.fingerprint.push_back(fp);
        ASSERT_EQ(pool[bm.slot(id, p)], fp) << "reused position " << p << " holds other KV";
      }
      s.computed = reused;
      reused_tokens += reused;
      compute(id, s, chunk);
      live.emplace(id, std::move(s));
      waiting.pop_front();
    }
    // One engine step over the running sequences, oldest first.
    for (auto it = live.begin(); it != live.end();) {
      const int64_t id = it->first;
      Live& s = it->second;
      if (uniform(0, 999) < 5) {  // the client went away, often mid-prefill
        bm.free_sequence(id);
        it = live.erase(it);
        ++cancelled;
        continue;
      }
      const int64_t todo = static_cast<int64_t>(s.tokens.size()) - s.computed;
      if (todo == 0) {  // admitted this step with its whole prompt computed
        ++it;
        continue;
      }
      const int64_t count = std::min(todo, uniform(1, 3 * bs));
      Copies copies;
      bool ok = bm.append_slots(id, count, copies);
      while (!ok && std::prev(live.end())->first != id) {
        preempt_newest();
        ok = bm.append_slots(id, count, copies);
      }
      if (!ok) {  // the newest itself: preempted
        preempt_newest();
        break;
      }
      apply(copies);
      compute(id, s, count);
      ++it;
    }
    // Sampling: a sequence whose every token has KV gets its next token (or forks, or ends).
    for (auto it = live.begin(); it != live.end();) {
      Live& s = it->second;
      if (s.computed < static_cast<int64_t>(s.tokens.size())) {
        ++it;
        continue;
      }
      if (s.generated == s.max_new) {
        bm.free_sequence(it->first);
        it = live.erase(it);
        ++finished;
        continue;
      }
      for (; s.n > 1; --s.n) {
        const int64_t child = next_id++;
        bm.fork(it->first, child);
        Live c = s;
        c.n = 1;
        c.tokens.push_back(uniform(0, 7));
        ++c.generated;
        live.emplace(child, std::move(c));
        ++forks;
      }
      s.tokens.push_back(uniform(0, 7));
      ++s.generated;
      ++it;
    }
    bm.check_invariants();
    ASSERT_EQ(bm.num_sequences(), static_cast<int64_t>(live.size()));
    const auto st = bm.stats();
    ASSERT_EQ(st.used + st.cached + st.free, cfg.num_blocks);
    ASSERT_EQ(bm.free_blocks(), st.cached + st.free);
    for (const auto& [id, s] : live) {
      ASSERT_EQ(bm.length(id), s.computed);
      for (int64_t p = 0; p < s.computed; ++p) {
        ASSERT_EQ(pool[bm.slot(id, p)], s.fingerprint[p])
            << "sequence " << id << " position " << p << " lost its KV";
      }
    }
  }
  const auto st = bm.stats();
  EXPECT_EQ(st.used, 0);
  EXPECT_EQ(st.cached + st.free, cfg.num_blocks);
  EXPECT_EQ(bm.free_blocks(), cfg.num_blocks);
  bm.check_invariants();
  // The run exercised what it claims to.
  EXPECT_GT(finished, kRequests / 2);
  EXPECT_GT(cancelled, 0);
  EXPECT_GT(preempted, 0);
  EXPECT_GT(forks, 0);
  if (bs > 1) {
    EXPECT_GT(copies_done, 0);
  } else {
    EXPECT_EQ(copies_done, 0);  // one-token blocks are always full: nothing to copy on write
  }
  if (cfg.prefix_caching) {
    EXPECT_GT(reused_tokens, 0);
    EXPECT_GT(st.prefix_hits, 0);
    EXPECT_GT(st.evictions, 0);
  } else {
    EXPECT_EQ(reused_tokens, 0);
    EXPECT_EQ(st.cached, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(BlockManager, Stress,
                         ::testing::Values(Config{1, 23, true}, Config{3, 33, true},
                                           Config{16, 13, true}, Config{4, 37, false},
                                           Config{2, 41, true, weak_hash}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           const Config& c = info.param;
                           return "bs" + std::to_string(c.block_size) + "_blocks" +
                                  std::to_string(c.num_blocks) +
                                  (!c.prefix_caching     ? "_nocache"
                                   : c.hash == weak_hash ? "_weakhash"
                                                         : "_cache");
                         });

}  // namespace
}  // namespace tessel::serve
