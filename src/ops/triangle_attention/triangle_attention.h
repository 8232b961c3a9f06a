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
