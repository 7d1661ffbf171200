// SPDX-License-Identifier: Apache-2.0
// Registration of the subcommands; each lives in its own file.
#pragma once

#include <CLI/CLI.hpp>

#include "tessel/tensor/tensor.h"

namespace tessel::cli {

void add_bench_command(CLI::App& app);
void add_bench_comm_command(CLI::App& bench);      // `tessel bench comm`, in bench_comm.cpp
void add_bench_generate_command(CLI::App& bench);  // `tessel bench generate`, bench_generate.cpp
void add_data_command(CLI::App& app);              // `tessel data prepare`, in data_command.cpp
void add_init_command(CLI::App& app);              // `tessel init`, in init_command.cpp
void add_tokenize_command(CLI::App& app);          // `tessel tokenize`, in tokenize_command.cpp
void add_generate_command(CLI::App& app);          // `tessel generate`, in generate_command.cpp
void add_eval_command(CLI::App& app);              // `tessel eval`, in eval_command.cpp
void add_quantize_command(CLI::App& app);          // `tessel quantize`, in quantize_command.cpp
void add_train_command(CLI::App& app);             // `tessel train`, in train_command.cpp
void add_schedule_command(CLI::App& app);          // `tessel schedule`, in schedule_command.cpp
void add_report_command(CLI::App& app);            // `tessel report`, in report_command.cpp
void add_bench_train_command(CLI::App& bench);     // `tessel bench train`, in bench_train.cpp
void add_serve_command(CLI::App& app);             // `tessel serve`, in serve_command.cpp
void add_bench_serve_command(CLI::App& bench);     // `tessel bench serve`, in bench_serve.cpp
// `tessel plan` (plan_command.cpp) and its subcommands, each in its own file:
// `tessel plan calibrate` in plan_calibrate_command.cpp, `tessel plan trace` in
// plan_trace_command.cpp.
void add_plan_command(CLI::App& app);
void add_plan_calibrate_command(CLI::App& plan);
void add_plan_trace_command(CLI::App& plan);
void add_plan_shard_command(CLI::App& plan);    // plan_shard_command.cpp
void add_plan_memory_command(CLI::App& plan);   // plan_memory_command.cpp
void add_plan_search_command(CLI::App& plan);   // plan_search_command.cpp
void add_plan_offload_command(CLI::App& plan);  // plan_offload_command.cpp

// Machine limits measured by `tessel bench peak` (bench_command.cpp), printed as JSON lines; other
// bench figures are reported as fractions of them.
struct BenchLimits {
  double gemm_gflops = 0;
  double read_gbs = 0;
};
BenchLimits bench_peak(double budget_s);

// The read-bandwidth probe of bench_peak (a streaming sum over a buffer far larger than the
// caches), holding its buffer so that it can be measured again beside each timed run: on a shared
// host the memory's rate moves between minutes, and a fraction of the floor is only meaningful
// against the rate of the same moments.
class ReadProbe {
 public:
  ReadProbe();
  double gbs(double budget_s);  // median of at least three reads

 private:
  Tensor buffer_;
};

}  // namespace tessel::cli
