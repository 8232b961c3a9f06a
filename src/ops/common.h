#pragma once
// Argument validation shared by the op entry points: shapes and dtypes are checked once at
// the API edge and the messages name the op and the argument.
#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <optional>
#include <string_view>

namespace megafold::ops::detail {

// Checks t.dim() == dims and, for each entry of sizes that is >= 0, that dimension's size.
void check_shape(std::string_view op, std::string_view arg, const at::Tensor& t,
                 std::initializer_list<int64_t> sizes);
// Checks that t is floating point and on the same device as ref.
void check_float_like(std::string_view op, std::string_view arg, const at::Tensor& t,
                      const at::Tensor& ref);
// Optional variant of check_shape; does nothing when t is empty.
void check_shape(std::string_view op, std::string_view arg, const std::optional<at::Tensor>& t,
                 std::initializer_list<int64_t> sizes);

}  // namespace megafold::ops::detail
