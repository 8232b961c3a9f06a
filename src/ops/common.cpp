#include "ops/common.h"

#include <c10/util/Exception.h>

#include <sstream>

namespace megafold::ops::detail {

static std::string shape_str(std::initializer_list<int64_t> sizes) {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (int64_t s : sizes) {
    os << (first ? "" : ", ") << (s >= 0 ? std::to_string(s) : std::string("*"));
    first = false;
  }
  os << "]";
  return os.str();
}

void check_shape(std::string_view op, std::string_view arg, const at::Tensor& t,
                 std::initializer_list<int64_t> sizes) {
  TORCH_CHECK(t.defined(), "megafold::", op, ": argument '", arg, "' is undefined");
  bool ok = t.dim() == static_cast<int64_t>(sizes.size());
  int64_t d = 0;
  for (int64_t s : sizes) {
    if (ok && s >= 0 && t.size(d) != s) ok = false;
    ++d;
  }
  TORCH_CHECK(ok, "megafold::", op, ": argument '", arg, "' has shape ", t.sizes(),
              ", expected ", shape_str(sizes));
}

void check_shape(std::string_view op, std::string_view arg, const std::optional<at::Tensor>& t,
                 std::initializer_list<int64_t> sizes) {
  if (t.has_value() && t->defined()) check_shape(op, arg, *t, sizes);
}

void check_float_like(std::string_view op, std::string_view arg, const at::Tensor& t,
                      const at::Tensor& ref) {
  TORCH_CHECK(t.is_floating_point(), "megafold::", op, ": argument '", arg,
              "' must be floating point, got ", t.scalar_type());
  TORCH_CHECK(t.device() == ref.device(), "megafold::", op, ": argument '", arg, "' is on ",
              t.device(), " but the input is on ", ref.device());
}

}  // namespace megafold::ops::detail
