#pragma once
// Triangular multiplicative update, outgoing or incoming edges (AF3 SI Alg. 12 / 13).
//   x   = LayerNorm_in(z)                                      [B, N, N, c_z]
//   a   = sigmoid(x @ w_ab[g_a]^T) * (x @ w_ab[p_a]^T) * mask  [B, N, N, c]
//   b   = sigmoid(x @ w_ab[g_b]^T) * (x @ w_ab[p_b]^T) * mask  [B, N, N, c]
//   outgoing: t_ij = sum_k a_ik * b_jk      incoming: t_ij = sum_k a_ki * b_kj
//   out = sigmoid(x @ w_g^T) * (LayerNorm_out(t) @ w_o^T)      [B, N, N, c_z]
//
//   z                  [B, N, N, c_z]
//   mask               [B, N, N]  optional pair mask (1 = valid), any dtype
//   ln_in_weight/bias  [c_z]
//   w_ab               [4*c, c_z]  row blocks in this order: p_a, p_b, g_a, g_b
//   w_g                [c_z, c_z]  output gate
//   ln_out_weight/bias [c]
//   w_o                [c_z, c]
//   outgoing           true: Alg. 12, false: Alg. 13
//   returns the update [B, N, N, c_z]; the caller adds the residual and dropout.
// Registered as torch.ops.megafold.triangle_multiplication.
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace megafold::ops {

at::Tensor triangle_multiplication(const at::Tensor& z, const std::optional<at::Tensor>& mask,
                                   const at::Tensor& ln_in_weight, const at::Tensor& ln_in_bias,
                                   const at::Tensor& w_ab, const at::Tensor& w_g,
                                   const at::Tensor& ln_out_weight,
                                   const at::Tensor& ln_out_bias, const at::Tensor& w_o,
                                   bool outgoing);

// The op's stages between its input and output projections, shared with the model's pair
// stack (model/layers.cpp), which passes b round the ranks between the two when the pair rows
// are sharded (dist::ring_contract) and applies the output gate with dropout and the residual
// add in one pass (ops::residual_update):
//   operands: a, b [..., c] from the projection's first 4c columns (p_a, p_b, g_a, g_b) and the
//             mask, and gate = sigmoid of its remaining columns (the output gate's logits;
//             [..., 0] when there are none).
//   contract: outgoing form t[b, i, j, :] = sum_k a[b, i, k, :] * b[b, j, k, :] for a's rows i
//             and b's rows j (incoming = outgoing on transposed a and b).
// The op's output is gate * (LayerNorm_out(t) @ w_o^T).
// operands and contract are dispatcher ops (torch.ops.megafold.triangle_multiplication_*):
// on CUDA with 16-bit tensors their kernels keep a and b channel-major ([B, c, N, N] memory
// behind [B, N, N, c] views), so the contraction is cuBLAS on them without copies, and the
// projection's gradient is written whole, in one pass.
struct TriangleMultiplicationOperands {
  at::Tensor a, b, gate;
};
TriangleMultiplicationOperands triangle_multiplication_operands(const at::Tensor& proj,
                                                                const std::optional<at::Tensor>& mask, int64_t c);
// The input projection and the operands in one op:
//   operands(layernorm_linear(z, ln_w, ln_b, w), mask, c), w = [w_ab; w_g] ([4c + c_gate, c_z]).
// On H100/H200 (c and c_gate multiples of 64, 16-bit products) the operands leave the
// projection kernel's epilogue and the projection is never stored: the backward recomputes it
// in the kernel that gives its gradient and dz. Elsewhere the two ops run one after the other.
// Same values either way.
TriangleMultiplicationOperands triangle_multiplication_projection(const at::Tensor& z,
                                                                  const std::optional<at::Tensor>& mask,
                                                                  const at::Tensor& ln_w, const at::Tensor& ln_b,
                                                                  const at::Tensor& w, int64_t c);
// The same with z passed through as a fourth output (z itself) for the residual step after the
// update: on H100/H200 the backward adds that output's gradient to dz in its kernel, so no
// separate pass sums the residual stream's two gradients. torch.ops.megafold.
// triangle_multiplication_projection_passthrough.
struct TriangleMultiplicationPassthrough {
  at::Tensor a, b, gate, z;
};
TriangleMultiplicationPassthrough triangle_multiplication_projection_passthrough(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c);
at::Tensor triangle_multiplication_contract(const at::Tensor& a, const at::Tensor& b);
// The ATen references of the two dispatcher stages.
std::tuple<at::Tensor, at::Tensor, at::Tensor> triangle_multiplication_operands_ref(
    const at::Tensor& proj, const std::optional<at::Tensor>& mask, int64_t c);
at::Tensor triangle_multiplication_contract_ref(const at::Tensor& a, const at::Tensor& b);
std::tuple<at::Tensor, at::Tensor, at::Tensor> triangle_multiplication_projection_ref(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> triangle_multiplication_projection_passthrough_ref(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c);

at::Tensor triangle_multiplication_ref(const at::Tensor& z, const std::optional<at::Tensor>& mask,
                                       const at::Tensor& ln_in_weight,
                                       const at::Tensor& ln_in_bias, const at::Tensor& w_ab,
                                       const at::Tensor& w_g, const at::Tensor& ln_out_weight,
                                       const at::Tensor& ln_out_bias, const at::Tensor& w_o,
                                       bool outgoing);

}  // namespace megafold::ops
