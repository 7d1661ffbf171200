// SPDX-License-Identifier: Apache-2.0
// Whether the client of an HTTP request has closed its connection, while the request is still
// being served. cpp-httplib gives a handler the connection's addresses but not its socket, so the
// socket is found once by its (local, remote) address pair among the process's descriptors
// (Linux: /proc/self/fd; the pair names exactly one TCP connection, and cpp-httplib keeps that
// socket open until the handler returns). Then a zero-timeout poll tells a closed peer (end of
// stream or an error) from one that is only quiet.
#pragma once

#include <string>

namespace tessel::serve {

class PeerWatch {
 public:
  PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
            int remote_port);
  // True once the peer has closed the connection or it failed; false while it is open or when
  // the socket could not be found (then only a failed write tells).
  bool closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace tessel::serve
