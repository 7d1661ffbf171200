// SPDX-License-Identifier: Apache-2.0
// `tessel bench serve` run as a program, without a server: what it refuses before sending anything
// (conflicting loops, bad lengths, a bad URL) and the error that names an unreachable server.
// Runs against tessel's own server are the serving layer's end-to-end tests.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cli/cli_run.h"

namespace tessel::cli_test {
namespace {

// A loopback port nothing listens on: bound to find a free one, then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// exit_code: 1 for tessel's errors, CLI11's own code for a value its validator refuses.
void expect_refused(const std::string& args, std::initializer_list<const char*> words,
                    int exit_code = 1) {
  const fs::path dir = scratch("tessel_cli_bench_serve_", "refused");
  const Outcome r = run_tessel("bench serve " + args, dir);
  EXPECT_EQ(r.exit_code, exit_code) << args << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // no JSON line for a run that did not happen
  for (const char* w : words)
    EXPECT_NE(r.err.find(w), std::string::npos) << r.err << " lacks " << w;
}

TEST(BenchServeCommand, AnUnreachableServerIsNamed) {
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  expect_refused("--url " + url + " --requests 1",
                 {url.c_str(), "/v1/models", "is the server running"});
}

TEST(BenchServeCommand, BadOptionsAreRefusedBeforeAnyRequest) {
  const std::string url = "--url http://127.0.0.1:" + std::to_string(closed_port());
  expect_refused(url + " --concurrency 4 --rate 2", {"--concurrency or --rate"});
  expect_refused(url + " --concurrency 1,0", {"--concurrency", "'0'"});
  expect_refused(url + " --output-tokens uniform:9:3", {"--output-tokens", "uniform:9:3"});
  expect_refused(url + " --prompt-tokens zipf:2", {"--prompt-tokens", "zipf:2"});
  expect_refused("--url 127.0.0.1:8000", {"--url", "http://HOST:PORT"});
  expect_refused(url + " --dataset /nonexistent/prompts.txt",
                 {"--dataset", "/nonexistent/prompts.txt"});
  expect_refused(url + " --endpoint embeddings", {"--endpoint", "embeddings"},
                 int(CLI::ExitCodes::ValidationError));
}

}  // namespace
}  // namespace tessel::cli_test
