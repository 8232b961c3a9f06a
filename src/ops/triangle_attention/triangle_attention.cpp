#include "ops/triangle_attention/triangle_attention.h"

#include "ops/reference_mode.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace megafold::ops {

at::Tensor triangle_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& bias,
                              const std::optional<at::Tensor>& mask,
                              const std::optional<at::Tensor>& gate) {
  if (reference_only()) return triangle_attention_ref(q, k, v, bias, mask, gate);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_attention", "")
                                 .typed<decltype(triangle_attention)>();
  return handle.call(q, k, v, bias, mask, gate);
}

at::Tensor triangle_attention_projected(const at::Tensor& proj, const std::optional<at::Tensor>& bias,
                                        const std::optional<at::Tensor>& mask, int64_t heads, int64_t head_dim,
                                        bool transposed) {
  if (reference_only()) return triangle_attention_projected_ref(proj, bias, mask, heads, head_dim, transposed);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_attention_projected", "")
                                 .typed<decltype(triangle_attention_projected)>();
  return handle.call(proj, bias, mask, heads, head_dim, transposed);
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("triangle_attention(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? mask,"
        " Tensor? gate) -> Tensor");
  m.def("triangle_attention_projected(Tensor proj, Tensor? bias, Tensor? mask, int heads, int head_dim,"
        " bool transposed) -> Tensor");
}

TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("triangle_attention", &megafold::ops::triangle_attention_ref);
  m.impl("triangle_attention_projected", &megafold::ops::triangle_attention_projected_ref);
}
