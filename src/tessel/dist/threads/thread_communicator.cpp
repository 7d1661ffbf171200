// SPDX-License-Identifier: Apache-2.0
// The in-process backend's calls: each rank computes its own output from every rank's staged
// input, so no rank ever writes another rank's memory. Also ThreadWorld::run.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "tessel/dist/reduce.h"
#include "tessel/dist/threads/thread_world.h"

namespace tessel::dist {

using threads::Contribution;
using threads::Group;
using threads::Message;

namespace {

CommInfo make_info(const Group& g, int rank, const std::string& label) {
  return CommInfo{label, rank, g.size(), g.world_ranks(), "threads"};
}

}  // namespace

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<Group> group, int rank,
                                       std::shared_ptr<RankContext> context,
                                       const std::string& label)
    : ThreadCommunicator(group, rank, context,
                         make_info(*group, rank, context->unique_label(label))) {}

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<Group> group, int rank,
                                       std::shared_ptr<RankContext> context, CommInfo info)
    : Communicator(std::move(info), std::move(context)), group_(std::move(group)) {
  TESSEL_CHECK(rank >= 0 && rank < group_->size(), "ThreadCommunicator: rank ", rank,
               " outside a group of ", group_->size());
}

void ThreadCommunicator::collective(const OpCall& call, const Record& record) {
  const double deadline = deadline_for(record);
  const std::vector<Contribution>& slots = group_->arrive(rank(), info(), call, record, deadline);
  const int n = size(), me = rank();
  auto fail = [&](const std::string& what) {
    std::string msg = std::string(op_kind_name(call.kind)) + " on axis '" + label() + "': " + what;
    group_->world().fail(msg);
    group_->world().throw_failure(info());
  };
  const DType dtype = call.subject().defined() ? call.subject().dtype() : DType::I8;
  const size_t es = dtype_size(dtype);
  auto staged = [&](int r) { return slots[size_t(r)].staged.data(); };
  auto expect_bytes = [&](int r, size_t bytes) {
    size_t got = slots[size_t(r)].staged.size();
    if (got != bytes)
      fail("rank " + std::to_string(r) + " contributed " + std::to_string(got / es) +
           " elements, rank " + std::to_string(me) + " expected " + std::to_string(bytes / es));
  };
  char* out = call.out.defined() ? static_cast<char*>(call.out.data_ptr()) : nullptr;
  switch (call.kind) {
    case OpKind::AllReduce:
    case OpKind::ReduceScatter: {
      const int64_t count = call.out.numel();
      const size_t offset =
          call.kind == OpKind::ReduceScatter ? size_t(me) * size_t(count) * es : 0;
      std::vector<const void*> inputs(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        expect_bytes(r, call.in.nbytes());
        inputs[size_t(r)] = staged(r) + offset;
      }
      reduce_buffers(inputs, out, count, dtype, call.reduce);
      break;
    }
    case OpKind::AllGather: {
      const size_t block = call.in.nbytes();
      for (int r = 0; r < n; ++r) {
        expect_bytes(r, block);
        if (block) std::memcpy(out + size_t(r) * block, staged(r), block);
      }
      break;
    }
    case OpKind::AllGatherV: {
      std::vector<int64_t> displ = displacements(call.counts);
      for (int r = 0; r < n; ++r) {
        expect_bytes(r, size_t(call.counts[size_t(r)]) * es);
        if (call.counts[size_t(r)])
          std::memcpy(out + size_t(displ[size_t(r)]) * es, staged(r),
                      size_t(call.counts[size_t(r)]) * es);
      }
      break;
    }
    case OpKind::AllToAll: {
      const size_t block = call.in.nbytes() / size_t(n);
      for (int r = 0; r < n; ++r) {
        expect_bytes(r, call.in.nbytes());
        if (block) std::memcpy(out + size_t(r) * block, staged(r) + size_t(me) * block, block);
      }
      break;
    }
    case OpKind::AllToAllV: {
      std::vector<int64_t> rdispl = displacements(call.out_counts);
      for (int r = 0; r < n; ++r) {
        const std::vector<int64_t>& sent = slots[size_t(r)].call->counts;
        int64_t k = sent[size_t(me)];
        if (k != call.out_counts[size_t(r)])
          fail("rank " + std::to_string(r) + " sends " + std::to_string(k) + " elements to rank " +
               std::to_string(me) + ", which expects " +
               std::to_string(call.out_counts[size_t(r)]));
        int64_t sdispl = std::accumulate(sent.begin(), sent.begin() + me, int64_t(0));
        if (k)
          std::memcpy(out + size_t(rdispl[size_t(r)]) * es, staged(r) + size_t(sdispl) * es,
                      size_t(k) * es);
      }
      break;
    }
    case OpKind::Broadcast: {
      const int root = call.peer;
      expect_bytes(root, call.out.nbytes());
      if (me != root && call.out.nbytes()) std::memcpy(out, staged(root), call.out.nbytes());
      break;
    }
    case OpKind::Barrier:
    case OpKind::Split:
    case OpKind::Send:
    case OpKind::Recv:
      break;
  }
  group_->depart(me, info(), record, deadline);
}

void ThreadCommunicator::receive(const OpCall& call, const Message& m) const {
  TESSEL_CHECK(m.dtype == call.out.dtype() && m.numel == call.out.numel(), "recv on axis '",
               label(), "': rank ", call.peer, " sent ", m.numel, " elements of ",
               dtype_name(m.dtype), " with tag ", call.tag, ", expected ", call.out.numel(), " of ",
               dtype_name(call.out.dtype()));
  if (!m.bytes.empty()) std::memcpy(call.out.data_ptr(), m.bytes.data(), m.bytes.size());
}

void ThreadCommunicator::execute(const OpCall& call, const Record& record) {
  if (call.kind == OpKind::Send) {
    Message m{call.in.dtype(), call.in.numel(), std::vector<std::byte>(call.in.nbytes())};
    if (!m.bytes.empty()) std::memcpy(m.bytes.data(), call.in.data_ptr(), m.bytes.size());
    group_->mailbox().put(rank(), call.peer, call.tag, std::move(m));
    return;
  }
  if (call.kind == OpKind::Recv) {
    const double deadline = deadline_for(record);
    const double start = RankContext::now_s();
    std::optional<Message> m =
        group_->mailbox().take(call.peer, rank(), call.tag, deadline, group_->world());
    if (!m) {
      if (!group_->world().failure()) {
        group_->world().fail(threads::diagnose_in_process(record, info(), group_->world(),
                                                          RankContext::now_s() - start, deadline));
      }
      group_->world().throw_failure(info());
    }
    receive(call, *m);
    return;
  }
  collective(call, record);
}

WorkPtr ThreadCommunicator::start_p2p(const OpCall& call, const Record& record) {
  if (call.kind == OpKind::Send) {  // sends are buffered: complete when issued
    run_recorded(*this, call, record);
    return completed_work();
  }
  auto poll = [this, call, record] {
    std::optional<Message> m = group_->mailbox().try_take(call.peer, rank(), call.tag);
    if (!m) return false;
    receive(call, *m);
    context().set_state(record, OpState::Done);
    return true;
  };
  auto block = [this, call, record] { run_recorded(*this, call, record); };
  return std::make_shared<DeferredWork>(poll, block);
}

std::shared_ptr<Communicator> ThreadCommunicator::make_lane() {
  return std::shared_ptr<Communicator>(
      new ThreadCommunicator(group_->lane(), rank(), context_ptr(), info()));
}

std::shared_ptr<Communicator> ThreadCommunicator::split_impl(int color, int key,
                                                             const std::string& label,
                                                             const Record& record) {
  const int n = size();
  Tensor mine = from_data<int64_t>({int64_t(color), int64_t(key)}, {2});
  Tensor all = empty({2 * int64_t(n)}, DType::I64);
  OpCall exchange;
  exchange.kind = OpKind::AllGather;
  exchange.in = mine;
  exchange.out = all;
  collective(exchange, record);
  const int64_t* v = all.data<int64_t>();
  std::vector<std::pair<int64_t, int>> members;  // (key, rank) of my color
  for (int r = 0; r < n; ++r)
    if (v[2 * r] == color) members.emplace_back(v[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  std::vector<int> world_ranks;
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    world_ranks.push_back(world_rank_of(members[i].second));
    if (members[i].second == rank()) new_rank = int(i);
  }
  std::shared_ptr<Group> child = group_->child(splits_++, color, world_ranks);
  CommInfo ci{label, new_rank, int(world_ranks.size()), world_ranks, "threads"};
  return std::shared_ptr<Communicator>(new ThreadCommunicator(child, new_rank, context_ptr(), ci));
}

void ThreadWorld::run(int n, const std::function<void(Communicator&)>& fn) {
  TESSEL_CHECK(n >= 1, "ThreadWorld::run: world size ", n, " must be at least 1");
  auto world = std::make_shared<threads::WorldState>(n);
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = std::make_shared<Group>(world, ranks, std::make_shared<threads::Mailbox>());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<RankContext> ctx = world->context_ptr(r);
      auto comm = std::make_shared<ThreadCommunicator>(group, r, ctx, "world");
      try {
        fn(*comm);
        ctx->set_finished();
      } catch (const std::exception& e) {
        world->fail("in-process rank " + std::to_string(r) + ": " + e.what());
      } catch (...) {
        world->fail("in-process rank " + std::to_string(r) + ": unknown exception");
      }
      comm.reset();  // after fail(): queued asynchronous calls see the failure instead of waiting
    });
  }
  for (std::thread& t : threads) t.join();
  if (std::optional<std::string> f = world->failure()) throw Error(*f);
}

CommPtr ThreadWorld::single(std::shared_ptr<RankContext> context) {
  auto world = std::make_shared<threads::WorldState>(std::vector{context});
  auto group =
      std::make_shared<Group>(world, std::vector<int>{0}, std::make_shared<threads::Mailbox>());
  return std::make_shared<ThreadCommunicator>(group, 0, std::move(context), "world");
}

}  // namespace tessel::dist
