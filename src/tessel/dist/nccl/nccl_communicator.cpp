// SPDX-License-Identifier: Apache-2.0
// The NCCL backend (built when TESSEL_CUDA is ON). Every call is enqueued on the communicator's
// stream; a blocking call then polls its completion event and NCCL's asynchronous error, so the
// process watchdog can still end a hang (NCCL communicators are aborted, never destroyed, after an
// error). Bootstrap as in the NCCL guide: rank 0's unique id broadcast over a CPU communicator.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "tessel/dist/nccl/nccl.h"
#include "tessel/dist/world.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::dist {

namespace {

void check_cuda(cudaError_t e, std::string_view what, const std::string& label) {
  if (e != cudaSuccess)
    TESSEL_FAIL("nccl: ", what, " on axis '", label, "': CUDA error ", cudaGetErrorName(e), ": ",
                cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, std::string_view what, const std::string& label) {
  if (r != ncclSuccess && r != ncclInProgress)
    TESSEL_FAIL("nccl: ", what, " on axis '", label, "' failed: ", ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I8:
      return ncclInt8;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
  }
  TESSEL_FAIL("nccl: no datatype for dtype ", int(dtype));
}

// On one rank the average is the sum. Asking NCCL for ncclAvg there is also wrong in practice: its
// one-rank out-of-place average left every element past the first 2^20 unwritten (seen on an H200
// with NCCL 2.28.9, tests/dist/mpi/nccl_gpu_main.cpp), while ncclSum is a plain copy.
ncclRedOp_t nccl_op(ReduceOp op, int ranks) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ranks == 1 ? ncclSum : ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

// Polls an event until it completes; an asynchronous NCCL error aborts the communicator (and marks
// it, so that its destructor does not destroy it a second time).
void wait_event(cudaEvent_t event, ncclComm_t comm, std::atomic<bool>& aborted,
                const std::string& label) {
  for (;;) {
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, "wait", label);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      if (!aborted.exchange(true)) ncclCommAbort(comm);
      TESSEL_FAIL("nccl: asynchronous error on axis '", label, "': ", ncclGetErrorString(async),
                  "; the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

char* bytes(const Tensor& t) {
  return static_cast<char*>(device_data(t));
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, CommInfo info)
      : Communicator(std::move(info), process_context_ptr()), comm_(comm), device_(device) {
    check_cuda(cudaSetDevice(device_), "set device", label());
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream", label());
    check_cuda(cudaMalloc(&scratch_, sizeof(float)), "barrier buffer", label());
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
    if (!aborted_->load()) ncclCommDestroy(comm_);
  }
  std::string_view backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

 protected:
  void execute(const OpCall& call, const Record&) override {
    cudaEvent_t event = enqueue(call);
    wait_event(event, comm_, *aborted_, label());
    cudaEventDestroy(event);
  }

  WorkPtr start(const OpCall& call, const Record& record) override {
    auto event = std::make_shared<cudaEvent_t>(enqueue(call));
    auto ctx = context_ptr();
    auto info = info_ptr();
    const double deadline = deadline_for(record);
    ncclComm_t comm = comm_;
    auto aborted = aborted_;
    auto finish = [event, ctx, record] {
      cudaEventDestroy(*event);
      ctx->set_state(record, OpState::Done);
    };
    auto poll = [event, finish, info] {
      cudaError_t e = cudaEventQuery(*event);
      if (e == cudaErrorNotReady) return false;
      check_cuda(e, "test", info->label);
      finish();
      return true;
    };
    auto block = [event, finish, info, ctx, record, deadline, comm, aborted] {
      {
        WaitScope wait(*ctx, record, info, deadline);
        wait_event(*event, comm, *aborted, info->label);
      }
      finish();
    };
    return std::make_shared<DeferredWork>(poll, block);
  }
  WorkPtr start_p2p(const OpCall& call, const Record& record) override {
    return start(call, record);
  }
  std::shared_ptr<Communicator> make_lane() override {
    TESSEL_FAIL("nccl: calls are stream-ordered; there is no progress lane");
  }
  std::shared_ptr<Communicator> split_impl(int color, int key, const std::string& label,
                                           const Record& record) override;

 private:
  cudaEvent_t enqueue(const OpCall& c);
  void copy_async(void* dst, const void* src, size_t n) {
    if (n)
      check_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_), "copy", label());
  }

  ncclComm_t comm_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  int device_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
};

cudaEvent_t NcclCommunicator::enqueue(const OpCall& c) {
  const std::string& l = label();
  const std::string_view what = op_kind_name(c.kind);
  check_cuda(cudaSetDevice(device_), "set device", l);
  const DType dt = c.subject().defined() ? c.subject().dtype() : DType::F32;
  const ncclDataType_t type = nccl_type(dt);
  const size_t es = dtype_size(dt);
  const int n = size(), me = rank();
  switch (c.kind) {
    case OpKind::AllReduce:
      check_nccl(ncclAllReduce(device_data(c.in), device_data(c.out), size_t(c.out.numel()), type,
                               nccl_op(c.reduce, n), comm_, stream_),
                 what, l);
      break;
    case OpKind::ReduceScatter:
      check_nccl(ncclReduceScatter(device_data(c.in), device_data(c.out), size_t(c.out.numel()),
                                   type, nccl_op(c.reduce, n), comm_, stream_),
                 what, l);
      break;
    case OpKind::AllGather:
      check_nccl(ncclAllGather(device_data(c.in), device_data(c.out), size_t(c.in.numel()), type,
                               comm_, stream_),
                 what, l);
      break;
    case OpKind::AllGatherV: {  // NCCL has no gatherv: one broadcast per rank, fused in a group
      std::vector<int64_t> displ = displacements(c.counts);
      check_nccl(ncclGroupStart(), what, l);
      for (int r = 0; r < n; ++r) {
        char* dst = bytes(c.out) + size_t(displ[size_t(r)]) * es;
        const void* src = r == me ? device_data(c.in) : dst;
        check_nccl(ncclBroadcast(src, dst, size_t(c.counts[size_t(r)]), type, r, comm_, stream_),
                   what, l);
      }
      check_nccl(ncclGroupEnd(), what, l);
      break;
    }
    case OpKind::AllToAll:
    case OpKind::AllToAllV: {
      std::vector<int64_t> sc = c.counts, rc = c.out_counts;
      if (c.kind == OpKind::AllToAll) {
        sc.assign(size_t(n), c.in.numel() / n);
        rc = sc;
      }
      std::vector<int64_t> sd = displacements(sc), rd = displacements(rc);
      const char* in = bytes(c.in);
      void* staged = nullptr;
      if (c.in_place()) {  // send/recv pairs would overwrite blocks not yet sent
        check_cuda(cudaMallocAsync(&staged, c.in.nbytes(), stream_), "staging buffer", l);
        copy_async(staged, in, c.in.nbytes());
        in = static_cast<const char*>(staged);
      }
      check_nccl(ncclGroupStart(), what, l);
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        check_nccl(ncclSend(in + size_t(sd[size_t(r)]) * es, size_t(sc[size_t(r)]), type, r, comm_,
                            stream_),
                   what, l);
        check_nccl(ncclRecv(bytes(c.out) + size_t(rd[size_t(r)]) * es, size_t(rc[size_t(r)]), type,
                            r, comm_, stream_),
                   what, l);
      }
      check_nccl(ncclGroupEnd(), what, l);
      copy_async(bytes(c.out) + size_t(rd[size_t(me)]) * es, in + size_t(sd[size_t(me)]) * es,
                 size_t(sc[size_t(me)]) * es);
      if (staged) check_cuda(cudaFreeAsync(staged, stream_), "staging buffer", l);
      break;
    }
    case OpKind::Broadcast:
      check_nccl(ncclBroadcast(device_data(c.in), device_data(c.in), size_t(c.in.numel()), type,
                               c.peer, comm_, stream_),
                 what, l);
      break;
    case OpKind::Send:  // NCCL has no tags: messages between two ranks match in issue order
      check_nccl(ncclSend(device_data(c.in), size_t(c.in.numel()), type, c.peer, comm_, stream_),
                 what, l);
      break;
    case OpKind::Recv:
      check_nccl(ncclRecv(device_data(c.out), size_t(c.out.numel()), type, c.peer, comm_, stream_),
                 what, l);
      break;
    case OpKind::Barrier:
      check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), what,
                 l);
      break;
    case OpKind::Split:
      TESSEL_FAIL("split is not executed as a call");
  }
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event", l);
  check_cuda(cudaEventRecord(event, stream_), "event", l);
  return event;
}

std::shared_ptr<Communicator> NcclCommunicator::split_impl(int color, int key,
                                                           const std::string& label,
                                                           const Record&) {
  // Members and their world ranks: gather (color, key, world rank) through NCCL itself.
  const int n = size();
  int64_t mine[3] = {color, key, world_rank_of(rank())};
  std::vector<int64_t> all(3 * size_t(n));
  void* dev = nullptr;
  check_cuda(cudaMalloc(&dev, all.size() * sizeof(int64_t)), "split buffer", this->label());
  check_cuda(cudaMemcpy(static_cast<int64_t*>(dev) + 3 * rank(), mine, sizeof(mine),
                        cudaMemcpyHostToDevice),
             "split", this->label());
  OpCall gather;
  gather.kind = OpKind::AllGather;
  gather.in = cuda_tensor_view(static_cast<int64_t*>(dev) + 3 * rank(), {3}, DType::I64, device_);
  gather.out = cuda_tensor_view(dev, {3 * int64_t(n)}, DType::I64, device_);
  cudaEvent_t event = enqueue(gather);
  wait_event(event, comm_, *aborted_, this->label());
  cudaEventDestroy(event);
  check_cuda(cudaMemcpy(all.data(), dev, all.size() * sizeof(int64_t), cudaMemcpyDeviceToHost),
             "split", this->label());
  cudaFree(dev);
  std::vector<std::pair<int64_t, int>> members;
  for (int r = 0; r < n; ++r)
    if (all[3 * size_t(r)] == color) members.emplace_back(all[3 * size_t(r) + 1], r);
  std::sort(members.begin(), members.end());
  CommInfo info{label, 0, int(members.size()), {}, "nccl"};
  for (size_t i = 0; i < members.size(); ++i) {
    info.world_ranks.push_back(int(all[3 * size_t(members[i].second) + 2]));
    if (members[i].second == rank()) info.rank = int(i);
  }
  ncclComm_t out = nullptr;
  check_nccl(ncclCommSplit(comm_, color, key, &out, nullptr), "split", this->label());
  return std::make_shared<NcclCommunicator>(out, device_, std::move(info));
}

}  // namespace

bool nccl_compiled_in() {
  return true;
}

CommPtr make_nccl_communicator(Communicator& bootstrap, int device) {
  const std::string& l = bootstrap.label();
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "counting CUDA devices", l);
  TESSEL_CHECK(count > 0, "nccl: no CUDA device is visible (CUDA_VISIBLE_DEVICES?) on axis '", l,
               "'");
  if (device < 0) device = launch_info().local_rank % count;
  TESSEL_CHECK(device < count, "nccl: device ", device, " requested but only ", count, " visible");
  check_cuda(cudaSetDevice(device), "set device", l);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "unique id", l);
  Tensor buf = empty({int64_t(sizeof(id))}, DType::I8);
  std::memcpy(buf.data_ptr(), &id, sizeof(id));
  bootstrap.broadcast(buf, 0);
  std::memcpy(&id, buf.data_ptr(), sizeof(id));
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
  const int local = launch_info().local_size;
  TESSEL_CHECK(init != ncclInvalidUsage || local <= count, "nccl: init on axis '", l,
               "' failed: invalid usage; this node runs ", local, " ranks but this process sees ",
               count,
               " CUDA device(s), and NCCL refuses two ranks on one GPU (give each rank its "
               "own GPU, e.g. with CUDA_VISIBLE_DEVICES)");
  check_nccl(init, "init", l);
  CommInfo info = bootstrap.info();
  info.label = process_context().unique_label(l + "/nccl");
  info.backend = "nccl";
  return std::make_shared<NcclCommunicator>(comm, device, std::move(info));
}

}  // namespace tessel::dist
