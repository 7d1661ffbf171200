// SPDX-License-Identifier: Apache-2.0
// A training run on a CUDA device (train.device = cuda[:N]): the model is built and initialised
// (or loaded from a checkpoint) on the host exactly as a CPU run's, then its parameters and the
// optimizer's moments move to the device, and from there every op runs on the CUDA backend (the
// ops dispatch on their tensors' device). Batches are read on the host and moved per
// micro-batch; the loss is read back once per micro-batch; checkpoints copy to the host as they
// write. One process for now: the layouts over NCCL, offload, fp16's loss scaling and mixtures
// of experts are refused by name before anything is allocated.
#include "tessel/nn/device_move.h"
#include "tessel/tensor/device_memory.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

void Trainer::check_device_run(const models::ModelConfig& model) const {
  if (device_.is_cpu()) return;
  const std::string d = "train.device = " + config_.train.device;
  require_cuda_device(device_);
  TESSEL_CHECK(layout_.world_size() == 1, d, ": a CUDA run is one process for now; this job has ",
               layout_.world_size(), " ranks (dp, tp, pp and ep over NCCL come later)");
  TESSEL_CHECK(!config_.memory.enabled(), d,
               ": memory offload (memory.*) manages host tiers for CPU runs only");
  TESSEL_CHECK(config_.train.precision != "fp16", d,
               ": fp16's dynamic loss scaling reads gradients on the host; use "
               "train.precision = bf16 or fp32");
  TESSEL_CHECK(!model.has_experts(), d,
               ": mixtures of experts need the grouped GEMM, which the CUDA backend lacks");
}

void Trainer::move_to_run_device() {
  if (device_.is_cpu()) return;
  int64_t bytes = nn::move_to_device(*model_, device_);
  if (adamw_ != nullptr) bytes += nn::move_to_device(adamw_->state(), device_);
  print("note: the model and its optimizer state are on " + device_.str() + " (" +
        std::to_string(bytes >> 20) + " MiB)");
}

Tensor Trainer::on_run_device(const Tensor& t) const {
  return to_device(t, device_);
}

double Trainer::host_scalar(const Tensor& t) {
  return to_device(t, Device::cpu()).item();  // t itself on the host
}

}  // namespace tessel::train
