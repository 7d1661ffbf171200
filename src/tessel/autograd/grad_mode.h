// SPDX-License-Identifier: Apache-2.0
// Gradient recording mode, per thread: ops record a backward node only while it is enabled.
// NoGradGuard turns it off for a scope (inference, optimizer steps, the backward pass itself);
// GradModeGuard sets it either way (activation recomputation turns it back on inside backward).
#pragma once

namespace tessel::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace tessel::autograd
