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

std::vector<Recompute> parse_recompute_list(std::string_view spec) {
  std::vector<Recompute> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = spec.find(',', begin);
    const std::string_view item = spec.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    const std::optional<Recompute> m = mode_named(item);
    TESSEL_CHECK(m, "recompute mode \"", item, "\" (entry ", out.size() + 1, " of \"", spec,
                 "\") is not one of none, selective, full");
    out.push_back(*m);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::string recompute_list_name(const std::vector<Recompute>& modes) {
  std::string out;
  for (size_t i = 0; i < modes.size(); ++i)
    out += (i ? "," : "") + std::string(recompute_name(modes[i]));
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
