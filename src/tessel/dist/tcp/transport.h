// SPDX-License-Identifier: Apache-2.0
// The full mesh of the tcp backend: one connection per pair of ranks, set up through the
// rendezvous store (each rank listens on an ephemeral port and publishes host:port; the higher rank
// of each pair connects). Each connection has a reader thread that drains every frame into a
// mailbox keyed by (sender, channel, tag), so a send never waits for the receiver to post its
// receive and sends in both directions cannot deadlock. A connection that closes without the
// goodbye of an orderly shutdown fails every wait of this process with a message naming the rank.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/dist/tcp/socket.h"
#include "tessel/dist/tcp/store.h"

namespace tessel::dist::tcp {

// One received frame's payload (uninitialised storage: filled by the reader).
struct Message {
  DType dtype = DType::I8;
  size_t bytes = 0;
  std::unique_ptr<std::byte[]> data;
};

// Channels: every communicator (and its asynchronous twin) has its own 64-bit id, the same on all
// of its members; these few are reserved.
inline constexpr uint64_t kWorldChannel = 1, kDiagChannel = 2, kShutdownChannel = 3;
// Collectives use negative tags, one per kind of call (their messages match in issue order, and a
// rank in a different collective than its peers waits, to be named by the watchdog, instead of
// consuming their messages); send/recv use theirs.
inline constexpr int32_t kCollectiveTag = -1;
inline int32_t collective_tag(uint8_t kind) {
  return -2 - int32_t(kind);
}

// A connection to a peer is gone (the peer died, or it shut down while a message from it was
// awaited): the message names the peer rank and its address.
class PeerLost : public Error {
 public:
  using Error::Error;
};

// A deterministic id for a derived channel (splitmix64 over the parent id and the inputs).
uint64_t derive_channel(uint64_t parent, uint64_t a, uint64_t b);

class Transport {
 public:
  // Rendezvous and full mesh over `store`; collective over all `size` ranks.
  Transport(StoreClient& store, int rank, int size, double deadline);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string peer_name(int peer) const;  // "rank 3 (127.0.0.1:40211)"

  void send(int peer, uint64_t channel, int32_t tag, DType dtype, const void* data, size_t bytes);
  // Waits for the next message from `peer` on (channel, tag). Throws once the connection to any
  // rank was lost (naming it), or when `peer` has shut down.
  Message take(int peer, uint64_t channel, int32_t tag);
  std::optional<Message> try_take(int peer, uint64_t channel, int32_t tag);

  // Tells every peer to end its process with exit_code (they log who asked, `origin`: this rank
  // by default) and closes the sending side; does not exit. Takes a third of a second.
  void send_abort(int exit_code, int origin = -1);
  // Orderly end: goodbye to every peer, then waits for theirs (or the connection's end).
  void close();

 private:
  struct Peer;
  void read_loop(int peer);
  void lost(int peer, const std::string& why);
  void check_alive_locked(int peer) const;

  int rank_, size_;
  std::vector<std::unique_ptr<Peer>> peers_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::tuple<int, uint64_t, int32_t>, std::deque<Message>> mailbox_;
  std::string failure_;  // the first connection lost without a goodbye
  bool closed_ = false;
  bool aborting_ = false;
};

}  // namespace tessel::dist::tcp
