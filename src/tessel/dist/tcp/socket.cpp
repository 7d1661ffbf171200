// SPDX-License-Identifier: Apache-2.0
// POSIX socket calls with errno turned into messages that name the endpoint.
#include "tessel/dist/tcp/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "tessel/core/error.h"

namespace tessel::dist::tcp {

namespace {

std::string errno_text(int err) {
  return std::string(std::strerror(err));
}

sockaddr_in resolve(const std::string& host, int port, const std::string& what) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  TESSEL_CHECK(rc == 0 && found != nullptr, what, ": cannot resolve host '", host,
               "': ", gai_strerror(rc));
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - monotonic_s();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, int(std::min(left, 1.0) * 1000) + 1);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the following call report the error
  }
}

}  // namespace

Socket::~Socket() {
  close();
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::shutdown_both() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::shutdown_write() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

double monotonic_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Socket listen_on(const std::string& host, int port, const std::string& what) {
  sockaddr_in addr = resolve(host, port, what);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  TESSEL_CHECK(s.valid(), what, ": socket() failed: ", errno_text(errno));
  int one = 1;
  // Lets a new job reuse the port of one that just ended (TIME_WAIT), never a port in use.
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    TESSEL_FAIL(
        what, ": cannot listen on ", host.empty() ? "*" : host, ":", port, ": ", errno_text(err),
        err == EADDRINUSE ? " (another process uses this port; choose a free MASTER_PORT)" : "");
  }
  TESSEL_CHECK(::listen(s.fd(), 128) == 0, what, ": listen on port ", port,
               " failed: ", errno_text(errno));
  return s;
}

int local_port(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

std::string local_address(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return text;
}

Socket connect_until(const std::string& host, int port, double deadline, const std::string& what) {
  sockaddr_in addr = resolve(host, port, what);
  int last_error = 0;
  auto pause = std::chrono::milliseconds(10);
  do {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    TESSEL_CHECK(s.valid(), what, ": socket() failed: ", errno_text(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      set_no_delay(s);
      return s;
    }
    last_error = errno;
    const bool retry = last_error == ECONNREFUSED || last_error == ETIMEDOUT ||
                       last_error == EHOSTUNREACH || last_error == ENETUNREACH ||
                       last_error == EINTR || last_error == ECONNRESET || last_error == EAGAIN;
    TESSEL_CHECK(retry, what, ": cannot connect to ", host, ":", port, ": ",
                 errno_text(last_error));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  } while (monotonic_s() < deadline);
  TESSEL_FAIL(what, ": nobody accepted a connection at ", host, ":", port,
              " before the deadline (last error: ", errno_text(last_error),
              "); TESSEL_COMM_FIRST_TIMEOUT sets the wait");
}

Socket accept_until(const Socket& listener, double deadline, const std::string& what) {
  for (;;) {
    TESSEL_CHECK(wait_ready(listener.fd(), POLLIN, deadline), what,
                 ": no connection arrived on port ", local_port(listener),
                 " before the deadline (TESSEL_COMM_FIRST_TIMEOUT sets the wait)");
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket s(fd);
      set_no_delay(s);
      return s;
    }
    TESSEL_CHECK(errno == EINTR || errno == EAGAIN || errno == ECONNABORTED, what,
                 ": accept on port ", local_port(listener), " failed: ", errno_text(errno));
  }
}

void set_no_delay(const Socket& s) {
  int one = 1;
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void write_all(const Socket& s, const void* data, size_t bytes, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t k = ::send(s.fd(), p, bytes, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    TESSEL_CHECK(k > 0, what, ": ", errno_text(errno));
    p += k;
    bytes -= size_t(k);
  }
}

bool read_all(const Socket& s, void* data, size_t bytes, const std::string& what, double deadline) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < bytes) {
    if (deadline > 0)
      TESSEL_CHECK(wait_ready(s.fd(), POLLIN, deadline), what,
                   ": no answer before the deadline (TESSEL_COMM_FIRST_TIMEOUT sets the wait)");
    ssize_t k = ::recv(s.fd(), p + got, bytes - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 && got == 0) return false;
    TESSEL_CHECK(
        k > 0, what, ": ",
        k == 0 ? std::string("connection closed in the middle of a message") : errno_text(errno));
    got += size_t(k);
  }
  return true;
}

int read_exact(const Socket& s, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < bytes) {
    ssize_t k = ::recv(s.fd(), p + got, bytes - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return got == 0 ? -1 : ECONNRESET;
    got += size_t(k);
  }
  return 0;
}

}  // namespace tessel::dist::tcp
