#pragma once
// Argument validation shared by the op entry points: shapes and dtypes are checked once at
// the API edge and the messages name the op and the argument.
//
// Messages are assembled from std::string pieces and raised as one string, never through
// iostreams in this library: loaded into a Python process, formatting integers with
// std::ostream from this .so crashed (seen on the GPU image, torch 2.11 / g++ 13), while the
// same error path in the C++ binaries worked. MF_CHECK (core/check.h), used by the kernels'
// host code, formats text and numbers the same way.
#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace megafold::ops::detail {

// Raises c10::Error (RuntimeError in Python) with "megafold::<op>: <message>".
[[noreturn]] void fail(std::string_view op, const std::string& message);

// "[2, 3, *]" for sizes (negative entries print as *).
std::string shape_string(c10::IntArrayRef sizes);

// Checks t.dim() == dims and, for each entry of sizes that is >= 0, that dimension's size.
void check_shape(std::string_view op, std::string_view arg, const at::Tensor& t,
                 std::initializer_list<int64_t> sizes);
// Optional variant of check_shape; does nothing when t is empty.
void check_shape(std::string_view op, std::string_view arg, const std::optional<at::Tensor>& t,
                 std::initializer_list<int64_t> sizes);
// Checks that t is floating point and on the same device as ref.
void check_float_like(std::string_view op, std::string_view arg, const at::Tensor& t,
                      const at::Tensor& ref);

}  // namespace megafold::ops::detail
