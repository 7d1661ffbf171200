// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace tessel {

namespace {
LogLevel parse_level() {
  const char* env = std::getenv("TESSEL_LOG");
  if (env == nullptr) return LogLevel::Info;
  std::string_view v(env);
  if (v == "error") return LogLevel::Error;
  if (v == "warn") return LogLevel::Warn;
  if (v == "debug") return LogLevel::Debug;
  return LogLevel::Info;
}
LogLevel& level_setting() {
  static LogLevel level = parse_level();
  return level;
}
}  // namespace

LogLevel log_level() {
  return level_setting();
}
void set_log_level(LogLevel level) {
  level_setting() = level;
}

void log_message(LogLevel level, const std::string& message) {
  static std::mutex mutex;
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "[tessel %s] %s\n", kNames[int(level)], message.c_str());
}

}  // namespace tessel
