#pragma once
// One family of check macros. Every failure names the failing expression, file and line;
// user-facing messages add what to do about it. Nothing below the CLI calls exit().
#include <sstream>
#include <stdexcept>
#include <string>

namespace megafold {

// Thrown for invalid arguments, bad input files and broken invariants.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
[[noreturn]] void fail(const char* expr, const char* file, int line, const Args&... msg) {
  std::ostringstream os;
  ((os << msg), ...);
  os << " [" << expr << " failed at " << file << ":" << line << "]";
  throw Error(os.str());
}
}  // namespace detail

}  // namespace megafold

// MF_CHECK(cond, message parts...): throw megafold::Error naming cond, file and line.
#define MF_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) ::megafold::detail::fail(#cond, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
