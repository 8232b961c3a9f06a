#pragma once
// The attention core shared by every 3D/2D attention of the model: a batch of R independent
// rows of N tokens, each row attending over its own N keys, with one pair bias shared by
// all rows (AF3 SI Alg. 14/15 around starting/ending node, MSA row attention Alg. 10,
// single attention with pair bias Alg. 24 with R = 1).
//
//   o[b,r,i,h,:] = sigmoid(gate[b,r,i,h,:]) *
//                  sum_j softmax_j(q[b,r,i,h,:] . k[b,r,j,h,:] / sqrt(d) + bias[b,h,i,j]) v[b,r,j,h,:]
//
//   q, k, v  [B, R, N, H, d]   any strides: the ending-node variant passes transposed views
//                               of the pair projections instead of copies
//   bias     [B, H, N, N]      optional, shared by all R rows
//   mask     [B, R, N]         optional key mask (nonzero = attend); a fully masked row
//                               gives zeros and zero gradients, never NaN
//   gate     [B, R, N, H, d]   optional pre-sigmoid output gate
//   returns  [B, R, N, H, d]
// Registered as torch.ops.megafold.triangle_attention.
#include <ATen/core/Tensor.h>

#include <optional>

namespace megafold::ops {

at::Tensor triangle_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& bias,
                              const std::optional<at::Tensor>& mask,
                              const std::optional<at::Tensor>& gate);

// Triangle attention read straight from the pair stack's one projection of LayerNorm(z) (AF3
// SI Alg. 14 / 15, lines 1-4), proj [B, R, N, W]: columns q, k, v and gate (H * d each, heads
// outer), the pair bias (H), then padding (W - 4 H d - H columns, e.g. to 16-byte rows).
//   P = proj (around starting node) or proj.transpose(1, 2) (ending node: rows of z^T)
//   q[b,r,n,h,:] = P[b,r,n, h d ..], k, v, gate likewise at column offsets H d, 2 H d, 3 H d
//   bias[b,h,i,j] = P[b,i,j, 4 H d + h], unless `bias` [B, H, N, N] is given (the row-sharded
//                   stack's, gathered from every rank; proj's bias columns then get no gradient)
//   mask          [B, R, N] in P's orientation, optional
//   returns triangle_attention(q, k, v, bias, mask, gate) [B, R, N, H, d]; for the ending node
//   its rows and columns are swapped in memory, so out.transpose(1, 2) is contiguous.
// On CUDA the backward writes proj's gradient whole through strides (q, k, v, gate, bias
// columns by the kernels, padding zeroed): no slice gradients or concatenation.
// Registered as torch.ops.megafold.triangle_attention_projected.
at::Tensor triangle_attention_projected(const at::Tensor& proj, const std::optional<at::Tensor>& bias,
                                        const std::optional<at::Tensor>& mask, int64_t heads, int64_t head_dim,
                                        bool transposed);
at::Tensor triangle_attention_projected_ref(const at::Tensor& proj, const std::optional<at::Tensor>& bias,
                                            const std::optional<at::Tensor>& mask, int64_t heads,
                                            int64_t head_dim, bool transposed);

// The q, k, v, gate views and the bias of a projection laid out as above.
struct ProjectedOperands {
  at::Tensor q, k, v, gate, bias;
};
ProjectedOperands projected_operands(const at::Tensor& proj, int64_t heads, int64_t head_dim, bool transposed);

// Shape/dtype/device checks shared by the reference and the CUDA path.
void check_triangle_attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::optional<at::Tensor>& bias,
                                   const std::optional<at::Tensor>& mask,
                                   const std::optional<at::Tensor>& gate);

at::Tensor triangle_attention_ref(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& bias,
                                  const std::optional<at::Tensor>& mask,
                                  const std::optional<at::Tensor>& gate);

}  // namespace megafold::ops
