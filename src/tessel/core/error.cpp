// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/error.h"

#include <cstring>

namespace tessel::detail {

void throw_check_failure(const char* cond, const char* file, int line, const std::string& message) {
  // Keep the file name short: the path below src/ is enough to find it.
  const char* short_file = std::strstr(file, "tessel/");
  std::ostringstream out;
  out << message;
  if (message.empty() && cond != nullptr) out << "check failed";
  out << " [" << (short_file ? short_file : file) << ":" << line;
  if (cond != nullptr) out << ", " << cond;
  out << "]";
  throw Error(out.str());
}

}  // namespace tessel::detail
