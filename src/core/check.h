#pragma once
// One family of check macros. Every failure names the failing expression, file and line;
// user-facing messages add what to do about it. Nothing below the CLI calls exit().
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace megafold {

// Thrown for invalid arguments, bad input files and broken invariants.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Text and numbers are appended without iostreams: the op library is loaded into Python
// processes, where formatting an integer through std::ostream from that library crashed (see
// ops/common.h). Other printable types (shapes, devices) still go through a stream.
template <typename T>
void append(std::string& out, const T& v) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, char>) {
    out += v;
  } else if constexpr (std::is_enum_v<T>) {
    append(out, static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    out += std::to_string(static_cast<long long>(v));
  } else if constexpr (std::is_integral_v<T>) {
    out += std::to_string(static_cast<unsigned long long>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
    out += buf;
  } else {
    std::ostringstream os;
    os << v;
    out += os.str();
  }
}

template <typename... Args>
[[noreturn]] void fail(const char* expr, const char* file, int line, const Args&... msg) {
  std::string text;
  (append(text, msg), ...);
  text += std::string(" [") + expr + " failed at " + file + ":" + std::to_string(line) + "]";
  throw Error(text);
}
}  // namespace detail

}  // namespace megafold

// MF_CHECK(cond, message parts...): throw megafold::Error naming cond, file and line.
#define MF_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) ::megafold::detail::fail(#cond, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
