// SPDX-License-Identifier: Apache-2.0
// MPI set-up shared by the MPI backend: one MPI_Init_thread with MPI_THREAD_MULTIPLE (the progress
// lanes and the watchdog call MPI while the caller may be inside a blocking collective), finalise
// at exit, error codes turned into tessel::Error, dtype and reduction mappings (bf16/f16 through
// user-defined operations that combine in f32), and an owning MPI_Comm handle.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "tessel/core/dtype.h"
#include "tessel/dist/op_call.h"

namespace tessel::dist::mpi {

// Initialises MPI once, or checks that whoever did provided MPI_THREAD_MULTIPLE. When tessel
// initialised MPI, finalize() runs at exit.
void ensure_initialized();
// Waits for every rank to arrive (so no rank is gone while another may still abort the job), stops
// the watchdog, frees tessel's MPI objects and, if tessel initialised MPI, finalises it.
// Idempotent; communicators still alive afterwards no longer touch MPI.
void finalize();
bool is_active();  // initialised and not yet finalised

// Throws Error("<what> on '<label>': <MPI error string>") when rc != MPI_SUCCESS.
void check(int rc, std::string_view what, const std::string& label);
// MPI counts are int: refuses larger element counts with a clear message.
int to_count(int64_t n, std::string_view what, const std::string& label);

MPI_Datatype datatype(DType dtype);
// Sum or Max (Avg is a sum followed by a division); bf16/f16 get tessel's user-defined operations.
MPI_Op reduce_op(DType dtype, ReduceOp op);

// An owned MPI_Comm, freed on destruction while MPI is active (never MPI_COMM_WORLD/SELF).
class Comm {
 public:
  Comm() = default;
  explicit Comm(MPI_Comm comm) : comm_(comm) {}
  ~Comm();
  Comm(Comm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  MPI_Comm get() const { return comm_; }
  // Collective over this communicator; errors are returned, not fatal.
  Comm dup(const std::string& label) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace tessel::dist::mpi
