// SPDX-License-Identifier: Apache-2.0
// Mesh set-up through the store, framing, the reader threads and the mailbox.
#include "tessel/dist/tcp/transport.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/dist/diagnosis.h"

namespace tessel::dist::tcp {

namespace {

constexpr uint32_t kMagic = 0x7e55e1c0;
enum : uint8_t { kData = 1, kBye = 2, kAbort = 3 };

struct FrameHead {
  uint32_t magic = kMagic;
  uint8_t type = kData;
  uint8_t dtype = 0;
  uint16_t reserved = 0;
  int32_t tag = 0;
  uint64_t channel = 0;
  uint64_t bytes = 0;
};

struct Hello {
  uint32_t magic = kMagic;
  int32_t rank = 0;
  int32_t size = 0;
};

std::pair<std::string, int> split_endpoint(const std::string& s) {
  size_t colon = s.rfind(':');
  TESSEL_CHECK(colon != std::string::npos, "rendezvous: malformed address '", s, "'");
  return {s.substr(0, colon), std::stoi(s.substr(colon + 1))};
}

}  // namespace

uint64_t derive_channel(uint64_t parent, uint64_t a, uint64_t b) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t id = mix(mix(mix(parent) ^ a) ^ b);
  return id < 16 ? id + 16 : id;  // never one of the reserved channels
}

struct Transport::Peer {
  Socket socket;
  std::string address;
  std::mutex write_mutex;
  std::thread reader;
  bool bye = false;       // the peer said goodbye (orderly shutdown)
  bool finished = false;  // its reader thread has ended
};

Transport::Transport(StoreClient& store, int rank, int size, double deadline)
    : rank_(rank), size_(size) {
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  peers_.resize(size_t(size));
  for (auto& p : peers_) p = std::make_unique<Peer>();
  TESSEL_CHECK(store.add("tessel/claim/" + std::to_string(rank), 1) == 1, me,
               ": another process of this job was also started with RANK=", rank,
               " (each rank must be given once)");
  Socket listener = listen_on("", 0, me + ": mesh listener");
  const std::string mine =
      local_address(store.socket()) + ":" + std::to_string(local_port(listener));
  store.set("tessel/rank/" + std::to_string(rank), mine + " " + std::to_string(size));
  peers_[size_t(rank)]->address = mine;
  // The higher rank of each pair connects; the listener's backlog holds early arrivals.
  for (int j = 0; j < rank; ++j) {
    std::string value;
    try {
      value = store.get("tessel/rank/" + std::to_string(j), deadline);
    } catch (const Error&) {
      TESSEL_FAIL(me, ": rank ", j, " did not join the rendezvous at ", store.endpoint(),
                  " within ", comm_timeouts().first_s,
                  " s (not started, or crashed on start-up; TESSEL_COMM_FIRST_TIMEOUT sets the "
                  "wait)");
    }
    const size_t space = value.find(' ');
    const int their_size = std::stoi(value.substr(space + 1));
    TESSEL_CHECK(their_size == size, me, ": rank ", j, " was started with WORLD_SIZE=", their_size,
                 " but this rank with WORLD_SIZE=", size);
    Peer& p = *peers_[size_t(j)];
    p.address = value.substr(0, space);
    auto [host, port] = split_endpoint(p.address);
    p.socket =
        connect_until(host, port, deadline, me + ": connection to rank " + std::to_string(j));
    Hello hello{kMagic, rank, size};
    write_all(p.socket, &hello, sizeof(hello), me + ": hello to rank " + std::to_string(j));
  }
  for (int k = rank + 1; k < size; ++k) {
    Socket s;
    try {
      s = accept_until(listener, deadline, me + ": mesh listener");
    } catch (const Error&) {
      std::string missing;
      for (int m = rank + 1; m < size; ++m)
        if (!peers_[size_t(m)]->socket.valid())
          missing += (missing.empty() ? "" : ", ") + std::to_string(m);
      TESSEL_FAIL(
          me, ": rank(s) ", missing, " did not connect to this rank within ",
          comm_timeouts().first_s, " s of the rendezvous at ", store.endpoint(),
          " (not started, or crashed on start-up; TESSEL_COMM_FIRST_TIMEOUT sets the wait)");
    }
    Hello hello;
    TESSEL_CHECK(
        read_all(s, &hello, sizeof(hello), me + ": hello", deadline) && hello.magic == kMagic, me,
        ": a connection to the mesh listener did not introduce itself as a rank");
    TESSEL_CHECK(
        hello.rank > rank && hello.rank < size && !peers_[size_t(hello.rank)]->socket.valid(), me,
        ": unexpected hello from rank ", hello.rank);
    TESSEL_CHECK(hello.size == size, me, ": rank ", hello.rank,
                 " was started with WORLD_SIZE=", hello.size,
                 " but this rank with WORLD_SIZE=", size);
    peers_[size_t(hello.rank)]->socket = std::move(s);
    const std::string value = store.get("tessel/rank/" + std::to_string(hello.rank), deadline);
    peers_[size_t(hello.rank)]->address = value.substr(0, value.find(' '));
  }
  // Readers start last: nothing can throw after them (a Peer with a running thread must not be
  // destroyed). Frames a peer sends meanwhile wait in the socket.
  store.barrier("tessel/mesh", size, deadline);
  for (int j = 0; j < size; ++j)
    if (j != rank) peers_[size_t(j)]->reader = std::thread([this, j] { read_loop(j); });
}

Transport::~Transport() {
  for (auto& p : peers_) p->socket.shutdown_both();
  for (auto& p : peers_)
    if (p->reader.joinable()) p->reader.join();
}

std::string Transport::peer_name(int peer) const {
  return "rank " + std::to_string(peer) + " (" + peers_[size_t(peer)]->address + ")";
}

void Transport::read_loop(int peer) {
  Peer& p = *peers_[size_t(peer)];
  auto failed = [&](int rc) {
    lost(peer, rc == -1 ? "the peer closed the connection" : std::strerror(rc));
  };
  for (;;) {
    FrameHead head;
    if (int rc = read_exact(p.socket, &head, sizeof(head))) return failed(rc);
    if (head.magic != kMagic) return lost(peer, "malformed frame");
    if (head.type == kBye) {
      std::lock_guard lock(mutex_);
      p.bye = true;
      cv_.notify_all();
      continue;
    }
    if (head.type == kAbort) {
      // Passed on before exiting, so that peers learn of the abort before they see this
      // connection close (which would otherwise look like this rank had crashed).
      const int origin = head.channel < uint64_t(size_) ? int(head.channel) : peer;
      send_abort(head.tag, origin);
      log_message(LogLevel::Error,
                  "rank " + std::to_string(rank_) + ": " + peer_name(origin) +
                      " aborted the job (exit code " + std::to_string(head.tag) +
                      (origin != peer ? ", passed on by rank " + std::to_string(peer) : "") +
                      "); ending this rank too");
      std::fflush(stderr);
      std::_Exit(head.tag);
    }
    Message m;
    m.dtype = DType(head.dtype);
    m.bytes = size_t(head.bytes);
    try {
      m.data.reset(new std::byte[m.bytes ? m.bytes : 1]);
    } catch (const std::bad_alloc&) {
      return lost(peer, "no memory for a message of " + std::to_string(m.bytes) + " bytes");
    }
    if (m.bytes)
      if (int rc = read_exact(p.socket, m.data.get(), m.bytes))
        return failed(rc == -1 ? ECONNRESET : rc);
    std::lock_guard lock(mutex_);
    mailbox_[{peer, head.channel, head.tag}].push_back(std::move(m));
    cv_.notify_all();
  }
}

void Transport::lost(int peer, const std::string& why) {
  std::lock_guard lock(mutex_);
  Peer& p = *peers_[size_t(peer)];
  p.finished = true;
  if (!p.bye && !closed_ && !aborting_ && failure_.empty()) {
    failure_ = "connection to " + peer_name(peer) + " closed unexpectedly (" + why +
               "): that process exited or was killed";
  }
  cv_.notify_all();
}

void Transport::check_alive_locked(int peer) const {
  if (!failure_.empty()) throw PeerLost("rank " + std::to_string(rank_) + ": " + failure_);
  const Peer& p = *peers_[size_t(peer)];
  if (p.bye || p.finished)
    throw PeerLost("rank " + std::to_string(rank_) + ": " + peer_name(peer) +
                   " has already shut down its connections; a message it never sent is awaited");
}

void Transport::send(int peer, uint64_t channel, int32_t tag, DType dtype, const void* data,
                     size_t bytes) {
  Peer& p = *peers_[size_t(peer)];
  {
    std::lock_guard lock(mutex_);
    check_alive_locked(peer);
  }
  FrameHead head;
  head.type = kData;
  head.dtype = uint8_t(dtype);
  head.tag = tag;
  head.channel = channel;
  head.bytes = bytes;
  std::lock_guard lock(p.write_mutex);
  try {
    write_all(p.socket, &head, sizeof(head), "send");
    if (bytes) write_all(p.socket, data, bytes, "send");
  } catch (const Error&) {
    const int err = errno;
    std::lock_guard state(mutex_);
    if (!failure_.empty()) throw PeerLost("rank " + std::to_string(rank_) + ": " + failure_);
    throw PeerLost("rank " + std::to_string(rank_) + ": connection to " + peer_name(peer) +
                   " closed unexpectedly while sending (" + std::strerror(err) +
                   "): that process exited or was killed");
  }
}

std::optional<Message> Transport::try_take(int peer, uint64_t channel, int32_t tag) {
  std::lock_guard lock(mutex_);
  auto it = mailbox_.find({peer, channel, tag});
  if (it == mailbox_.end() || it->second.empty()) {
    check_alive_locked(peer);
    return std::nullopt;
  }
  Message m = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) mailbox_.erase(it);
  return m;
}

Message Transport::take(int peer, uint64_t channel, int32_t tag) {
  std::unique_lock lock(mutex_);
  const auto key = std::make_tuple(peer, channel, tag);
  for (;;) {
    auto it = mailbox_.find(key);
    if (it != mailbox_.end() && !it->second.empty()) {
      Message m = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) mailbox_.erase(it);
      return m;
    }
    check_alive_locked(peer);
    cv_.wait(lock);
  }
}

void Transport::send_abort(int exit_code, int origin) {
  {
    // Peers now exit one by one: their closing connections are expected, not new failures.
    std::lock_guard lock(mutex_);
    aborting_ = true;
  }
  FrameHead head;
  head.type = kAbort;
  head.tag = exit_code;
  head.channel = uint64_t(origin < 0 ? rank_ : origin);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_ || j == origin) continue;
    Peer& p = *peers_[size_t(j)];
    // Never wait for a writer stuck on a full socket: the launcher ends the job anyway.
    std::unique_lock lock(p.write_mutex, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    try {
      write_all(p.socket, &head, sizeof(head), "abort");
    } catch (const std::exception&) {
    }
    p.socket.shutdown_write();
  }
  // A process that exits with unread input resets its connections, and a reset can overtake the
  // abort frame on the peer's side: give the peers a moment to read it first.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

void Transport::close() {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
  }
  FrameHead head;
  head.type = kBye;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    Peer& p = *peers_[size_t(j)];
    std::lock_guard lock(p.write_mutex);
    try {
      write_all(p.socket, &head, sizeof(head), "goodbye");
    } catch (const std::exception&) {
    }
    p.socket.shutdown_write();
  }
  {
    // Peers close theirs after the same exit barrier; a peer that never does is cut off.
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      for (int j = 0; j < size_; ++j)
        if (j != rank_ && !peers_[size_t(j)]->finished) return false;
      return true;
    });
  }
  for (auto& p : peers_) p->socket.shutdown_both();
  for (auto& p : peers_)
    if (p->reader.joinable()) p->reader.join();
}

}  // namespace tessel::dist::tcp
