// SPDX-License-Identifier: Apache-2.0
// Each call maps to one MPI call. Avg is MPI_SUM followed by a local division; in-place forms use
// MPI_IN_PLACE; the v-variants convert counts and displacements to MPI's int arrays.
#include "tessel/dist/mpi/mpi_communicator.h"

#include "tessel/dist/mpi/mpi_diag.h"
#include "tessel/dist/reduce.h"
#include "tessel/dist/watchdog.h"

namespace tessel::dist {

namespace {

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> ranks(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[size_t(i)] = i;
  MPI_Group_translate_ranks(group, n, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

CommInfo info_of(MPI_Comm comm, const std::string& label) {
  CommInfo info;
  info.label = label;
  MPI_Comm_rank(comm, &info.rank);
  MPI_Comm_size(comm, &info.size);
  info.world_ranks = world_ranks_of(comm);
  info.backend = "mpi";
  return info;
}

void check_received(const MPI_Status& status, const OpCall& call, const std::string& label) {
  int got = 0;
  MPI_Get_count(&status, mpi::datatype(call.out.dtype()), &got);
  TESSEL_CHECK(got == call.out.numel(), "recv on axis '", label, "': rank ", call.peer, " sent ",
               got, " elements with tag ", call.tag, ", expected ", call.out.numel(), " of ",
               dtype_name(call.out.dtype()));
}

}  // namespace

MpiCommunicator::MpiCommunicator(mpi::Comm comm, CommInfo info,
                                 std::shared_ptr<RankContext> context)
    : Communicator(std::move(info), std::move(context)), comm_(std::move(comm)) {}

CommPtr MpiCommunicator::create_world() {
  mpi::ensure_initialized();
  mpi::Comm world = mpi::Comm(MPI_COMM_WORLD).dup("world");
  RankContext& ctx = process_context();
  CommInfo info = info_of(world.get(), ctx.unique_label("world"));
  ctx.set_world_rank(info.rank);
  Watchdog::instance().start(process_context_ptr(), std::make_unique<mpi::MpiDiagChannel>());
  return std::make_shared<MpiCommunicator>(std::move(world), std::move(info),
                                           process_context_ptr());
}

void MpiCommunicator::execute(const OpCall& c, const Record&) {
  const std::string& l = label();
  const std::string_view what = op_kind_name(c.kind);
  MPI_Comm comm = comm_.get();
  auto count = [&](int64_t n) { return mpi::to_count(n, what, l); };
  auto ints = [&](const std::vector<int64_t>& v) {
    std::vector<int> out;
    for (int64_t x : v) out.push_back(count(x));
    return out;
  };
  const DType dt = c.subject().defined() ? c.subject().dtype() : DType::I8;
  const MPI_Datatype type = mpi::datatype(dt);
  switch (c.kind) {
    case OpKind::AllReduce: {
      const void* send = c.in_place() ? MPI_IN_PLACE : c.in.data_ptr();
      mpi::check(MPI_Allreduce(send, c.out.data_ptr(), count(c.out.numel()), type,
                               mpi::reduce_op(dt, c.reduce), comm),
                 what, l);
      if (c.reduce == ReduceOp::Avg) divide_by(c.out.data_ptr(), c.out.numel(), dt, size());
      break;
    }
    case OpKind::ReduceScatter:
      mpi::check(MPI_Reduce_scatter_block(c.in.data_ptr(), c.out.data_ptr(), count(c.out.numel()),
                                          type, mpi::reduce_op(dt, c.reduce), comm),
                 what, l);
      if (c.reduce == ReduceOp::Avg) divide_by(c.out.data_ptr(), c.out.numel(), dt, size());
      break;
    case OpKind::AllGather: {
      const int n = count(c.in.numel());
      const bool in_place = c.in.storage_ptr() == c.out.storage_ptr() &&
                            c.in.offset() == c.out.offset() + int64_t(rank()) * n;
      const void* send = in_place ? MPI_IN_PLACE : c.in.data_ptr();
      mpi::check(MPI_Allgather(send, n, type, c.out.data_ptr(), n, type, comm), what, l);
      break;
    }
    case OpKind::AllGatherV: {
      std::vector<int> counts = ints(c.counts), displ = ints(displacements(c.counts));
      mpi::check(MPI_Allgatherv(c.in.data_ptr(), counts[size_t(rank())], type, c.out.data_ptr(),
                                counts.data(), displ.data(), type, comm),
                 what, l);
      break;
    }
    case OpKind::AllToAll: {
      const void* send = c.in_place() ? MPI_IN_PLACE : c.in.data_ptr();
      const int block = count(c.in.numel() / size());
      mpi::check(MPI_Alltoall(send, block, type, c.out.data_ptr(), block, type, comm), what, l);
      break;
    }
    case OpKind::AllToAllV: {
      std::vector<int> sc = ints(c.counts), sd = ints(displacements(c.counts));
      std::vector<int> rc = ints(c.out_counts), rd = ints(displacements(c.out_counts));
      mpi::check(MPI_Alltoallv(c.in.data_ptr(), sc.data(), sd.data(), type, c.out.data_ptr(),
                               rc.data(), rd.data(), type, comm),
                 what, l);
      break;
    }
    case OpKind::Broadcast:
      mpi::check(MPI_Bcast(c.in.data_ptr(), count(c.in.numel()), type, c.peer, comm), what, l);
      break;
    case OpKind::Send:
      mpi::check(MPI_Send(c.in.data_ptr(), count(c.in.numel()), type, c.peer, c.tag, comm), what,
                 l);
      break;
    case OpKind::Recv: {
      MPI_Status status;
      mpi::check(
          MPI_Recv(c.out.data_ptr(), count(c.out.numel()), type, c.peer, c.tag, comm, &status),
          what, l);
      check_received(status, c, l);
      break;
    }
    case OpKind::Barrier:
      mpi::check(MPI_Barrier(comm), what, l);
      break;
    case OpKind::Split:
      TESSEL_FAIL("split is not executed as a call");
  }
}

WorkPtr MpiCommunicator::start_p2p(const OpCall& call, const Record& record) {
  const std::string& l = label();
  const std::string_view what = op_kind_name(call.kind);
  auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
  if (call.kind == OpKind::Send) {
    mpi::check(
        MPI_Isend(call.in.data_ptr(), mpi::to_count(call.in.numel(), what, l),
                  mpi::datatype(call.in.dtype()), call.peer, call.tag, comm_.get(), request.get()),
        what, l);
  } else {
    mpi::check(
        MPI_Irecv(call.out.data_ptr(), mpi::to_count(call.out.numel(), what, l),
                  mpi::datatype(call.out.dtype()), call.peer, call.tag, comm_.get(), request.get()),
        what, l);
  }
  auto ctx = context_ptr();
  auto info = info_ptr();
  const double deadline = deadline_for(record);
  auto finish = [call, record, ctx, info](const MPI_Status& status) {
    if (call.kind == OpKind::Recv) check_received(status, call, info->label);
    ctx->set_state(record, OpState::Done);
  };
  auto poll = [request, finish, what, info] {
    int done = 0;
    MPI_Status status;
    mpi::check(MPI_Test(request.get(), &done, &status), what, info->label);
    if (done) finish(status);
    return done != 0;
  };
  auto block = [request, finish, what, info, ctx, record, deadline] {
    MPI_Status status;
    {
      WaitScope wait(*ctx, record, info, deadline);
      mpi::check(MPI_Wait(request.get(), &status), what, info->label);
    }
    finish(status);
  };
  return std::make_shared<DeferredWork>(poll, block);
}

std::shared_ptr<Communicator> MpiCommunicator::make_lane() {
  return std::make_shared<MpiCommunicator>(comm_.dup(label()), info(), context_ptr());
}

std::shared_ptr<Communicator> MpiCommunicator::split_impl(int color, int key,
                                                          const std::string& label, const Record&) {
  MPI_Comm out = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(comm_.get(), color, key, &out), "split", this->label());
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  mpi::Comm owned(out);
  CommInfo info = info_of(out, label);
  return std::make_shared<MpiCommunicator>(std::move(owned), std::move(info), context_ptr());
}

}  // namespace tessel::dist
