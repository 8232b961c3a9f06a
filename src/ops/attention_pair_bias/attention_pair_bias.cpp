#include "ops/attention_pair_bias/attention_pair_bias.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace megafold::ops {

at::Tensor attention_pair_bias(const at::Tensor& s, const at::Tensor& z,
                               const std::optional<at::Tensor>& mask,
                               const at::Tensor& ln_s_weight, const at::Tensor& ln_s_bias,
                               const at::Tensor& w_qkvg, const at::Tensor& b_q,
                               const at::Tensor& ln_z_weight, const at::Tensor& ln_z_bias,
                               const at::Tensor& w_z, const at::Tensor& w_o, int64_t n_heads) {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::attention_pair_bias", "")
                                 .typed<decltype(attention_pair_bias)>();
  return handle.call(s, z, mask, ln_s_weight, ln_s_bias, w_qkvg, b_q, ln_z_weight, ln_z_bias, w_z,
                     w_o, n_heads);
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("attention_pair_bias(Tensor s, Tensor z, Tensor? mask, Tensor ln_s_weight,"
        " Tensor ln_s_bias, Tensor w_qkvg, Tensor b_q, Tensor ln_z_weight, Tensor ln_z_bias,"
        " Tensor w_z, Tensor w_o, int n_heads) -> Tensor");
}

TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("attention_pair_bias", &megafold::ops::attention_pair_bias_ref);
}
