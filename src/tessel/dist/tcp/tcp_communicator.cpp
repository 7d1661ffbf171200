// SPDX-License-Identifier: Apache-2.0
// The tcp backend's calls over the mesh. Every collective message of a communicator uses its
// channel and the tag of its kind of call: messages between two ranks arrive in order, and every
// member issues the collectives of one channel in the same order, so they match without sequence
// numbers.
#include "tessel/dist/tcp/tcp_communicator.h"

#include <algorithm>
#include <cstring>

#include "tessel/dist/reduce.h"

namespace tessel::dist {

namespace {

// A receive's payload into its tensor, checked like MPI's receive count.
void deliver(const OpCall& call, const std::string& label, const tcp::Message& m) {
  TESSEL_CHECK(m.dtype == call.out.dtype() && m.bytes == call.out.nbytes(), "recv on axis '", label,
               "': rank ", call.peer, " sent ", m.bytes / dtype_size(m.dtype), " elements of ",
               dtype_name(m.dtype), " with tag ", call.tag, ", expected ", call.out.numel(), " of ",
               dtype_name(call.out.dtype()));
  if (m.bytes) std::memcpy(call.out.data_ptr(), m.data.get(), m.bytes);
}

}  // namespace

TcpCommunicator::TcpCommunicator(std::shared_ptr<tcp::Transport> transport, uint64_t channel,
                                 CommInfo info, std::shared_ptr<RankContext> context)
    : Communicator(std::move(info), std::move(context)),
      transport_(std::move(transport)),
      channel_(channel) {}

void TcpCommunicator::put(int r, const void* data, size_t bytes, DType dtype, int32_t tag) {
  transport_->send(world_rank_of(r), channel_, tag == kCurrent ? tag_ : tag, dtype, data, bytes);
}

tcp::Message TcpCommunicator::get(int r, int32_t tag) {
  return transport_->take(world_rank_of(r), channel_, tag == kCurrent ? tag_ : tag);
}

void TcpCommunicator::get_into(int r, void* dst, size_t bytes, std::string_view what, int32_t tag) {
  tcp::Message m = get(r, tag);
  if (m.bytes != bytes) {
    const size_t es = dtype_size(m.dtype);
    TESSEL_FAIL(what, " on axis '", label(), "': rank ", r, " sent ", m.bytes / es, " elements of ",
                dtype_name(m.dtype), " but rank ", rank(), " expected ", bytes / es,
                " (the ranks called it with different sizes)");
  }
  if (bytes) std::memcpy(dst, m.data.get(), bytes);
}

void TcpCommunicator::reduce(const OpCall& c, bool scatter) {
  const int n = size(), me = rank();
  const DType dt = c.in.dtype();
  const size_t es = dtype_size(dt);
  const int64_t total = c.in.numel();
  if (!scatter && c.in.nbytes() * size_t(n - 1) <= kOnePhaseBytes) {
    // Small: everyone sends everything to everyone and reduces all n inputs in rank order, so the
    // latency is one exchange instead of two, with the same bitwise result on every rank.
    for (int k = 1; k < n; ++k) put((me + k) % n, c.in.data_ptr(), c.in.nbytes(), dt);
    std::vector<tcp::Message> got(static_cast<size_t>(n));
    std::vector<const void*> inputs(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        inputs[size_t(p)] = c.in.data_ptr();
        continue;
      }
      got[size_t(p)] = get(p);
      TESSEL_CHECK(got[size_t(p)].bytes == c.in.nbytes(), op_kind_name(c.kind), " on axis '",
                   label(), "': rank ", p, " contributed ", got[size_t(p)].bytes / es,
                   " elements, rank ", me, " expected ", total,
                   " (the ranks called it with different sizes)");
      inputs[size_t(p)] = got[size_t(p)].data.get();
    }
    reduce_buffers(inputs, c.out.data_ptr(), total, dt, c.reduce);
    return;
  }
  // Block b of the input: [first(b), first(b + 1)).
  auto first = [&](int b) { return scatter ? b * c.out.numel() : int64_t(b) * total / n; };
  auto count = [&](int b) { return first(b + 1) - first(b); };
  const char* in = static_cast<const char*>(c.in.data_ptr());
  char* out = static_cast<char*>(c.out.data_ptr());
  for (int k = 1; k < n; ++k) {
    const int p = (me + k) % n;
    put(p, in + size_t(first(p)) * es, size_t(count(p)) * es, dt);
  }
  std::vector<tcp::Message> got(static_cast<size_t>(n));
  std::vector<const void*> inputs(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == me) {
      inputs[size_t(p)] = in + size_t(first(me)) * es;
      continue;
    }
    got[size_t(p)] = get(p);
    TESSEL_CHECK(got[size_t(p)].bytes == size_t(count(me)) * es, op_kind_name(c.kind), " on axis '",
                 label(), "': rank ", p, " contributed ", got[size_t(p)].bytes / es,
                 " elements to block ", me, ", rank ", me, " expected ", count(me),
                 " (the ranks called it with different sizes)");
    inputs[size_t(p)] = got[size_t(p)].data.get();
  }
  char* mine = scatter ? out : out + size_t(first(me)) * es;
  reduce_buffers(inputs, mine, count(me), dt, c.reduce);
  if (scatter) return;
  for (int k = 1; k < n; ++k) put((me + k) % n, mine, size_t(count(me)) * es, dt);
  for (int p = 0; p < n; ++p)
    if (p != me)
      get_into(p, out + size_t(first(p)) * es, size_t(count(p)) * es, op_kind_name(c.kind));
}

void TcpCommunicator::gather(const OpCall& c, const std::vector<int64_t>& counts) {
  const int n = size(), me = rank();
  const DType dt = c.in.dtype();
  const size_t es = dtype_size(dt);
  const std::vector<int64_t> displ = displacements(counts);
  char* out = static_cast<char*>(c.out.data_ptr());
  const size_t mine = size_t(counts[size_t(me)]) * es;
  for (int k = 1; k < n; ++k) put((me + k) % n, c.in.data_ptr(), mine, dt);
  char* slot = out + size_t(displ[size_t(me)]) * es;
  if (mine && slot != c.in.data_ptr()) std::memmove(slot, c.in.data_ptr(), mine);
  for (int p = 0; p < n; ++p)
    if (p != me)
      get_into(p, out + size_t(displ[size_t(p)]) * es, size_t(counts[size_t(p)]) * es,
               op_kind_name(c.kind));
}

void TcpCommunicator::all_to_all(const OpCall& c, const std::vector<int64_t>& in_counts,
                                 const std::vector<int64_t>& out_counts) {
  const int n = size(), me = rank();
  const DType dt = c.in.dtype();
  const size_t es = dtype_size(dt);
  const std::vector<int64_t> sd = displacements(in_counts), rd = displacements(out_counts);
  const char* in = static_cast<const char*>(c.in.data_ptr());
  char* out = static_cast<char*>(c.out.data_ptr());
  TESSEL_CHECK(in_counts[size_t(me)] == out_counts[size_t(me)], op_kind_name(c.kind), " on axis '",
               label(), "': rank ", me, " sends ", in_counts[size_t(me)],
               " elements to itself but expects ", out_counts[size_t(me)]);
  // Every block leaves before any arrives in `out`, which makes the in-place form safe.
  for (int k = 1; k < n; ++k) {
    const int p = (me + k) % n;
    put(p, in + size_t(sd[size_t(p)]) * es, size_t(in_counts[size_t(p)]) * es, dt);
  }
  if (in_counts[size_t(me)] &&
      in + sd[size_t(me)] * int64_t(es) != out + rd[size_t(me)] * int64_t(es))
    std::memmove(out + size_t(rd[size_t(me)]) * es, in + size_t(sd[size_t(me)]) * es,
                 size_t(in_counts[size_t(me)]) * es);
  for (int p = 0; p < n; ++p)
    if (p != me)
      get_into(p, out + size_t(rd[size_t(p)]) * es, size_t(out_counts[size_t(p)]) * es,
               op_kind_name(c.kind));
}

void TcpCommunicator::broadcast(const OpCall& c) {
  const int root = c.peer;
  if (rank() == root) {
    for (int k = 1; k < size(); ++k)
      put((root + k) % size(), c.in.data_ptr(), c.in.nbytes(), c.in.dtype());
  } else {
    get_into(root, c.in.data_ptr(), c.in.nbytes(), "broadcast");
  }
}

void TcpCommunicator::barrier() {
  for (int k = 1; k < size(); ++k) put((rank() + k) % size(), nullptr, 0, DType::I8);
  for (int p = 0; p < size(); ++p)
    if (p != rank()) get_into(p, nullptr, 0, "barrier");
}

void TcpCommunicator::execute(const OpCall& c, const Record& record) {
  try {
    run_call(c);
  } catch (const tcp::PeerLost& e) {
    throw tcp::PeerLost(describe(record) + " on axis '" + label() + "' failed: " + e.what());
  }
}

void TcpCommunicator::run_call(const OpCall& c) {
  const int n = size();
  tag_ = tcp::collective_tag(uint8_t(c.kind));
  switch (c.kind) {
    case OpKind::AllReduce:
      reduce(c, false);
      break;
    case OpKind::ReduceScatter:
      reduce(c, true);
      break;
    case OpKind::AllGather:
      gather(c, std::vector<int64_t>(size_t(n), c.in.numel()));
      break;
    case OpKind::AllGatherV:
      gather(c, c.counts);
      break;
    case OpKind::AllToAll: {
      std::vector<int64_t> blocks(size_t(n), c.in.numel() / n);
      all_to_all(c, blocks, blocks);
      break;
    }
    case OpKind::AllToAllV:
      all_to_all(c, c.counts, c.out_counts);
      break;
    case OpKind::Broadcast:
      broadcast(c);
      break;
    case OpKind::Send:
      put(c.peer, c.in.data_ptr(), c.in.nbytes(), c.in.dtype(), c.tag);
      break;
    case OpKind::Recv:
      deliver(c, label(), get(c.peer, c.tag));
      break;
    case OpKind::Barrier:
      barrier();
      break;
    case OpKind::Split:
      TESSEL_FAIL("split is not executed as a call");
  }
}

WorkPtr TcpCommunicator::start_p2p(const OpCall& call, const Record& record) {
  auto ctx = context_ptr();
  if (call.kind == OpKind::Send) {
    // The peer's reader drains every frame, so a send completes without the matching receive.
    try {
      put(call.peer, call.in.data_ptr(), call.in.nbytes(), call.in.dtype(), call.tag);
    } catch (...) {
      ctx->set_state(record, OpState::Failed);
      throw;
    }
    ctx->set_state(record, OpState::Done);
    return completed_work();
  }
  auto transport = transport_;
  auto info = info_ptr();
  const uint64_t channel = channel_;
  const int from = world_rank_of(call.peer);
  const double deadline = deadline_for(record);
  auto poll = [=] {
    std::optional<tcp::Message> m = transport->try_take(from, channel, call.tag);
    if (!m) return false;
    deliver(call, info->label, *m);
    ctx->set_state(record, OpState::Done);
    return true;
  };
  auto block = [=] {
    tcp::Message m;
    {
      WaitScope wait(*ctx, record, info, deadline);
      m = transport->take(from, channel, call.tag);
    }
    deliver(call, info->label, m);
    ctx->set_state(record, OpState::Done);
  };
  return std::make_shared<DeferredWork>(poll, block);
}

std::shared_ptr<Communicator> TcpCommunicator::make_lane() {
  return std::make_shared<TcpCommunicator>(transport_, tcp::derive_channel(channel_, ~0ull, 0),
                                           info(), context_ptr());
}

std::shared_ptr<Communicator> TcpCommunicator::split_impl(int color, int key,
                                                          const std::string& label, const Record&) {
  const int n = size(), me = rank();
  tag_ = tcp::collective_tag(uint8_t(OpKind::Split));
  std::vector<int32_t> all(size_t(2 * n));
  all[size_t(2 * me)] = color;
  all[size_t(2 * me + 1)] = key;
  for (int k = 1; k < n; ++k) put((me + k) % n, &all[size_t(2 * me)], 8, DType::I32);
  for (int p = 0; p < n; ++p)
    if (p != me) get_into(p, &all[size_t(2 * p)], 8, "split");
  std::vector<int> members;
  for (int p = 0; p < n; ++p)
    if (all[size_t(2 * p)] == color) members.push_back(p);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[size_t(2 * a + 1)] < all[size_t(2 * b + 1)]; });
  CommInfo info;
  info.label = label;
  info.size = int(members.size());
  info.backend = "tcp";
  for (int i = 0; i < info.size; ++i) {
    if (members[size_t(i)] == me) info.rank = i;
    info.world_ranks.push_back(world_rank_of(members[size_t(i)]));
  }
  ++splits_;
  return std::make_shared<TcpCommunicator>(
      transport_, tcp::derive_channel(channel_, splits_, uint64_t(uint32_t(color))),
      std::move(info), context_ptr());
}

}  // namespace tessel::dist
