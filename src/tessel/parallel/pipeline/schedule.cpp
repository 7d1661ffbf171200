// SPDX-License-Identifier: Apache-2.0
// Names of pipeline actions, for error messages, timelines and traces.
#include "tessel/parallel/pipeline/schedule.h"

#include "tessel/core/error.h"

namespace tessel::parallel::pipeline {

bool is_compute(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward;
}

bool is_send(ActionKind kind) {
  return kind == ActionKind::SendActivation || kind == ActionKind::SendGradient;
}

bool is_recv(ActionKind kind) {
  return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGradient;
}

std::string to_string(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward:
      return "F";
    case ActionKind::Backward:
      return "B";
    case ActionKind::SendActivation:
      return "SendA";
    case ActionKind::RecvActivation:
      return "RecvA";
    case ActionKind::SendGradient:
      return "SendG";
    case ActionKind::RecvGradient:
      return "RecvG";
  }
  TESSEL_FAIL("pipeline: unknown action kind ", static_cast<int>(kind));
}

std::string to_string(const Action& action) {
  std::string text =
      detail::concat(to_string(action.kind), " mb", action.microbatch, " s", action.stage);
  if (is_send(action.kind)) {
    text += detail::concat(" ->", action.peer);
  } else if (is_recv(action.kind)) {
    text += detail::concat(" <-", action.peer);
  }
  return text;
}

}  // namespace tessel::parallel::pipeline
