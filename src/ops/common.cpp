#include "ops/common.h"

#include <c10/util/Exception.h>

namespace megafold::ops::detail {

void fail(std::string_view op, const std::string& message) {
  const std::string full = "megafold::" + std::string(op) + ": " + message;
  TORCH_CHECK(false, full);
}

std::string shape_string(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    s += (i ? ", " : "") + (sizes[i] >= 0 ? std::to_string(sizes[i]) : std::string("*"));
  return s + "]";
}

void check_shape(std::string_view op, std::string_view arg, const at::Tensor& t,
                 std::initializer_list<int64_t> sizes) {
  const std::string name = "argument '" + std::string(arg) + "'";
  if (!t.defined()) fail(op, name + " is undefined");
  bool ok = t.dim() == static_cast<int64_t>(sizes.size());
  int64_t d = 0;
  for (int64_t s : sizes) {
    if (ok && s >= 0 && t.size(d) != s) ok = false;
    ++d;
  }
  if (!ok)
    fail(op, name + " has shape " + shape_string(t.sizes()) + ", expected " +
                 shape_string(c10::IntArrayRef(sizes.begin(), sizes.size())));
}

void check_shape(std::string_view op, std::string_view arg, const std::optional<at::Tensor>& t,
                 std::initializer_list<int64_t> sizes) {
  if (t.has_value() && t->defined()) check_shape(op, arg, *t, sizes);
}

void check_float_like(std::string_view op, std::string_view arg, const at::Tensor& t,
                      const at::Tensor& ref) {
  const std::string name = "argument '" + std::string(arg) + "'";
  if (!t.is_floating_point())
    fail(op, name + " must be floating point, got " + std::string(c10::toString(t.scalar_type())));
  if (t.device() != ref.device())
    fail(op, name + " is on " + t.device().str() + " but the input is on " + ref.device().str());
}

}  // namespace megafold::ops::detail
