#include <ATen/TensorOperators.h>

#include "ops/common.h"
#include "ops/residual_update/residual_update.h"

namespace megafold::ops {

void check_residual_update_args(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                                const std::optional<at::Tensor>& scale) {
  constexpr const char* op = "residual_update";
  if (z.dim() < 1) detail::fail(op, "argument 'z' must have at least 1 dim");
  detail::check_float_like(op, "z", z, z);
  detail::check_float_like(op, "update", update, z);
  if (update.sizes() != z.sizes())
    detail::fail(op, "argument 'update' must have z's shape " + detail::shape_string(z.sizes()) + ", got " +
                         detail::shape_string(update.sizes()));
  if (gate.has_value() && gate->defined()) {
    detail::check_float_like(op, "gate", *gate, z);
    if (gate->sizes() != z.sizes())
      detail::fail(op, "argument 'gate' must have z's shape " + detail::shape_string(z.sizes()) + ", got " +
                           detail::shape_string(gate->sizes()));
  }
  if (scale.has_value() && scale->defined()) {
    detail::check_float_like(op, "scale", *scale, z);
    bool broadcasts = scale->dim() == z.dim();
    for (int64_t d = 0; broadcasts && d < z.dim(); ++d) broadcasts = scale->size(d) == 1 || scale->size(d) == z.size(d);
    if (!broadcasts)
      detail::fail(op, "argument 'scale' must have z's rank with each dim 1 or z's (" +
                           detail::shape_string(z.sizes()) + "), got " + detail::shape_string(scale->sizes()));
  }
}

at::Tensor residual_update_ref(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                               const std::optional<at::Tensor>& scale) {
  check_residual_update_args(z, update, gate, scale);
  // The sum in fp32 (or float64), like the kernel: a 16-bit update is widened, not z rounded.
  const at::ScalarType t = z.scalar_type() == at::kDouble || update.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor u = update.to(t);
  if (gate.has_value() && gate->defined()) u = u * gate->to(t);
  if (scale.has_value() && scale->defined()) u = u * scale->to(t);
  return (z.to(t) + u).to(z.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> residual_update_forked_ref(const at::Tensor& z, const at::Tensor& update,
                                                              const std::optional<at::Tensor>& gate,
                                                              const std::optional<at::Tensor>& scale) {
  // A view of the result: autograd sums the two handles' gradients, as it would for one tensor.
  const at::Tensor out = residual_update_ref(z, update, gate, scale);
  return {out, out.view_as(out)};
}

}  // namespace megafold::ops
