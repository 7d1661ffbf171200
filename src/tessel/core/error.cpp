// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/error.h"

#include <cstring>

#include "tessel/core/log.h"

namespace tessel::detail {

void throw_check_failure(const char* cond, const char* file, int line, const std::string& message) {
  // Keep the file name short: the path below src/ is enough to find it.
  const char* short_file = std::strstr(file, "tessel/");
  std::ostringstream where;
  where << (short_file ? short_file : file) << ":" << line;
  if (cond != nullptr) where << ", " << cond;
  std::string what = message.empty() ? std::string("check failed") : message;
  if (log_level() >= LogLevel::Debug) what += " [" + where.str() + "]";
  throw Error(what, where.str());
}

}  // namespace tessel::detail
