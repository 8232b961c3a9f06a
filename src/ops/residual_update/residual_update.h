#pragma once
// The residual step of the Pairformer's pair stack (AF3 SI Alg. 17): z + dropout(update), with
// an optional gate the update is still to be multiplied by (triangle multiplication's output
// gate), as one pass over the pair tensor instead of three.
//   out = z + scale * gate * update
//
//   z       [..., c]  the residual stream; the result has its dtype
//   update  z's shape, any float dtype (a 16-bit projection output under autocast)
//   gate    optional, update's shape
//   scale   optional, z's rank, each dim 1 or z's: the dropout keep mask times 1 / (1 - rate)
//           (shared over rows or columns: [B, 1, N, c] or [B, N, 1, c]). A constant: it takes
//           no gradient.
// The sum is formed in fp32 (float64 for float64 inputs) and rounded once to z's dtype.
// Backward: dz = the incoming gradient itself (no pass), d update = g * scale * gate and
// d gate = g * scale * update in one pass, each in its input's dtype.
// Registered as torch.ops.megafold.residual_update; on CUDA one streaming kernel each way
// (residual_update.cu), anything else the ATen reference.
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace megafold::ops {

at::Tensor residual_update(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                           const std::optional<at::Tensor>& scale);

// The same step for a residual stream with two consumers (the next op's input and its own
// residual step): the result twice, the second a view of the first. Their gradients reach this
// op's backward apart, and on CUDA its one pass adds them (and writes the sum, z's gradient)
// where autograd would have summed them in a pass of its own. torch.ops.megafold.
// residual_update_forked (its schema cannot say that the second result aliases the first: for
// eager use, not for functionalizing tracers).
std::tuple<at::Tensor, at::Tensor> residual_update_forked(const at::Tensor& z, const at::Tensor& update,
                                                          const std::optional<at::Tensor>& gate,
                                                          const std::optional<at::Tensor>& scale);

at::Tensor residual_update_ref(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                               const std::optional<at::Tensor>& scale);
std::tuple<at::Tensor, at::Tensor> residual_update_forked_ref(const at::Tensor& z, const at::Tensor& update,
                                                              const std::optional<at::Tensor>& gate,
                                                              const std::optional<at::Tensor>& scale);

// Shape, dtype and device checks shared by the reference and the CUDA path.
void check_residual_update_args(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                                const std::optional<at::Tensor>& scale);

}  // namespace megafold::ops
