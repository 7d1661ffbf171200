// SPDX-License-Identifier: Apache-2.0
// Blocking IPv4 TCP sockets for the tcp backend: listen, connect with retries until a deadline
// (peers start in any order), accept with a timeout, and whole-buffer reads and writes. Every
// failure throws Error with the address and what was being done (`what`), so a message names the
// endpoint and the rank that could not be reached.
#pragma once

#include <cstddef>
#include <string>

namespace tessel::dist::tcp {

// An owned file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void shutdown_both() const;  // wakes a thread blocked on this socket
  void shutdown_write() const;
  void close();

 private:
  int fd_ = -1;
};

// Seconds on a monotonic clock (for deadlines).
double monotonic_s();

// Listens on host:port (port 0: an ephemeral port; host "" or "0.0.0.0": every interface).
Socket listen_on(const std::string& host, int port, const std::string& what);
int local_port(const Socket& s);
std::string local_address(const Socket& s);  // the IPv4 address this end of a connection uses

// Connects, retrying refused or unreachable attempts until `deadline` (monotonic_s()).
Socket connect_until(const std::string& host, int port, double deadline, const std::string& what);
// Waits for one connection until `deadline`.
Socket accept_until(const Socket& listener, double deadline, const std::string& what);

// Latency matters more than coalescing for collectives' small messages.
void set_no_delay(const Socket& s);

void write_all(const Socket& s, const void* data, size_t bytes, const std::string& what);
// false when the peer closed the connection before the first byte; throws on a partial message or
// an error. With deadline > 0, throws when nothing arrives by then.
bool read_all(const Socket& s, void* data, size_t bytes, const std::string& what,
              double deadline = 0);
// For the mesh's reader threads, which report errors themselves: 0 when all bytes arrived, -1 on
// a close before the first byte, otherwise an errno value (ECONNRESET for a close mid-message).
int read_exact(const Socket& s, void* data, size_t bytes);

}  // namespace tessel::dist::tcp
