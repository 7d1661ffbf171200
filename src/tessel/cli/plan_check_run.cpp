// SPDX-License-Identifier: Apache-2.0
#include "tessel/cli/plan_check_run.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tessel/core/error.h"

namespace tessel::cli {

namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The step records a train.jsonl holds from byte `offset` on (whole lines only); `offset` moves
// past them. A line the trainer is still writing stays for the next call.
std::vector<nlohmann::json> new_step_records(const std::string& path, std::streamoff& offset) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  in.seekg(offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: not complete
    offset += std::streamoff(line.size() + 1);
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step")) out.push_back(std::move(j));
  }
  return out;
}

std::string exit_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

CheckMeasurement measure_train_log(const std::string& jsonl_path, int warmup) {
  std::streamoff offset = 0;
  TESSEL_CHECK(fs::is_regular_file(jsonl_path), "plan --check: the run wrote no ", jsonl_path);
  const std::vector<nlohmann::json> records = new_step_records(jsonl_path, offset);
  std::vector<double> times;
  for (const nlohmann::json& r : records)
    if (r.at("step").get<int64_t>() > warmup) times.push_back(r.at("step_ms").get<double>());
  TESSEL_CHECK(!times.empty(), "plan --check: ", jsonl_path, " has ", records.size(),
               " step records, none after the ", warmup, " warmup step(s)");
  CheckMeasurement m;
  m.ok = true;
  m.step_ms = median(times);
  m.steps_measured = int(times.size());
  // The last step's memory: the state has reached its steady size (AdamW's moments exist after
  // the first update), as the memory model predicts it.
  const nlohmann::json& last = records.back();
  const nlohmann::json& ranks = last.at("ranks");
  for (const nlohmann::json& rank : ranks) {
    m.rank_peak_bytes.push_back(rank.at("mem_bytes").get<int64_t>() +
                                rank.at("step_peak_bytes").get<int64_t>());
    m.rank_vm_hwm_bytes.push_back(rank.at("rss_peak_bytes").get<int64_t>());
    m.peak_bytes = std::max(m.peak_bytes, m.rank_peak_bytes.back());
    m.vm_hwm_bytes = std::max(m.vm_hwm_bytes, m.rank_vm_hwm_bytes.back());
  }
  if (ranks.empty()) {
    m.peak_bytes = last.at("mem_bytes").get<int64_t>() + last.at("step_peak_bytes").get<int64_t>();
    m.vm_hwm_bytes = last.at("rss_peak_bytes").get<int64_t>();
  }
  return m;
}

std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, last, error;
  while (std::getline(in, line)) {
    // mpirun frames its reports in rules of dashes: a line without a letter or digit says nothing.
    if (std::none_of(line.begin(), line.end(), [](unsigned char c) { return std::isalnum(c); }))
      continue;
    last = line;
    if (line.find("tessel: error:") != std::string::npos) error = line;
  }
  // A rank's own error outranks the launcher's report of the job ending because of it.
  return error.empty() ? last : error;
}

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (fs::is_regular_file(candidate) && access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
  }
  return "";
}

CheckMeasurement run_and_measure(const std::vector<std::string>& argv, const std::string& dir,
                                 int warmup, int steps, const std::string& prefix,
                                 std::ostream& progress) {
  TESSEL_CHECK(!argv.empty(), "plan --check: an empty command");
  fs::create_directories(dir);
  const std::string out_log = (fs::path(dir) / "stdout.log").string();
  const std::string err_log = (fs::path(dir) / "stderr.log").string();
  const std::string jsonl = (fs::path(dir) / "train.jsonl").string();
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  TESSEL_CHECK(pid >= 0, "plan --check: cannot start ", argv[0], ": ", std::strerror(errno));
  if (pid == 0) {
    const int out = open(out_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) dup2(out, STDOUT_FILENO);
    if (err >= 0) dup2(err, STDERR_FILENO);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  // Follow the log while the run works, so a slow layout shows where it is.
  std::streamoff offset = 0;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    for (const nlohmann::json& r : new_step_records(jsonl, offset)) {
      char line[160];
      std::snprintf(line, sizeof line, "%sstep %lld/%d: %.2f ms%s\n", prefix.c_str(),
                    (long long)r.value("step", int64_t(0)), warmup + steps, r.value("step_ms", 0.0),
                    r.value("step", int64_t(0)) <= warmup ? " (warmup)" : "");
      progress << line << std::flush;
    }
    if (done == pid) break;
    TESSEL_CHECK(done == 0 || errno == EINTR, "plan --check: waiting for ", argv[0], ": ",
                 std::strerror(errno));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CheckMeasurement m;
  if (status != 0) {
    const std::string last = last_line_of(err_log);
    m.error = exit_status(status) + (last.empty() ? "" : ": " + last);
  } else {
    try {
      m = measure_train_log(jsonl, warmup);
    } catch (const std::exception& e) {
      m.error = e.what();
    }
  }
  m.seconds = seconds;
  return m;
}

}  // namespace tessel::cli
