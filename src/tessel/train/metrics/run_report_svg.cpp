// SPDX-License-Identifier: Apache-2.0
// The SVG of `tessel report` (run_report.h): line plots with "nice" axis ticks (1, 2 or 5 times a
// power of ten) and the pipeline timeline as a Gantt chart. Static markup only: the page renders
// the same with or without JavaScript, and every coordinate written is finite.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "tessel/train/metrics/run_report.h"

namespace tessel::train {

namespace {

// Plot geometry (px): the drawing area lies inside the margins.
constexpr double kPlotWidth = 460, kPlotHeight = 250;
constexpr double kLeft = 64, kRight = 14, kTop = 40, kBottom = 36;
constexpr int kMarkerLimit = 60;  // lines with at most this many points get a marker per point

std::string num(double v) {  // a coordinate
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// An axis: [lo, hi] widened to whole ticks.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks() const {
    std::vector<double> out;
    for (int i = 0; lo + i * step <= hi + step * 1e-9 && i < 100; ++i) out.push_back(lo + i * step);
    return out;
  }
  double at(double v, double from, double to) const {
    return from + (v - lo) / (hi - lo) * (to - from);
  }
};

double nice_step(double range, int target) {
  const double raw = range / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

Axis make_axis(double lo, double hi, int target, bool integer) {
  if (!(lo <= hi)) lo = 0, hi = 1;        // no finite point at all
  if (hi - lo <= std::abs(hi) * 1e-12) {  // one value: a band around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  Axis a;
  a.step = nice_step(hi - lo, target);
  if (integer) a.step = std::max(1.0, std::round(a.step));
  a.lo = std::floor(lo / a.step) * a.step;
  a.hi = std::ceil(hi / a.step) * a.step;
  if (a.hi <= a.lo) a.hi = a.lo + a.step;
  return a;
}

// A tick label with as many decimals as the step needs; tiny or huge values in e-notation.
std::string tick_label(double v, double step) {
  char buf[32];
  if (std::abs(v) < step * 1e-6) v = 0;
  const double mag = std::max(std::abs(v), step);
  if (v != 0 && (mag >= 1e6 || step < 1e-4)) {
    std::snprintf(buf, sizeof buf, "%.1e", v);
  } else {
    const int decimals = std::max(0, int(std::ceil(-std::log10(step) - 1e-9)));
    std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 6), v);
  }
  return buf;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_plot(const std::string& metric, const std::string& title,
                     const std::vector<PlotLine>& lines, const std::vector<int64_t>& skipped) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double x0 = kInf, x1 = -kInf, y0 = kInf, y1 = -kInf;
  for (const PlotLine& l : lines) {
    if (!l.data) continue;
    for (size_t i = 0; i < l.data->x.size(); ++i) {
      const double y = l.data->y[i] * l.scale;
      if (!std::isfinite(y) || !std::isfinite(l.data->x[i])) continue;
      x0 = std::min(x0, l.data->x[i]);
      x1 = std::max(x1, l.data->x[i]);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  const Axis ax = make_axis(x0, x1, 6, true), ay = make_axis(y0, y1, 5, false);
  const double left = kLeft, right = kPlotWidth - kRight, top = kTop,
               bottom = kPlotHeight - kBottom;
  std::string s = "<svg class=\"plot\" data-metric=\"" + html_escape(metric) +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kPlotWidth) +
                  "\" height=\"" + num(kPlotHeight) + "\" viewBox=\"0 0 " + num(kPlotWidth) + " " +
                  num(kPlotHeight) + "\" role=\"img\" aria-label=\"" + html_escape(title) + "\">\n";
  s += "<title>" + html_escape(title) + "</title>\n";
  s += "<text class=\"title\" x=\"" + num(left) + "\" y=\"16\">" + html_escape(title) + "</text>\n";
  // Legend: one swatch and label per line, after the title's row.
  double lx = left;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string cls = "s" + std::to_string(k % 4);
    s += "<line class=\"line " + cls + "\" x1=\"" + num(lx) + "\" y1=\"29\" x2=\"" + num(lx + 16) +
         "\" y2=\"29\"/><text class=\"legend\" x=\"" + num(lx + 20) + "\" y=\"33\">" +
         html_escape(lines[k].label) + "</text>\n";
    lx += 34 + 7.0 * double(lines[k].label.size());
  }
  // Grid, ticks and labels.
  s += "<g class=\"axis\">\n";
  for (double t : ay.ticks()) {
    const double y = ay.at(t, bottom, top);
    s += "<line class=\"grid\" x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(right) +
         "\" y2=\"" + num(y) + "\"/><text class=\"tick\" x=\"" + num(left - 6) + "\" y=\"" +
         num(y + 4) + "\" text-anchor=\"end\">" + tick_label(t, ay.step) + "</text>\n";
  }
  for (double t : ax.ticks()) {
    const double x = ax.at(t, left, right);
    s += "<line class=\"tickmark\" x1=\"" + num(x) + "\" y1=\"" + num(bottom) + "\" x2=\"" +
         num(x) + "\" y2=\"" + num(bottom + 4) + "\"/><text class=\"tick\" x=\"" + num(x) +
         "\" y=\"" + num(bottom + 16) + "\" text-anchor=\"middle\">" + tick_label(t, ax.step) +
         "</text>\n";
  }
  s += "<line class=\"frame\" x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) +
       "\" y2=\"" + num(bottom) + "\"/><line class=\"frame\" x1=\"" + num(left) + "\" y1=\"" +
       num(bottom) + "\" x2=\"" + num(right) + "\" y2=\"" + num(bottom) + "\"/>\n";
  s += "<text class=\"label\" x=\"" + num((left + right) / 2) + "\" y=\"" + num(kPlotHeight - 4) +
       "\" text-anchor=\"middle\">step</text>\n</g>\n";
  for (int64_t step : skipped) {
    const double x = ax.at(double(step), left, right);
    if (!std::isfinite(x) || x < left || x > right) continue;
    s += "<line class=\"skipped\" x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) +
         "\" y2=\"" + num(bottom) + "\"><title>step " + std::to_string(step) +
         " skipped (loss or gradient not finite)</title></line>\n";
  }
  for (size_t k = 0; k < lines.size(); ++k) {
    const PlotLine& l = lines[k];
    if (!l.data) continue;
    const std::string cls = "s" + std::to_string(k % 4);
    std::string points, markers;
    int n = 0;
    for (size_t i = 0; i < l.data->x.size(); ++i) {
      const double v = l.data->y[i] * l.scale;
      if (!std::isfinite(v) || !std::isfinite(l.data->x[i])) continue;
      const std::string px = num(ax.at(l.data->x[i], left, right)), py = num(ay.at(v, bottom, top));
      points += (n++ > 0 ? " " : "") + px + "," + py;
      markers +=
          "<circle class=\"marker " + cls + "\" cx=\"" + px + "\" cy=\"" + py + "\" r=\"2.5\"/>";
    }
    if (n == 0) continue;
    s += "<polyline class=\"line " + cls + "\" data-series=\"" + html_escape(l.series) +
         "\" points=\"" + points + "\"/>\n";
    if (n <= kMarkerLimit) s += "<g class=\"markers\">" + markers + "</g>\n";
  }
  return s + "</svg>\n";
}

std::string svg_timeline(const PipelineTimeline& t) {
  constexpr double kWidth = 940, kLabel = 70, kRow = 30, kAxis = 30, kPad = 10;
  const double makespan = t.makespan_ms > 0 ? t.makespan_ms : 1;
  const double height = kPad + kRow * double(t.ranks.size()) + kAxis;
  const double x0 = kLabel, x1 = kWidth - kPad;
  auto x_of = [&](double ms) { return x0 + std::clamp(ms / makespan, 0.0, 1.0) * (x1 - x0); };
  std::string s = "<svg class=\"timeline\" data-ranks=\"" + std::to_string(t.ranks.size()) +
                  "\" data-stages=\"" + std::to_string(t.stages) +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) +
                  "\" height=\"" + num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " +
                  num(height) + "\" role=\"img\" aria-label=\"pipeline timeline\">\n";
  s += "<title>Pipeline timeline of step " + std::to_string(t.step) + "</title>\n";
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const double y = kPad + kRow * double(r);
    s += "<g class=\"rank\" data-rank=\"" + std::to_string(r) + "\"><text class=\"tick\" x=\"" +
         num(kLabel - 8) + "\" y=\"" + num(y + kRow / 2 + 4) + "\" text-anchor=\"end\">rank " +
         std::to_string(r) + "</text>\n";
    for (const TimelineAction& a : t.ranks[r]) {
      const bool compute = a.kind == "F" || a.kind == "B";
      const double ax = x_of(a.start), w = std::max(x_of(a.end) - ax, 0.5);
      const std::string tip = html_escape(a.kind) + " micro-batch " + std::to_string(a.microbatch) +
                              " stage " + std::to_string(a.stage) + ": " +
                              tick_label(a.start, 0.01) + "–" + tick_label(a.end, 0.01) + " ms";
      if (!compute) {  // a message: a thin bar under the row (a long one is a wait)
        s += "<rect class=\"msg\" x=\"" + num(ax) + "\" y=\"" + num(y + kRow - 8) + "\" width=\"" +
             num(w) + "\" height=\"3\"><title>" + tip + "</title></rect>\n";
        continue;
      }
      s += "<rect class=\"" + std::string(a.kind == "F" ? "fwd" : "bwd") + " st" +
           std::to_string(a.stage % 8) + "\" data-kind=\"" + a.kind + "\" data-stage=\"" +
           std::to_string(a.stage) + "\" data-microbatch=\"" + std::to_string(a.microbatch) +
           "\" x=\"" + num(ax) + "\" y=\"" + num(y + 3) + "\" width=\"" + num(w) + "\" height=\"" +
           num(kRow - 12) + "\"><title>" + tip + "</title></rect>\n";
      if (w >= 18)
        s += "<text class=\"boxlabel\" x=\"" + num(ax + w / 2) + "\" y=\"" + num(y + kRow / 2) +
             "\" text-anchor=\"middle\">" + a.kind + std::to_string(a.microbatch) + "</text>\n";
    }
    s += "</g>\n";
  }
  const Axis ms = make_axis(0, makespan, 8, false);
  const double axis_y = kPad + kRow * double(t.ranks.size());
  s += "<g class=\"axis\"><line class=\"frame\" x1=\"" + num(x0) + "\" y1=\"" + num(axis_y) +
       "\" x2=\"" + num(x1) + "\" y2=\"" + num(axis_y) + "\"/>\n";
  for (double v : ms.ticks()) {
    if (v > makespan * (1 + 1e-9)) break;
    const double x = x_of(v);
    s += "<line class=\"tickmark\" x1=\"" + num(x) + "\" y1=\"" + num(axis_y) + "\" x2=\"" +
         num(x) + "\" y2=\"" + num(axis_y + 4) + "\"/><text class=\"tick\" x=\"" + num(x) +
         "\" y=\"" + num(axis_y + 16) + "\" text-anchor=\"middle\">" + tick_label(v, ms.step) +
         "</text>\n";
  }
  s += "<text class=\"label\" x=\"" + num(x1) + "\" y=\"" + num(axis_y + 28) +
       "\" text-anchor=\"end\">ms</text></g>\n";
  return s + "</svg>\n";
}

}  // namespace tessel::train
