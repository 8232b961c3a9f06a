#include "ops/layernorm_linear/layernorm_linear.h"

#include "ops/reference_mode.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace megafold::ops {

at::Tensor layernorm_linear(const at::Tensor& x, const at::Tensor& ln_weight,
                            const at::Tensor& ln_bias, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
  if (reference_only()) return layernorm_linear_ref(x, ln_weight, ln_bias, weight, bias);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::layernorm_linear", "")
                                 .typed<decltype(layernorm_linear)>();
  return handle.call(x, ln_weight, ln_bias, weight, bias);
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("layernorm_linear(Tensor x, Tensor ln_weight, Tensor ln_bias, Tensor weight, Tensor? bias)"
        " -> Tensor");
}

// The reference is built from differentiable ATen ops, so autograd and autocast come from
// the decomposition. A CUDA kernel registers CUDA and Autograd kernels beside it.
TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("layernorm_linear", &megafold::ops::layernorm_linear_ref);
}
