// SPDX-License-Identifier: Apache-2.0
// Names of the recomputation modes.
#include "tessel/nn/recompute.h"

#include <optional>

#include "tessel/core/error.h"

namespace tessel::nn {

std::string_view recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  TESSEL_FAIL("recompute_name: unknown mode ", int(mode));
}

namespace {

std::optional<Recompute> mode_named(std::string_view name) {
  for (Recompute m : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (recompute_name(m) == name) return m;
  return std::nullopt;
}

}  // namespace

Recompute parse_recompute(std::string_view name) {
  const std::optional<Recompute> m = mode_named(name);
  TESSEL_CHECK(m, "recompute mode \"", name, "\" is not one of none, selective, full");
  return *m;
}

namespace {

// A whole number of up to six digits from 1 to `most`, or nullopt.
std::optional<int64_t> count_of(std::string_view text, int64_t most) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  int64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > most) return std::nullopt;
  return n;
}

// An entry is `mode[:N[+rest]][*R]`: the mode, the first N of the rank's blocks it applies to,
// the mode of the rank's other blocks, and R consecutive ranks of it ("selective*8,none*8": a
// pp 16 layout's list without sixteen entries).
std::vector<RankRecompute> parse_entries(std::string_view spec) {
  constexpr int kMaxRepeat = 1 << 16;      // far above any pipeline's ranks
  constexpr int64_t kMaxBlocks = 999'999;  // far above any model's blocks
  std::vector<RankRecompute> out;
  size_t begin = 0;
  for (int entry = 1;; ++entry) {
    const size_t comma = spec.find(',', begin);
    const std::string_view item = spec.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    const size_t star = item.find('*');
    const std::string_view with_rest = item.substr(0, star);
    const size_t plus = with_rest.find('+');
    const std::string_view head = with_rest.substr(0, plus);
    const size_t colon = head.find(':');
    const std::string_view name = head.substr(0, colon);
    const std::optional<Recompute> m = mode_named(name);
    TESSEL_CHECK(m, "recompute mode \"", name, "\" (entry ", entry, " of \"", spec,
                 "\") is not one of none, selective, full");
    RankRecompute e{*m, kAllBlocks, Recompute::None};
    if (colon != std::string_view::npos) {
      const std::optional<int64_t> n = count_of(head.substr(colon + 1), kMaxBlocks);
      TESSEL_CHECK(n && *m != Recompute::None, "recompute entry \"", item, "\" (entry ", entry,
                   " of \"", spec, "\"): after ':' comes how many of the rank's blocks ",
                   "recompute, a whole number from 1 to ", kMaxBlocks,
                   ", after selective or full only");
      e.blocks = *n;
    }
    if (plus != std::string_view::npos) {
      const std::string_view rest = with_rest.substr(plus + 1);
      const std::optional<Recompute> r = mode_named(rest);
      TESSEL_CHECK(r, "recompute entry \"", item, "\" (entry ", entry, " of \"", spec,
                   "\"): the mode after '+' (the rank's other blocks) \"", rest,
                   "\" is not one of none, selective, full");
      TESSEL_CHECK(colon != std::string_view::npos && *r != *m, "recompute entry \"", item,
                   "\" (entry ", entry, " of \"", spec, "\"): the mode after '+' (\"", rest,
                   "\") is the mode of the rank's blocks after the first N: it needs a count ",
                   "(mode:N+rest) and a mode other than the entry's own, ", name);
      e.rest = *r;
    }
    int64_t repeat = 1;
    if (star != std::string_view::npos) {
      const std::optional<int64_t> r = count_of(item.substr(star + 1), kMaxRepeat);
      TESSEL_CHECK(r, "recompute entry \"", item, "\" (entry ", entry, " of \"", spec,
                   "\"): the count after '*' must be a whole number from 1 to ", kMaxRepeat);
      repeat = *r;
    }
    out.insert(out.end(), size_t(repeat), e);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<RankRecompute> parse_recompute_entries(std::string_view spec) {
  return parse_entries(spec);
}

std::vector<Recompute> parse_recompute_list(std::string_view spec) {
  std::vector<Recompute> out;
  for (const RankRecompute& e : parse_entries(spec)) out.push_back(e.mode);
  return out;
}

std::vector<int64_t> parse_recompute_blocks(std::string_view spec) {
  std::vector<int64_t> out;
  for (const RankRecompute& e : parse_entries(spec)) out.push_back(e.blocks);
  return out;
}

std::string recompute_list_name(const std::vector<Recompute>& modes) {
  return recompute_list_name(modes, {}, {});
}

std::string recompute_list_name(const std::vector<Recompute>& modes,
                                const std::vector<int64_t>& blocks) {
  return recompute_list_name(modes, blocks, {});
}

// Runs of one entry as `mode*N`, so a long pipeline's list stays short.
std::string recompute_list_name(const std::vector<Recompute>& modes,
                                const std::vector<int64_t>& blocks,
                                const std::vector<Recompute>& rests) {
  TESSEL_CHECK((blocks.empty() || blocks.size() == modes.size()) &&
                   (rests.empty() || rests.size() == modes.size()),
               "recompute_list_name: ", blocks.size(), " block counts and ", rests.size(),
               " rests for ", modes.size(), " modes");
  auto count = [&](size_t i) { return blocks.empty() ? kAllBlocks : blocks[i]; };
  auto rest = [&](size_t i) {
    return rests.empty() || count(i) == kAllBlocks ? Recompute::None : rests[i];
  };
  std::string out;
  for (size_t i = 0; i < modes.size();) {
    size_t run = 1;
    while (i + run < modes.size() && modes[i + run] == modes[i] && count(i + run) == count(i) &&
           rest(i + run) == rest(i))
      ++run;
    out += (out.empty() ? "" : ",") + std::string(recompute_name(modes[i]));
    if (count(i) != kAllBlocks) out += ":" + std::to_string(count(i));
    if (rest(i) != Recompute::None) out += "+" + std::string(recompute_name(rest(i)));
    if (run > 1) out += "*" + std::to_string(run);
    i += run;
  }
  return out;
}

RankRecompute rank_recompute(std::string_view spec, int rank, int ranks) {
  const std::vector<RankRecompute> entries = parse_entries(spec);
  std::vector<Recompute> modes;
  for (const RankRecompute& e : entries) modes.push_back(e.mode);
  (void)recompute_of_rank(modes, rank, ranks);  // the list's length and the rank checked
  return entries.size() == 1 ? entries[0] : entries[size_t(rank)];
}

Recompute recompute_of_rank(const std::vector<Recompute>& modes, int rank, int ranks) {
  TESSEL_CHECK(modes.size() == 1 || int(modes.size()) == ranks, "recompute \"",
               recompute_list_name(modes), "\" gives ", modes.size(), " modes for --pp ", ranks,
               ": give one mode, or one per pipeline rank");
  TESSEL_CHECK(rank >= 0 && rank < ranks, "recompute_of_rank: rank ", rank, " of ", ranks);
  return modes.size() == 1 ? modes[0] : modes[size_t(rank)];
}

}  // namespace tessel::nn
