// SPDX-License-Identifier: Apache-2.0
// OptimizerGroup: the members' spans concatenated, every update forwarded.
#include "tessel/train/optim/optimizer_group.h"

#include "tessel/core/error.h"

namespace tessel::train {

OptimizerGroup::OptimizerGroup(std::vector<std::unique_ptr<Optimizer>> members)
    : members_(std::move(members)) {
  TESSEL_CHECK(!members_.empty(), "OptimizerGroup: needs at least one optimizer");
  for (size_t i = 0; i < members_.size(); ++i) {
    TESSEL_CHECK(members_[i] != nullptr, "OptimizerGroup: member ", i, " is null");
    TESSEL_CHECK(members_[i]->step_count() == members_[0]->step_count(), "OptimizerGroup: member ",
                 i, " has taken ", members_[i]->step_count(), " steps, member 0 ",
                 members_[0]->step_count());
    name_ += (i ? " + " : "") + std::string(members_[i]->name());
  }
}

std::vector<GradSpan> OptimizerGroup::gradients() const {
  std::vector<GradSpan> out;
  for (const auto& m : members_)
    for (GradSpan& s : m->gradients()) out.push_back(std::move(s));
  return out;
}

std::vector<GradSpan> OptimizerGroup::parameter_gradients() const {
  std::vector<GradSpan> out;
  for (const auto& m : members_)
    for (GradSpan& s : m->parameter_gradients()) out.push_back(std::move(s));
  return out;
}

void OptimizerGroup::scale_gradients(double factor) {
  for (const auto& m : members_) m->scale_gradients(factor);
}

void OptimizerGroup::step(double lr) {
  for (const auto& m : members_) m->step(lr);
}

int64_t OptimizerGroup::state_bytes() const {
  int64_t total = 0;
  for (const auto& m : members_) total += m->state_bytes();
  return total;
}

}  // namespace tessel::train
