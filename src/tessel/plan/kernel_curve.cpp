// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/kernel_curve.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "tessel/core/error.h"

namespace tessel::plan {

namespace {

// The grid's cell around `x` on one axis: the lower index and the weight of the upper one, in
// log2 coordinates, clamped to the axis's range.
std::pair<size_t, double> cell(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  size_t i = size_t(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin()) - 1;
  const double w =
      (std::log2(x) - std::log2(axis[i])) / (std::log2(axis[i + 1]) - std::log2(axis[i]));
  return {i, w};
}

}  // namespace

std::optional<double> gemm_rate_on_grid(std::span<const GemmSample> samples, double m, double n,
                                        double k) {
  if (samples.empty()) return std::nullopt;
  std::array<std::vector<double>, 3> axes;
  for (const GemmSample& s : samples) {
    TESSEL_CHECK(s.m > 0 && s.n > 0 && s.k > 0 && s.flops > 0, "gemm rate: a measured point ", s.m,
                 "x", s.n, "x", s.k, " at ", s.flops, " FLOP/s");
    axes[0].push_back(s.m);
    axes[1].push_back(s.n);
    axes[2].push_back(s.k);
  }
  for (auto& a : axes) {
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
  }
  if (axes[0].size() * axes[1].size() * axes[2].size() != samples.size()) return std::nullopt;
  std::map<std::array<double, 3>, double> log_rate;
  for (const GemmSample& s : samples) log_rate[{s.m, s.n, s.k}] = std::log(s.flops);
  if (log_rate.size() != samples.size()) return std::nullopt;  // a repeated shape
  const std::array<double, 3> at = {m, n, k};
  std::array<std::pair<size_t, double>, 3> c;
  for (int d = 0; d < 3; ++d) c[size_t(d)] = cell(axes[size_t(d)], at[size_t(d)]);
  double sum = 0;
  double single = -1;  // a measured point's rate when it alone has weight (read exactly)
  int weighted = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double weight = 1;
    std::array<double, 3> key{};
    for (int d = 0; d < 3; ++d) {
      const auto& [i, w] = c[size_t(d)];
      const bool upper = (corner >> d) & 1;
      const std::vector<double>& axis = axes[size_t(d)];
      if (axis.size() == 1 && upper) weight = 0;
      key[size_t(d)] = axis[std::min(axis.size() - 1, i + (upper ? 1 : 0))];
      weight *= upper ? w : 1 - w;
    }
    if (weight != 0) {
      sum += weight * log_rate.at(key);
      ++weighted;
      for (const GemmSample& s : samples)
        if (s.m == key[0] && s.n == key[1] && s.k == key[2]) single = s.flops;
    }
  }
  return weighted == 1 ? single : std::exp(sum);
}

double curve_at(std::vector<std::pair<double, double>> points, double x) {
  TESSEL_CHECK(!points.empty(), "kernel curve: no measured points");
  TESSEL_CHECK(x > 0 && std::isfinite(x), "kernel curve: evaluated at ", x);
  for (const auto& [px, py] : points)
    TESSEL_CHECK(px > 0 && py > 0, "kernel curve: a measured point (", px, ", ", py, ")");
  std::sort(points.begin(), points.end());
  struct Knot {
    double x, log_x, y, log_y;
  };
  std::vector<Knot> merged;
  for (size_t i = 0; i < points.size();) {
    size_t j = i;
    double log_y = 0;
    for (; j < points.size() && points[j].first == points[i].first; ++j)
      log_y += std::log(points[j].second);
    const double y = j - i == 1 ? points[i].second : std::exp(log_y / double(j - i));
    merged.push_back({points[i].first, std::log(points[i].first), y, log_y / double(j - i)});
    i = j;
  }
  // At a measured x the measured y exactly; beyond the ends, constant and proportional.
  for (const Knot& k : merged)
    if (k.x == x) return k.y;
  if (x < merged.front().x) return merged.front().y;
  if (x > merged.back().x) return merged.back().y * (x / merged.back().x);
  const double lx = std::log(x);
  size_t i = 0;
  while (merged[i + 1].x < x) ++i;
  const Knot& a = merged[i];
  const Knot& b = merged[i + 1];
  return std::exp(a.log_y + (b.log_y - a.log_y) * (lx - a.log_x) / (b.log_x - a.log_x));
}

}  // namespace tessel::plan
