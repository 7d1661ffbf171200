// SPDX-License-Identifier: Apache-2.0
// The rendezvous key/value store of a torchrun-style launch (the role of torch.distributed's
// TCPStore): rank 0 serves it at MASTER_ADDR:MASTER_PORT for the life of the job, every rank
// (rank 0 included) is a client. Ranks start in any order: clients retry connecting until the
// first-call deadline. Values are byte strings; get() waits until the key is set.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessel/dist/tcp/socket.h"

namespace tessel::dist::tcp {

class StoreServer {
 public:
  StoreServer(const std::string& host, int port);  // throws when the port is in use
  ~StoreServer();                                  // disconnects every client
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return local_port(listener_); }

 private:
  void accept_loop();
  void serve(size_t client);

  Socket listener_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, std::string> values_;
  std::vector<std::shared_ptr<Socket>> clients_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

class StoreClient {
 public:
  // Connects to host:port before `deadline` (monotonic_s()); `rank` names this process in errors.
  StoreClient(const std::string& host, int port, int rank, double deadline);

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists, at most until `deadline` (0: no limit).
  std::string get(const std::string& key, double deadline = 0);
  int64_t add(const std::string& key, int64_t delta);  // returns the new value
  // Every one of `n` ranks calls it with the same name; returns when all have.
  void barrier(const std::string& name, int n, double deadline);
  void close();
  std::string endpoint() const;  // "host:port"
  const Socket& socket() const { return socket_; }

 private:
  std::string request(uint8_t op, const std::string& key, const std::string& value,
                      double deadline);

  std::string host_;
  int port_;
  int rank_;
  std::mutex mutex_;
  Socket socket_;
};

}  // namespace tessel::dist::tcp
