// SPDX-License-Identifier: Apache-2.0
// Start-up and shut-down of the tcp world.
#include "tessel/dist/tcp/tcp_world.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "tessel/dist/diagnosis.h"
#include "tessel/dist/tcp/tcp_communicator.h"
#include "tessel/dist/tcp/tcp_diag.h"
#include "tessel/dist/watchdog.h"

namespace tessel::dist::tcp {

namespace {

struct Runtime {
  std::mutex mutex;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<StoreClient> store;
  std::shared_ptr<Transport> transport;
  std::atomic<bool> active{false};  // read without the mutex by abort paths
};

Runtime& runtime() {
  static Runtime* r = new Runtime();  // outlives every static that might call finalize()
  return *r;
}

void finalize_at_exit() {
  finalize();
}

// Every rank waits for the others before closing, with the watchdog still answering: a rank that
// ends while a peer still waits for it in a collective is then named as "in barrier #1 on
// 'shutdown'" instead of looking like a crash.
void exit_barrier(Transport& t) {
  auto info = std::make_shared<CommInfo>();
  info->label = "shutdown";
  info->rank = t.rank();
  info->size = t.size();
  for (int r = 0; r < t.size(); ++r) info->world_ranks.push_back(r);
  info->backend = "tcp";
  OpCall call;
  call.kind = OpKind::Barrier;
  RankContext& ctx = process_context();
  Record record = ctx.issue(*ctx.label_state(info->label), call);
  WaitScope wait(ctx, record, info, comm_timeouts().first_s);
  for (int p = 0; p < t.size(); ++p)
    if (p != t.rank()) t.send(p, kShutdownChannel, kCollectiveTag, DType::I8, nullptr, 0);
  for (int p = 0; p < t.size(); ++p)
    if (p != t.rank()) t.take(p, kShutdownChannel, kCollectiveTag);
}

// torchrun's elastic agent with its default static rendezvous serves PyTorch's own store at
// MASTER_PORT and tells its workers so (TORCHELASTIC_USE_AGENT_STORE=True); tessel's store, which
// speaks its own protocol, then takes the next port. TESSEL_STORE_PORT overrides both.
int store_port(const LaunchInfo& launch) {
  if (const char* v = std::getenv("TESSEL_STORE_PORT"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    long port = std::strtol(v, &end, 10);
    TESSEL_CHECK(end != v && *end == '\0' && port > 0 && port <= 65535,
                 "launch: TESSEL_STORE_PORT='", v, "' is not a TCP port (1..65535)");
    return int(port);
  }
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store =
      agent != nullptr && (std::string_view(agent) == "True" || std::string_view(agent) == "true" ||
                           std::string_view(agent) == "1");
  TESSEL_CHECK(!agent_store || launch.master_port < 65535,
               "launch: MASTER_PORT=", launch.master_port,
               " is held by torchrun's store and no port follows it");
  return agent_store ? launch.master_port + 1 : launch.master_port;
}

}  // namespace

CommPtr create_world(const LaunchInfo& launch) {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  TESSEL_CHECK(!rt.active, "tcp: the world was already created in this process");
  const std::string me =
      "rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.size);
  TESSEL_CHECK(!launch.master_addr.empty() && launch.master_port > 0, "launch: ", me,
               " from torchrun-style variables needs MASTER_ADDR and MASTER_PORT (got '",
               launch.master_addr, "' and ", launch.master_port,
               "): rank 0 serves the rendezvous there");
  const double deadline = monotonic_s() + comm_timeouts().first_s;
  const int port = store_port(launch);
  if (launch.rank == 0) {
    // Every interface, as the launcher's MASTER_ADDR names one of them seen from other hosts.
    rt.server = std::make_unique<StoreServer>("", port);
  }
  rt.store = std::make_unique<StoreClient>(launch.master_addr, port, launch.rank, deadline);
  rt.transport = std::make_shared<Transport>(*rt.store, launch.rank, launch.size, deadline);
  RankContext& ctx = process_context();
  CommInfo info;
  info.label = ctx.unique_label("world");
  info.rank = launch.rank;
  info.size = launch.size;
  for (int r = 0; r < launch.size; ++r) info.world_ranks.push_back(r);
  info.backend = "tcp";
  ctx.set_world_rank(launch.rank);
  Watchdog::instance().start(process_context_ptr(), std::make_unique<TcpDiagChannel>(rt.transport));
  rt.active = true;
  std::atexit(finalize_at_exit);
  return std::make_shared<TcpCommunicator>(rt.transport, kWorldChannel, std::move(info),
                                           process_context_ptr());
}

void finalize() {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  if (!rt.active) return;
  rt.active = false;
  try {
    exit_barrier(*rt.transport);
  } catch (const std::exception&) {
    // A peer is gone; its own failure is what the job reports.
  }
  Watchdog::instance().stop();
  rt.transport->close();
  rt.store->close();
  rt.server.reset();
}

bool is_active() {
  return runtime().active.load();
}

void abort_peers(int exit_code) {
  Runtime& rt = runtime();
  std::shared_ptr<Transport> t;
  {
    std::unique_lock lock(rt.mutex, std::try_to_lock);  // never wait behind a stuck finalize
    if (lock.owns_lock() && rt.active) t = rt.transport;
  }
  if (t) t->send_abort(exit_code);
}

}  // namespace tessel::dist::tcp
