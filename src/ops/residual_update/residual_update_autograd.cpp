// CUDA binding of residual_update (AutogradCUDA and CUDA keys): z in fp32 or the update's
// 16-bit dtype, update and gate of one dtype, a scale of z's rank (4-d when it broadcasts)
// through residual_update.cu; anything else, or a scale that wants a gradient, runs the ATen
// reference.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/cuda_binding.h"
#include "ops/residual_update/residual_update.h"
#include "ops/residual_update/residual_update_cuda.h"

namespace megafold::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The kernels' view: z as [rows, c]; the scale (fp32) through strides over [d0, d1, d2, c].
cuda::ResidualUpdateParams params(const at::Tensor& z, at::ScalarType update_dtype, const at::Tensor& gate,
                                  const at::Tensor& scale) {
  cuda::ResidualUpdateParams p{};
  p.z_dtype = kernel_dtype(z.scalar_type());
  p.u_dtype = kernel_dtype(update_dtype);
  p.c = z.size(-1);
  p.rows = p.c == 0 ? 0 : z.numel() / p.c;
  p.gate = gate.defined() ? gate.data_ptr() : nullptr;
  if (scale.defined()) {
    const at::Tensor s = scale.expand(z.sizes());
    p.d1 = z.size(1);
    p.d2 = z.size(2);
    for (int d = 0; d < 4; ++d) p.scale_stride[d] = s.stride(d);
    p.scale = scale.data_ptr<float>();
  }
  return p;
}

// Inputs z, update, gate (or empty), scale (or empty), and whether the result is returned twice
// (residual_update_forked). Saves the gate and the scale, and the update only for the gate's
// gradient; z is not needed again (its gradient is the incoming one). Keeping an ungated update
// alive would hold one more pair tensor per residual step.
struct ResidualUpdateFunction : public torch::autograd::Function<ResidualUpdateFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& z_in, const at::Tensor& update_in,
                               const at::Tensor& gate_in, const at::Tensor& scale_in, bool forked) {
    const c10::cuda::CUDAGuard guard(z_in.device());
    // A handle without a gradient (the forked step's, e.g. in a recomputed block whose single
    // track takes none) comes undefined rather than as a pair-sized tensor of zeros to add.
    ctx->set_materialize_grads(false);
    const at::Tensor z = aligned_rows(z_in), update = aligned_rows(update_in);
    const at::Tensor gate = gate_in.numel() > 0 ? aligned_rows(gate_in) : at::Tensor();
    const at::Tensor scale = scale_in.numel() > 0 ? scale_in.to(at::kFloat) : at::Tensor();
    const at::Tensor out = at::empty(z.sizes(), z.options());
    cuda::ResidualUpdateParams p = params(z, update.scalar_type(), gate, scale);
    p.z = z.data_ptr();
    p.update = update.data_ptr();
    p.out = out.data_ptr();
    cuda::residual_update_forward(p, current_stream(z));
    const at::Tensor none = at::empty({0}, z.options());
    ctx->save_for_backward({gate.defined() ? update : none, gate.defined() ? gate : none, scale.defined() ? scale : none});
    ctx->saved_data["z_dtype"] = static_cast<int64_t>(z.scalar_type());
    ctx->saved_data["update_dtype"] = static_cast<int64_t>(update.scalar_type());
    if (forked) return {out, out.view_as(out)};
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor gate = s[1].numel() > 0 ? s[1] : at::Tensor(), scale = s[2].numel() > 0 ? s[2] : at::Tensor();
    // The forked step's two handles: their gradients are summed in the pass below when both came.
    const at::Tensor second = grads.size() > 1 ? grads[1] : at::Tensor();
    const at::Tensor first = grads[0].defined() ? grads[0] : second;
    if (!first.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const c10::cuda::CUDAGuard guard(first.device());
    const auto z_dtype = static_cast<at::ScalarType>(ctx->saved_data["z_dtype"].toInt());
    const auto update_dtype = static_cast<at::ScalarType>(ctx->saved_data["update_dtype"].toInt());
    const at::Tensor g = aligned_rows(first.to(z_dtype));
    const bool both = grads[0].defined() && second.defined();
    const at::Tensor g2 = both ? aligned_rows(second.to(z_dtype)) : at::Tensor();
    const at::Tensor g_sum = both ? at::empty_like(g) : at::Tensor();
    const at::Tensor d_update = at::empty(g.sizes(), g.options().dtype(update_dtype));
    const at::Tensor d_gate = gate.defined() ? at::empty_like(gate) : at::Tensor();
    cuda::ResidualUpdateParams p = params(g, update_dtype, gate, scale);
    p.update = gate.defined() ? s[0].data_ptr() : nullptr;
    p.grad = g.data_ptr();
    p.grad2 = both ? g2.data_ptr() : nullptr;
    p.grad_sum = both ? g_sum.data_ptr() : nullptr;
    p.d_update = d_update.data_ptr();
    p.d_gate = gate.defined() ? d_gate.data_ptr() : nullptr;
    cuda::residual_update_backward(p, current_stream(g));
    return {both ? g_sum : first, d_update, d_gate, at::Tensor(), at::Tensor()};
  }
};

// The kernels' outputs (the result, twice when forked), or empty where the reference serves.
variable_list residual_update_kernels(const at::Tensor& z, const at::Tensor& update,
                                      const std::optional<at::Tensor>& gate, const std::optional<at::Tensor>& scale,
                                      bool forked) {
  check_residual_update_args(z, update, gate, scale);
  const bool has_gate = gate.has_value() && gate->defined(), has_scale = scale.has_value() && scale->defined();
  const at::ScalarType zt = z.scalar_type(), ut = update.scalar_type();
  const bool types = (zt == at::kFloat && (ut == at::kFloat || is_16bit(ut))) || (is_16bit(zt) && ut == zt);
  const bool takes = types && (!has_gate || gate->scalar_type() == ut) &&
                     (!has_scale || (z.dim() == 4 && !scale->requires_grad()));
  if (!takes || !kernels_run_on(z, "residual_update")) return {};
  const at::Tensor none = at::empty({0}, z.options());
  return ResidualUpdateFunction::apply(z, update, has_gate ? *gate : none, has_scale ? *scale : none, forked);
}

at::Tensor residual_update_cuda(const at::Tensor& z, const at::Tensor& update, const std::optional<at::Tensor>& gate,
                                const std::optional<at::Tensor>& scale) {
  const variable_list out = residual_update_kernels(z, update, gate, scale, false);
  return out.empty() ? residual_update_ref(z, update, gate, scale) : out[0];
}

std::tuple<at::Tensor, at::Tensor> residual_update_forked_cuda(const at::Tensor& z, const at::Tensor& update,
                                                               const std::optional<at::Tensor>& gate,
                                                               const std::optional<at::Tensor>& scale) {
  const variable_list out = residual_update_kernels(z, update, gate, scale, true);
  if (out.empty()) return residual_update_forked_ref(z, update, gate, scale);
  return {out[0], out[1]};
}

}  // namespace
}  // namespace megafold::ops

TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("residual_update", &megafold::ops::residual_update_cuda);
  m.impl("residual_update_forked", &megafold::ops::residual_update_forked_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("residual_update", &megafold::ops::residual_update_cuda);
  m.impl("residual_update_forked", &megafold::ops::residual_update_forked_cuda);
}
