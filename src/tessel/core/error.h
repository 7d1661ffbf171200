// SPDX-License-Identifier: Apache-2.0
// tessel::Error and TESSEL_CHECK: every failed precondition in the library throws one Error whose
// message names the values that were wrong; where() names the check and the line it failed at.
// The message carries that location too ("... [tessel/io/x.cpp:12, n > 0]") only at
// TESSEL_LOG=debug: it helps the people who work on tessel and is noise to those who use it.
// Only cli/ turns an Error into an exit code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tessel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  Error(const std::string& what, std::string where)
      : std::runtime_error(what), where_(std::move(where)) {}
  // "tessel/io/x.cpp:12, n > 0" for a failed TESSEL_CHECK; "" when not known.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

namespace detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] void throw_check_failure(const char* cond, const char* file, int line,
                                      const std::string& message);

}  // namespace detail
}  // namespace tessel

// TESSEL_CHECK(cond, parts...): throws tessel::Error when cond is false. The parts are streamed
// together, so a message reads naturally with the values inline:
//   TESSEL_CHECK(a.size(1) == b.size(0), "matmul: inner sizes differ: ", a.size(1), " vs ",
//   b.size(0));
#define TESSEL_CHECK(cond, ...)                                                     \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::tessel::detail::throw_check_failure(#cond, __FILE__, __LINE__,              \
                                            ::tessel::detail::concat(__VA_ARGS__)); \
    }                                                                               \
  } while (0)

// TESSEL_FAIL(parts...): throws unconditionally (unsupported value, unreachable case).
#define TESSEL_FAIL(...)                                             \
  ::tessel::detail::throw_check_failure(nullptr, __FILE__, __LINE__, \
                                        ::tessel::detail::concat(__VA_ARGS__))
