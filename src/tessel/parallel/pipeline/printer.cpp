// SPDX-License-Identifier: Apache-2.0
// Text and Chrome-trace renderings of a simulated pipeline schedule.
#include "tessel/parallel/pipeline/printer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel::parallel::pipeline {
namespace {

using detail::concat;

// "" for actions the text timeline leaves out (receives: their time is waiting, drawn as idle).
std::string cell_label(const Schedule& schedule, const Action& a) {
  std::string label;
  switch (a.kind) {
    case ActionKind::Forward:
      label = "F";
      break;
    case ActionKind::Backward:
      label = "B";
      break;
    case ActionKind::SendActivation:
      label = ">";
      break;
    case ActionKind::SendGradient:
      label = "<";
      break;
    default:
      return "";
  }
  label += std::to_string(a.microbatch);
  if (schedule.virtual_stages > 1) {
    label += static_cast<char>('a' + schedule.chunk(a.stage) % 26);
  }
  return label;
}

void check_shapes(const Schedule& schedule, const Simulation& simulation) {
  TESSEL_CHECK(simulation.timeline.size() == schedule.actions.size(),
               "pipeline printer: a simulation of ", simulation.timeline.size(),
               " ranks for a schedule of ", schedule.actions.size());
}

}  // namespace

std::string text_timeline(const Schedule& schedule, const Simulation& simulation, double unit) {
  check_shapes(schedule, simulation);
  TESSEL_CHECK(unit > 0, "pipeline text_timeline: unit must be > 0, got ", unit);
  const auto cells = static_cast<size_t>(std::ceil(simulation.makespan / unit - 1e-9));
  size_t width = 1;
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      width = std::max(width, cell_label(schedule, a).size());
    }
  }
  const size_t rank_width = std::to_string(std::max(0, schedule.ranks - 1)).size();
  std::string text;
  for (size_t r = 0; r < schedule.actions.size(); ++r) {
    std::vector<std::string> row(cells, std::string(width, '.'));
    for (const TimedAction& t : simulation.timeline[r]) {
      const std::string label =
          cell_label(schedule, schedule.actions[r][static_cast<size_t>(t.index)]);
      if (label.empty() || t.end <= t.start) {
        continue;
      }
      for (size_t c = 0; c < cells; ++c) {
        const double mid = (static_cast<double>(c) + 0.5) * unit;
        if (t.start <= mid && mid < t.end) {
          row[c] = label + std::string(width - label.size(), ' ');
        }
      }
    }
    std::string rank = std::to_string(r);
    text += "rank " + std::string(rank_width - rank.size(), ' ') + rank + ":";
    for (const std::string& cell : row) {
      text += ' ';
      text += cell;
    }
    text += '\n';
  }
  return text;
}

std::string chrome_trace(const Schedule& schedule, const Simulation& simulation,
                         double us_per_unit) {
  check_shapes(schedule, simulation);
  TESSEL_CHECK(us_per_unit > 0, "pipeline chrome_trace: us_per_unit must be > 0, got ",
               us_per_unit);
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < schedule.actions.size(); ++r) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", r},
                      {"args", {{"name", concat("rank ", r)}}}});
    for (const TimedAction& t : simulation.timeline[r]) {
      const Action& a = schedule.actions[r][static_cast<size_t>(t.index)];
      const char* category = a.kind == ActionKind::Forward    ? "forward"
                             : a.kind == ActionKind::Backward ? "backward"
                             : is_send(a.kind)                ? "send"
                                                              : nullptr;
      if (category == nullptr || (!is_compute(a.kind) && t.end <= t.start)) {
        continue;
      }
      events.push_back({{"name", to_string(a)},
                        {"cat", category},
                        {"ph", "X"},
                        {"pid", r},
                        {"tid", 0},
                        {"ts", t.start * us_per_unit},
                        {"dur", (t.end - t.start) * us_per_unit},
                        {"args", {{"microbatch", a.microbatch}, {"stage", a.stage}}}});
    }
  }
  nlohmann::json trace = {{"traceEvents", events},
                          {"displayTimeUnit", "ms"},
                          {"otherData",
                           {{"schedule", schedule.name},
                            {"ranks", schedule.ranks},
                            {"virtual_stages", schedule.virtual_stages},
                            {"microbatches", schedule.microbatches},
                            {"makespan", simulation.makespan},
                            {"bubble_fraction", simulation.bubble_fraction}}}};
  return trace.dump(1);
}

}  // namespace tessel::parallel::pipeline
