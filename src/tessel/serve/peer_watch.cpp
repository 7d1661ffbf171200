// SPDX-License-Identifier: Apache-2.0
// PeerWatch: the request's socket found by its address pair, polled without blocking.
#include "tessel/serve/peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <system_error>

namespace tessel::serve {

namespace {

// "address:port" of a socket address, in the spelling cpp-httplib uses (inet_ntop).
bool describe(const sockaddr_storage& addr, std::string& host, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf))) return false;
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf))) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  host = buf;
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage local{}, remote{};
  socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) return false;
  std::string lhost, rhost;
  int lport = -1, rport = -1;
  return describe(local, lhost, lport) && describe(remote, rhost, rport) && lport == local_port &&
         rport == remote_port && lhost == local_addr && rhost == remote_addr;
}

}  // namespace

PeerWatch::PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    if (matches(fd, local_addr, local_port, remote_addr, remote_port)) {
      fd_ = fd;
      return;
    }
  }
}

bool PeerWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  // Readable: either the next pipelined request (the peer is there) or end of stream.
  char byte = 0;
  return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace tessel::serve
