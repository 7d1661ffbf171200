// SPDX-License-Identifier: Apache-2.0
// In-process tests of the tcp backend's pieces on loopback, one thread per rank: the rendezvous
// store (set/get/add/barrier, a get that waits, the errors for a port in use, a deadline and a
// missing key), and the mesh (tagged messages taken out of order, a large message, an orderly
// close, and a rank whose connections vanish without a goodbye, named by its peers).
#include "tessel/dist/tcp/transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "tessel/dist/tcp/store.h"

using namespace tessel;
using namespace tessel::dist::tcp;

namespace {

double in_s(double s) {
  return monotonic_s() + s;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Builds a mesh of n transports (one thread each) on a store served here.
std::vector<std::shared_ptr<Transport>> make_mesh(StoreServer& server, int n,
                                                  std::vector<std::unique_ptr<StoreClient>>& c) {
  std::vector<std::shared_ptr<Transport>> t(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    c.push_back(std::make_unique<StoreClient>("127.0.0.1", server.port(), r, in_s(20)));
  for (int r = 0; r < n; ++r)
    threads.emplace_back(
        [&, r] { t[size_t(r)] = std::make_shared<Transport>(*c[size_t(r)], r, n, in_s(20)); });
  for (auto& th : threads) th.join();
  return t;
}

}  // namespace

TEST(TcpStore, SetGetAddAndWaitingGet) {
  StoreServer server("127.0.0.1", 0);
  StoreClient a("127.0.0.1", server.port(), 0, in_s(10)),
      b("127.0.0.1", server.port(), 1, in_s(10));
  a.set("k", std::string("v\0w", 3));
  EXPECT_EQ(b.get("k"), std::string("v\0w", 3));
  EXPECT_EQ(a.add("n", 7), 7);
  EXPECT_EQ(b.add("n", -2), 5);
  std::string late;
  std::thread waiter([&] { late = b.get("late", in_s(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  a.set("late", "here");
  waiter.join();
  EXPECT_EQ(late, "here");
}

TEST(TcpStore, BarrierOfThree) {
  StoreServer server("127.0.0.1", 0);
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      StoreClient c("127.0.0.1", server.port(), r, in_s(10));
      if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      c.barrier("b", 3, in_s(10));
      passed += 1;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 3);
}

TEST(TcpStore, ErrorsNameTheEndpoint) {
  StoreServer server("127.0.0.1", 0);
  const std::string port = std::to_string(server.port());
  EXPECT_NE(error_of([&] {
              StoreServer again("127.0.0.1", server.port());
            }).find("cannot listen on 127.0.0.1:" + port + ": Address already in use"),
            std::string::npos);
  int free_port = 0;
  {
    Socket s = listen_on("127.0.0.1", 0, "probe");
    free_port = local_port(s);
  }
  std::string msg = error_of([&] { StoreClient c("127.0.0.1", free_port, 3, in_s(0.3)); });
  EXPECT_NE(msg.find("rank 3: rendezvous store"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nobody accepted a connection at 127.0.0.1:" + std::to_string(free_port)),
            std::string::npos)
      << msg;
  StoreClient c("127.0.0.1", server.port(), 1, in_s(10));
  msg = error_of([&] { c.get("never", in_s(0.2)); });
  EXPECT_NE(msg.find("key 'never'"), std::string::npos) << msg;
}

TEST(TcpTransport, TaggedMessagesLargeMessageAndOrderlyClose) {
  StoreServer server("127.0.0.1", 0);
  std::vector<std::unique_ptr<StoreClient>> clients;
  auto t = make_mesh(server, 3, clients);
  // Rank 0 sends tag 5 then tag 9 to rank 1, which takes 9 first.
  int a = 13, b = 33;
  t[0]->send(1, kWorldChannel, 5, DType::I32, &a, sizeof(a));
  t[0]->send(1, kWorldChannel, 9, DType::I32, &b, sizeof(b));
  Message m9 = t[1]->take(0, kWorldChannel, 9), m5 = t[1]->take(0, kWorldChannel, 5);
  int got9 = 0, got5 = 0;
  std::memcpy(&got9, m9.data.get(), sizeof(int));
  std::memcpy(&got5, m5.data.get(), sizeof(int));
  EXPECT_EQ(got9, 33);
  EXPECT_EQ(got5, 13);
  EXPECT_FALSE(t[2]->try_take(0, kWorldChannel, 5).has_value());
  // Both directions at once with messages larger than the socket buffers.
  std::vector<float> big(size_t(3 << 20) + 7), back(big.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 1001);
  std::thread other(
      [&] { t[2]->send(0, 77, kCollectiveTag, DType::F32, back.data(), back.size() * 4); });
  t[0]->send(2, 77, kCollectiveTag, DType::F32, big.data(), big.size() * 4);
  other.join();
  Message at2 = t[2]->take(0, 77, kCollectiveTag);
  t[0]->take(2, 77, kCollectiveTag);
  ASSERT_EQ(at2.bytes, big.size() * 4);
  EXPECT_EQ(std::memcmp(at2.data.get(), big.data(), at2.bytes), 0);
  std::vector<std::thread> closing;
  for (auto& x : t) closing.emplace_back([x] { x->close(); });
  for (auto& th : closing) th.join();
  std::string msg = error_of([&] { t[1]->take(0, kWorldChannel, 5); });
  EXPECT_NE(msg.find("rank 0 (127.0.0.1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has already shut down"), std::string::npos) << msg;
}

TEST(TcpTransport, VanishedRankIsNamedByItsPeers) {
  StoreServer server("127.0.0.1", 0);
  std::vector<std::unique_ptr<StoreClient>> clients;
  auto t = make_mesh(server, 3, clients);
  std::string msg0, msg1;
  std::thread w0([&] { msg0 = error_of([&] { t[0]->take(2, kWorldChannel, kCollectiveTag); }); });
  // Rank 1 waits for rank 0, which is alive: it fails too, since the job cannot go on.
  std::thread w1([&] { msg1 = error_of([&] { t[1]->take(0, kWorldChannel, kCollectiveTag); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  t[2].reset();  // closes its connections without a goodbye, as a killed process does
  w0.join();
  w1.join();
  for (const std::string& m : {msg0, msg1}) {
    EXPECT_NE(m.find("connection to rank 2 (127.0.0.1:"), std::string::npos) << m;
    EXPECT_NE(m.find("closed unexpectedly"), std::string::npos) << m;
  }
  EXPECT_NE(msg0.find("rank 0: "), std::string::npos) << msg0;
  EXPECT_NE(
      error_of([&] { t[0]->send(2, kWorldChannel, 1, DType::I8, nullptr, 0); }).find("rank 2"),
      std::string::npos);
}
