#include "ops/swiglu_transition/swiglu_transition.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "ops/reference_mode.h"

namespace megafold::ops {

at::Tensor swiglu_transition(const at::Tensor& x, const at::Tensor& ln_weight,
                             const at::Tensor& ln_bias, const at::Tensor& w_in,
                             const at::Tensor& w_out) {
  if (reference_only()) return swiglu_transition_ref(x, ln_weight, ln_bias, w_in, w_out);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::swiglu_transition", "")
                                 .typed<decltype(swiglu_transition)>();
  return handle.call(x, ln_weight, ln_bias, w_in, w_out);
}

std::tuple<at::Tensor, at::Tensor> swiglu_transition_passthrough(const at::Tensor& x, const at::Tensor& ln_weight,
                                                                 const at::Tensor& ln_bias, const at::Tensor& w_in,
                                                                 const at::Tensor& w_out) {
  if (reference_only()) return swiglu_transition_passthrough_ref(x, ln_weight, ln_bias, w_in, w_out);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::swiglu_transition_passthrough", "")
                                 .typed<decltype(swiglu_transition_passthrough)>();
  return handle.call(x, ln_weight, ln_bias, w_in, w_out);
}

at::Tensor swiglu(const at::Tensor& ab) {
  if (reference_only()) return swiglu_ref(ab);
  static const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("megafold::swiglu", "").typed<decltype(swiglu)>();
  return handle.call(ab);
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("swiglu_transition(Tensor x, Tensor ln_weight, Tensor ln_bias, Tensor w_in, Tensor w_out)"
        " -> Tensor");
  m.def("swiglu_transition_passthrough(Tensor(a) x, Tensor ln_weight, Tensor ln_bias, Tensor w_in, Tensor w_out)"
        " -> (Tensor, Tensor(a))");
  m.def("swiglu(Tensor ab) -> Tensor");
}

TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("swiglu_transition", &megafold::ops::swiglu_transition_ref);
  m.impl("swiglu_transition_passthrough", &megafold::ops::swiglu_transition_passthrough_ref);
  m.impl("swiglu", &megafold::ops::swiglu_ref);
}
