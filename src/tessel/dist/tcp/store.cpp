// SPDX-License-Identifier: Apache-2.0
// Store protocol: a request is {op u8, key length u32, value length u64, key, value}; the answer
// is {length u64, bytes}. Ops: set, get (answered once the key exists), add (value: a decimal
// delta; answer: the new decimal value). One server thread per client keeps a waiting get from
// blocking the others.
#include "tessel/dist/tcp/store.h"

#include "tessel/core/error.h"

namespace tessel::dist::tcp {

namespace {

enum : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };

struct RequestHead {
  uint8_t op = 0;
  uint32_t key_bytes = 0;
  uint64_t value_bytes = 0;
};

constexpr uint64_t kMaxValue = uint64_t(1) << 30;

}  // namespace

StoreServer::StoreServer(const std::string& host, int port)
    : listener_(listen_on(host, port, "rank 0: rendezvous store at MASTER_ADDR:MASTER_PORT")) {
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    for (auto& c : clients_) c->shutdown_both();
  }
  cv_.notify_all();
  listener_.shutdown_both();  // wakes accept()
  acceptor_.join();
  for (std::thread& t : threads_) t.join();
}

void StoreServer::accept_loop() {
  for (;;) {
    Socket s;
    try {
      s = accept_until(listener_, monotonic_s() + 3600.0, "rendezvous store");
    } catch (const Error&) {
      std::lock_guard lock(mutex_);
      if (stop_) return;
      continue;
    }
    std::lock_guard lock(mutex_);
    if (stop_) return;
    clients_.push_back(std::make_shared<Socket>(std::move(s)));
    const size_t i = clients_.size() - 1;
    threads_.emplace_back([this, i] { serve(i); });
  }
}

void StoreServer::serve(size_t client) {
  std::shared_ptr<Socket> s;
  {
    std::lock_guard lock(mutex_);
    s = clients_[client];
  }
  try {
    for (;;) {
      RequestHead head;
      if (!read_all(*s, &head, sizeof(head), "rendezvous store")) return;
      TESSEL_CHECK(head.key_bytes < 4096 && head.value_bytes < kMaxValue,
                   "rendezvous store: malformed request");
      std::string key(head.key_bytes, '\0'), value(head.value_bytes, '\0');
      if (!key.empty()) read_all(*s, key.data(), key.size(), "rendezvous store");
      if (!value.empty()) read_all(*s, value.data(), value.size(), "rendezvous store");
      std::string answer;
      {
        std::unique_lock lock(mutex_);
        if (head.op == kSet) {
          values_[key] = value;
          cv_.notify_all();
        } else if (head.op == kGet) {
          cv_.wait(lock, [&] { return stop_ || values_.count(key) > 0; });
          if (stop_) return;
          answer = values_[key];
        } else if (head.op == kAdd) {
          auto it = values_.find(key);
          int64_t now = (it == values_.end() ? 0 : std::stoll(it->second)) + std::stoll(value);
          answer = values_[key] = std::to_string(now);
          cv_.notify_all();
        } else {
          return;
        }
      }
      uint64_t n = answer.size();
      write_all(*s, &n, sizeof(n), "rendezvous store");
      if (n) write_all(*s, answer.data(), n, "rendezvous store");
    }
  } catch (const std::exception&) {
    // A client that went away ends only its own thread; its peers learn of it on the mesh.
  }
}

StoreClient::StoreClient(const std::string& host, int port, int rank, double deadline)
    : host_(host),
      port_(port),
      rank_(rank),
      socket_(
          connect_until(host, port, deadline,
                        "rank " + std::to_string(rank) +
                            ": rendezvous store at MASTER_ADDR:MASTER_PORT (served by rank 0)")) {}

std::string StoreClient::endpoint() const {
  return host_ + ":" + std::to_string(port_);
}

std::string StoreClient::request(uint8_t op, const std::string& key, const std::string& value,
                                 double deadline) {
  std::lock_guard lock(mutex_);
  const std::string what = "rank " + std::to_string(rank_) + ": rendezvous store at " + endpoint() +
                           ", key '" + key + "'";
  TESSEL_CHECK(socket_.valid(), what, ": the store connection is closed");
  RequestHead head{op, uint32_t(key.size()), value.size()};
  write_all(socket_, &head, sizeof(head), what);
  write_all(socket_, key.data(), key.size(), what);
  if (!value.empty()) write_all(socket_, value.data(), value.size(), what);
  uint64_t n = 0;
  TESSEL_CHECK(read_all(socket_, &n, sizeof(n), what, deadline), what,
               ": the store closed the connection (rank 0 exited?)");
  TESSEL_CHECK(n < kMaxValue, what, ": malformed answer");
  std::string answer(n, '\0');
  if (n) read_all(socket_, answer.data(), n, what, deadline);
  return answer;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  request(kSet, key, value, 0);
}

std::string StoreClient::get(const std::string& key, double deadline) {
  return request(kGet, key, "", deadline);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  return std::stoll(request(kAdd, key, std::to_string(delta), 0));
}

void StoreClient::barrier(const std::string& name, int n, double deadline) {
  if (add(name + "/arrived", 1) == n) set(name + "/done", "1");
  get(name + "/done", deadline);
}

void StoreClient::close() {
  std::lock_guard lock(mutex_);
  socket_.close();
}

}  // namespace tessel::dist::tcp
