// SPDX-License-Identifier: Apache-2.0
// MPI initialisation and finalisation, error checking, dtype/op mapping, owned communicators.
#include "tessel/dist/mpi/mpi_runtime.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tessel/core/error.h"
#include "tessel/dist/diagnosis.h"
#include "tessel/dist/reduce.h"
#include "tessel/dist/watchdog.h"

namespace tessel::dist::mpi {

namespace {

struct Runtime {
  std::mutex mutex;
  bool initialized_here = false;
  bool ready = false;
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, f16_sum = MPI_OP_NULL,
         f16_max = MPI_OP_NULL;
  MPI_Comm exit_comm = MPI_COMM_NULL;
};

Runtime& runtime() {
  static Runtime* r = new Runtime();  // outlives every static that might call finalize()
  return *r;
}

template <DType D, ReduceOp Op>
void user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  combine_into(in, inout, *len, D, Op);
}

void finalize_at_exit() {
  finalize();
}

// Every rank waits for the others before finalising, with the watchdog still answering and
// watching: a rank that ends normally while another is about to abort the job would otherwise be
// gone already (Open MPI 4.1's mpirun can crash or hang handling an abort after some ranks have
// exited), and peers stuck waiting for this rank learn that it is "in barrier #1 on 'shutdown'".
// The wait has the first-call deadline; the watchdog aborts the job with a diagnosis after it.
void exit_barrier(MPI_Comm comm) {
  auto info = std::make_shared<CommInfo>();
  info->label = "shutdown";
  MPI_Comm_rank(comm, &info->rank);
  MPI_Comm_size(comm, &info->size);
  for (int r = 0; r < info->size; ++r) info->world_ranks.push_back(r);  // a dup of the world
  info->backend = "mpi";
  OpCall call;
  call.kind = OpKind::Barrier;
  RankContext& ctx = process_context();
  Record record = ctx.issue(*ctx.label_state(info->label), call);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm, &request) != MPI_SUCCESS) return;
  WaitScope wait(ctx, record, info, comm_timeouts().first_s);
  for (;;) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

bool is_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void ensure_initialized() {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  if (rt.ready) return;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  TESSEL_CHECK(!fin, "MPI was already finalised in this process; it cannot be initialised again");
  int provided = 0;
  if (init) {
    MPI_Query_thread(&provided);
  } else {
    // A rank's asynchronous collectives wait on its progress lane's thread, beside compute
    // threads that normally fill the cores. Open MPI's default wait polls without yielding, so a
    // lane whose peer has not arrived yet takes half a core from compute for that long (ZeRO-3's
    // prefetched gathers, 2 ranks on 2 cores: steps 1.3-1.5x longer, docs/PARALLEL.md). Yielding
    // costs a system call per idle poll when nothing else wants the core. A user's value stays.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    TESSEL_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed with code ", rc);
    rt.initialized_here = true;
    std::atexit(finalize_at_exit);
  }
  TESSEL_CHECK(provided == MPI_THREAD_MULTIPLE, "MPI provides thread level ", provided,
               " but tessel needs MPI_THREAD_MULTIPLE (", int(MPI_THREAD_MULTIPLE),
               "): asynchronous collectives and the watchdog call MPI from their own threads");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &rt.exit_comm);
  MPI_Op_create(&user_op<DType::BF16, ReduceOp::Sum>, 1, &rt.bf16_sum);
  MPI_Op_create(&user_op<DType::BF16, ReduceOp::Max>, 1, &rt.bf16_max);
  MPI_Op_create(&user_op<DType::F16, ReduceOp::Sum>, 1, &rt.f16_sum);
  MPI_Op_create(&user_op<DType::F16, ReduceOp::Max>, 1, &rt.f16_max);
  rt.ready = true;
}

void finalize() {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  if (!rt.ready || !is_active()) {
    Watchdog::instance().stop();
    return;
  }
  exit_barrier(rt.exit_comm);
  Watchdog::instance().stop();
  for (MPI_Op* op : {&rt.bf16_sum, &rt.bf16_max, &rt.f16_sum, &rt.f16_max})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  MPI_Comm_free(&rt.exit_comm);
  rt.ready = false;
  if (rt.initialized_here) MPI_Finalize();
}

void check(int rc, std::string_view what, const std::string& label) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  TESSEL_FAIL(what, " on axis '", label, "' failed in MPI: ", std::string(text, size_t(len)));
}

int to_count(int64_t n, std::string_view what, const std::string& label) {
  TESSEL_CHECK(n <= INT_MAX, what, " on axis '", label, "': ", n,
               " elements exceed MPI's int count limit ", INT_MAX, "; split the tensor");
  return int(n);
}

MPI_Datatype datatype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;
    case DType::I8:
      return MPI_INT8_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
  }
  TESSEL_FAIL("mpi: no datatype for dtype ", int(dtype));
}

MPI_Op reduce_op(DType dtype, ReduceOp op) {
  const bool max = op == ReduceOp::Max;
  Runtime& rt = runtime();
  if (dtype == DType::BF16) return max ? rt.bf16_max : rt.bf16_sum;
  if (dtype == DType::F16) return max ? rt.f16_max : rt.f16_sum;
  return max ? MPI_MAX : MPI_SUM;
}

Comm::~Comm() {
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && is_active())
    MPI_Comm_free(&comm_);
}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    Comm tmp(std::move(*this));
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

Comm Comm::dup(const std::string& label) const {
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_dup(comm_, &out), "communicator dup", label);
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return Comm(out);
}

}  // namespace tessel::dist::mpi
