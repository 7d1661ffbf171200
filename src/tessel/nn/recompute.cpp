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

// An entry is a mode or `mode*N`, N consecutive ranks of it ("selective*8,none*8": a pp 16
// layout's list without sixteen entries).
std::vector<Recompute> parse_recompute_list(std::string_view spec) {
  constexpr int kMaxRepeat = 1 << 16;  // far above any pipeline's ranks
  std::vector<Recompute> out;
  size_t begin = 0;
  for (int entry = 1;; ++entry) {
    const size_t comma = spec.find(',', begin);
    const std::string_view item = spec.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    const size_t star = item.find('*');
    const std::string_view name = item.substr(0, star);
    const std::optional<Recompute> m = mode_named(name);
    TESSEL_CHECK(m, "recompute mode \"", name, "\" (entry ", entry, " of \"", spec,
                 "\") is not one of none, selective, full");
    int repeat = 1;
    if (star != std::string_view::npos) {
      const std::string_view count = item.substr(star + 1);
      repeat = 0;
      bool digits = !count.empty() && count.size() <= 6;
      for (char c : count) {
        digits = digits && c >= '0' && c <= '9';
        if (digits) repeat = repeat * 10 + (c - '0');
      }
      TESSEL_CHECK(digits && repeat >= 1 && repeat <= kMaxRepeat, "recompute entry \"", item,
                   "\" (entry ", entry, " of \"", spec, "\"): the count after '*' must be a ",
                   "whole number from 1 to ", kMaxRepeat);
    }
    out.insert(out.end(), size_t(repeat), *m);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

// Runs of one mode as `mode*N`, so a long pipeline's list stays short.
std::string recompute_list_name(const std::vector<Recompute>& modes) {
  std::string out;
  for (size_t i = 0; i < modes.size();) {
    size_t run = 1;
    while (i + run < modes.size() && modes[i + run] == modes[i]) ++run;
    out += (out.empty() ? "" : ",") + std::string(recompute_name(modes[i]));
    if (run > 1) out += "*" + std::to_string(run);
    i += run;
  }
  return out;
}

Recompute recompute_of_rank(const std::vector<Recompute>& modes, int rank, int ranks) {
  TESSEL_CHECK(modes.size() == 1 || int(modes.size()) == ranks, "recompute \"",
               recompute_list_name(modes), "\" gives ", modes.size(), " modes for --pp ", ranks,
               ": give one mode, or one per pipeline rank");
  TESSEL_CHECK(rank >= 0 && rank < ranks, "recompute_of_rank: rank ", rank, " of ", ranks);
  return modes.size() == 1 ? modes[0] : modes[size_t(rank)];
}

}  // namespace tessel::nn
