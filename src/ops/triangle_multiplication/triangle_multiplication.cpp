#include "ops/triangle_multiplication/triangle_multiplication.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "ops/reference_mode.h"

namespace megafold::ops {

at::Tensor triangle_multiplication(const at::Tensor& z, const std::optional<at::Tensor>& mask,
                                   const at::Tensor& ln_in_weight, const at::Tensor& ln_in_bias,
                                   const at::Tensor& w_ab, const at::Tensor& w_g,
                                   const at::Tensor& ln_out_weight,
                                   const at::Tensor& ln_out_bias, const at::Tensor& w_o,
                                   bool outgoing) {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_multiplication", "")
                                 .typed<decltype(triangle_multiplication)>();
  return handle.call(z, mask, ln_in_weight, ln_in_bias, w_ab, w_g, ln_out_weight, ln_out_bias,
                     w_o, outgoing);
}

TriangleMultiplicationOperands triangle_multiplication_operands(const at::Tensor& proj,
                                                                const std::optional<at::Tensor>& mask, int64_t c) {
  if (reference_only()) {
    const auto [a, b, gate] = triangle_multiplication_operands_ref(proj, mask, c);
    return {a, b, gate};
  }
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_multiplication_operands", "")
                                 .typed<decltype(triangle_multiplication_operands_ref)>();
  const auto [a, b, gate] = handle.call(proj, mask, c);
  return {a, b, gate};
}

TriangleMultiplicationOperands triangle_multiplication_projection(const at::Tensor& z,
                                                                  const std::optional<at::Tensor>& mask,
                                                                  const at::Tensor& ln_w, const at::Tensor& ln_b,
                                                                  const at::Tensor& w, int64_t c) {
  if (reference_only()) {
    const auto [a, b, gate] = triangle_multiplication_projection_ref(z, mask, ln_w, ln_b, w, c);
    return {a, b, gate};
  }
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_multiplication_projection", "")
                                 .typed<decltype(triangle_multiplication_projection_ref)>();
  const auto [a, b, gate] = handle.call(z, mask, ln_w, ln_b, w, c);
  return {a, b, gate};
}

TriangleMultiplicationPassthrough triangle_multiplication_projection_passthrough(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c) {
  if (reference_only()) {
    const auto [a, b, gate, z_through] = triangle_multiplication_projection_passthrough_ref(z, mask, ln_w, ln_b, w, c);
    return {a, b, gate, z_through};
  }
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_multiplication_projection_passthrough", "")
                                 .typed<decltype(triangle_multiplication_projection_passthrough_ref)>();
  const auto [a, b, gate, z_through] = handle.call(z, mask, ln_w, ln_b, w, c);
  return {a, b, gate, z_through};
}

at::Tensor triangle_multiplication_contract(const at::Tensor& a, const at::Tensor& b) {
  if (reference_only()) return triangle_multiplication_contract_ref(a, b);
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("megafold::triangle_multiplication_contract", "")
                                 .typed<decltype(triangle_multiplication_contract_ref)>();
  return handle.call(a, b);
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("triangle_multiplication(Tensor z, Tensor? mask, Tensor ln_in_weight, Tensor ln_in_bias,"
        " Tensor w_ab, Tensor w_g, Tensor ln_out_weight, Tensor ln_out_bias, Tensor w_o,"
        " bool outgoing) -> Tensor");
  m.def("triangle_multiplication_operands(Tensor proj, Tensor? mask, int c) -> (Tensor, Tensor, Tensor)");
  m.def("triangle_multiplication_contract(Tensor a, Tensor b) -> Tensor");
  m.def("triangle_multiplication_projection(Tensor z, Tensor? mask, Tensor ln_w, Tensor ln_b, Tensor w, int c)"
        " -> (Tensor, Tensor, Tensor)");
  m.def("triangle_multiplication_projection_passthrough(Tensor(a) z, Tensor? mask, Tensor ln_w, Tensor ln_b,"
        " Tensor w, int c) -> (Tensor, Tensor, Tensor, Tensor(a))");
}

TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("triangle_multiplication", &megafold::ops::triangle_multiplication_ref);
  m.impl("triangle_multiplication_operands", &megafold::ops::triangle_multiplication_operands_ref);
  m.impl("triangle_multiplication_contract", &megafold::ops::triangle_multiplication_contract_ref);
  m.impl("triangle_multiplication_projection", &megafold::ops::triangle_multiplication_projection_ref);
  m.impl("triangle_multiplication_projection_passthrough",
         &megafold::ops::triangle_multiplication_projection_passthrough_ref);
}
