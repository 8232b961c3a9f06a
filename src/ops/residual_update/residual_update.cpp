#include "ops/residual_update/residual_update.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "ops/reference_mode.h"

namespace megafold::ops {

at::Tensor residual_update(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                           const std::optional<at::Tensor>& scale) {
  if (reference_only()) return residual_update_ref(z, update, gate, scale);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::residual_update", "")
                                 .typed<decltype(residual_update)>();
  return handle.call(z, update, gate, scale);
}

std::tuple<at::Tensor, at::Tensor> residual_update_forked(const at::Tensor& z, const at::Tensor& update,
                                                          const std::optional<at::Tensor>& gate,
                                                          const std::optional<at::Tensor>& scale) {
  if (reference_only()) return residual_update_forked_ref(z, update, gate, scale);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::residual_update_forked", "")
                                 .typed<decltype(residual_update_forked)>();
  return handle.call(z, update, gate, scale);
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("residual_update(Tensor z, Tensor update, Tensor? gate, Tensor? scale) -> Tensor");
  m.def("residual_update_forked(Tensor z, Tensor update, Tensor? gate, Tensor? scale) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("residual_update", &megafold::ops::residual_update_ref);
  m.impl("residual_update_forked", &megafold::ops::residual_update_forked_ref);
}
