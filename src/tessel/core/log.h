// SPDX-License-Identifier: Apache-2.0
// Levelled logging to stderr. The level comes from TESSEL_LOG (error, warn, info, debug; default
// info) or set_log_level().
#pragma once

#include <string>

#include "tessel/core/error.h"

namespace tessel {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, Args&&... args) {
  if (level <= log_level()) log_message(level, detail::concat(std::forward<Args>(args)...));
}

}  // namespace tessel
