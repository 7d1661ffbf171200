// SPDX-License-Identifier: Apache-2.0
// The load of `tessel bench serve`: a closed loop (N clients, each sending its next request when
// the previous ends: throughput at a fixed concurrency) and an open loop (Poisson arrivals at a
// fixed rate, whatever is in flight: latency under an offered load, as real traffic arrives).
// Every in-flight request has its own thread and connection.
#include <atomic>
#include <mutex>
#include <thread>

#include "tessel/cli/bench_serve.h"

namespace tessel::cli {

std::vector<serve::RequestRecord> run_closed_loop(const ServeClient& client,
                                                  const serve::Workload& workload,
                                                  int64_t concurrency, int64_t first_index,
                                                  int64_t requests, double duration_s) {
  std::vector<serve::RequestRecord> records;
  std::mutex mu;
  std::atomic<int64_t> next{0};
  const BenchClock::time_point start = BenchClock::now();
  const auto deadline = start + std::chrono::duration_cast<BenchClock::duration>(
                                    std::chrono::duration<double>(duration_s));
  auto worker = [&] {
    while (true) {
      if (duration_s > 0 && BenchClock::now() >= deadline) return;
      const int64_t i = next.fetch_add(1);
      if (requests > 0 && i >= requests) return;
      serve::RequestRecord r = client.send(workload.request(first_index + i), start);
      std::lock_guard<std::mutex> lock(mu);
      records.push_back(std::move(r));
    }
  };
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < concurrency; ++c) clients.emplace_back(worker);
  for (std::thread& t : clients) t.join();
  return records;
}

std::vector<serve::RequestRecord> run_open_loop(const ServeClient& client,
                                                const serve::Workload& workload, double rate,
                                                uint64_t seed, int64_t first_index,
                                                int64_t requests, double duration_s) {
  std::vector<serve::RequestRecord> records;
  std::mutex mu;
  serve::PoissonArrivals arrivals(rate, seed);
  std::vector<std::thread> in_flight;
  const BenchClock::time_point start = BenchClock::now();
  for (int64_t i = 0; requests <= 0 || i < requests; ++i) {
    const double at = arrivals.next();
    if (duration_s > 0 && at >= duration_s) break;
    std::this_thread::sleep_until(start + std::chrono::duration_cast<BenchClock::duration>(
                                              std::chrono::duration<double>(at)));
    // The request is made on its thread, so a slow server never delays the next arrival.
    in_flight.emplace_back([&, i] {
      serve::RequestRecord r = client.send(workload.request(first_index + i), start);
      std::lock_guard<std::mutex> lock(mu);
      records.push_back(std::move(r));
    });
  }
  for (std::thread& t : in_flight) t.join();
  return records;
}

}  // namespace tessel::cli
