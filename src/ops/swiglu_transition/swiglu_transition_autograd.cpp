// CUDA bindings of the SwiGLU transition (AutogradCUDA and CUDA keys):
//   swiglu_transition  the fused forward for c = 128 / 384 with 16-bit products
//                      (swiglu_transition_wgmma.cu for c = 128 on H100/H200,
//                      swiglu_transition_mma.cu otherwise). Backward on H100/H200 at c = 128:
//                      the fused backward kernel (dx, d ab and h), dw_out = dy^T h, and
//                      layernorm_linear's weight-gradient kernels on d ab. Elsewhere it
//                      recomputes a and b with the LayerNorm+Linear kernel, and the swiglu
//                      backward pass gives the hidden layer with d ab.
//   swiglu             16-bit ab through swiglu_gate.cu. Under autocast ab already comes in the
//                      product dtype from the projection before it.
// Anything else runs the ATen reference.
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "core/autocast.h"
#include "ops/cuda_binding.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "ops/layernorm_linear/layernorm_linear_binding.h"
#include "ops/swiglu_transition/swiglu_cuda.h"
#include "ops/swiglu_transition/swiglu_transition.h"
#include "ops/swiglu_transition/swiglu_transition_cuda.h"

namespace megafold::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::SwigluParams params(const at::Tensor& ab) {
  cuda::SwigluParams p{};
  p.dtype = kernel_dtype(ab.scalar_type());
  p.h = ab.size(-1) / 2;
  p.M = p.h == 0 ? 0 : ab.numel() / (2 * p.h);
  p.ab = ab.data_ptr();
  return p;
}

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& ab_in) {
    const c10::cuda::CUDAGuard guard(ab_in.device());
    const at::Tensor ab = aligned_rows(ab_in);
    std::vector<int64_t> shape = ab.sizes().vec();
    shape.back() /= 2;
    const at::Tensor out = at::empty(shape, ab.options());
    cuda::SwigluParams p = params(ab);
    p.out = out.data_ptr();
    cuda::swiglu_forward(p, current_stream(ab));
    ctx->save_for_backward({ab});
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ab = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(ab.device());
    if (!grads[0].defined()) return {at::zeros_like(ab)};
    const at::Tensor dh = aligned_rows(grads[0].to(ab.scalar_type()));
    const at::Tensor dab = at::empty(ab.sizes(), ab.options());
    cuda::SwigluParams p = params(ab);
    p.dh = dh.data_ptr();
    p.out = dab.data_ptr();
    cuda::swiglu_backward(p, current_stream(ab));
    return {dab};
  }
};

// The kernels' view of the op's inputs: x in fp32 or the product type, 16-bit weights, fp32
// LayerNorm parameters, all contiguous and 16-byte aligned; and their params.
struct KernelInputs {
  at::Tensor x, ln_w, ln_b, w_in, w_out;
  KernelInputs(const at::Tensor& x_in, const at::Tensor& ln_weight, const at::Tensor& ln_bias, const at::Tensor& w_in_in,
               const at::Tensor& w_out_in, at::ScalarType type)
      : x(aligned_rows(x_in.scalar_type() == at::kFloat ? x_in : x_in.to(type))),
        ln_w(aligned_rows(ln_weight.to(at::kFloat))),
        ln_b(aligned_rows(ln_bias.to(at::kFloat))),
        w_in(aligned_rows(w_in_in.to(type))),
        w_out(aligned_rows(w_out_in.to(type))) {}

  cuda::SwigluTransitionParams params() const {
    cuda::SwigluTransitionParams p{};
    p.x_dtype = kernel_dtype(x.scalar_type());
    p.dtype = kernel_dtype(w_in.scalar_type());
    p.c = x.size(-1);
    p.h = w_out.size(1);
    p.M = x.numel() / p.c;
    p.eps = static_cast<float>(kLayerNormEps);
    p.x = x.data_ptr();
    p.ln_w = ln_w.data_ptr<float>();
    p.ln_b = ln_b.data_ptr<float>();
    p.w_in = w_in.data_ptr();
    p.w_out = w_out.data_ptr();
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(x.device().index());
    p.sm90 = cuda::swiglu_transition_use_sm90(p.c, prop->major, prop->minor);
    return p;
  }
};

// Inputs: x, ln_weight, ln_bias, w_in, w_out, then the product dtype and whether x is passed
// through as a second output (whose gradient dx then includes). Saves only the inputs: the
// 2h-wide projection and the h-wide hidden layer exist in backward alone.
struct SwigluTransitionFunction : public torch::autograd::Function<SwigluTransitionFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& ln_weight,
                               const at::Tensor& ln_bias, const at::Tensor& w_in, const at::Tensor& w_out,
                               int64_t product, bool passthrough) {
    const c10::cuda::CUDAGuard guard(x.device());
    const auto type = static_cast<at::ScalarType>(product);
    const KernelInputs in(x, ln_weight, ln_bias, w_in, w_out, type);
    const at::Tensor y = at::empty(x.sizes(), x.options().dtype(type));  // [..., c]
    cuda::SwigluTransitionParams p = in.params();
    p.y = y.data_ptr();
    cuda::swiglu_transition_forward(p, current_stream(x));
    ctx->save_for_backward({x, ln_weight, ln_bias, w_in, w_out});
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(at::kCUDA);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(at::kCUDA);
    ctx->saved_data["product"] = product;
    ctx->saved_data["sm90"] = p.sm90;
    if (passthrough) return {y, x};
    return {y};
  }

  // On H100/H200 at c = 128: one fused kernel gives dx, d ab and h from x and dy; then
  // dw_out = dy^T h (in the product dtype, as the reference's linear differentiates) and
  // layernorm_linear's weight-gradient kernels give dw_in, d ln_w and d ln_b from d ab.
  // dx_add (x's dtype, or undefined) is added to dx by the kernel.
  static variable_list fused_backward(AutogradContext* ctx, const variable_list& saved, const at::Tensor& grad,
                                      const at::Tensor& dx_add, at::ScalarType type) {
    const at::Tensor &x = saved[0], &ln_weight = saved[1], &ln_bias = saved[2], &w_in = saved[3], &w_out = saved[4];
    const int64_t c = w_out.size(0), hidden = w_out.size(1), M = x.numel() / c;
    const KernelInputs in(x, ln_weight, ln_bias, w_in, w_out, type);
    const at::Tensor dy = aligned_rows(grad.to(type));  // [..., c]
    const auto f32 = x.options().dtype(at::kFloat), t16 = x.options().dtype(type);
    const at::Tensor dx = at::empty(in.x.sizes(), in.x.options());
    const at::Tensor dab = at::empty({M, 2 * hidden}, t16), h = at::empty({M, hidden}, t16);
    const at::Tensor mean = at::empty({M}, f32), rstd = at::empty({M}, f32);
    const at::Tensor add = dx_add.defined() ? aligned_rows(dx_add) : at::Tensor();
    cuda::SwigluTransitionBackwardParams bp{};
    bp.f = in.params();
    bp.dy = dy.data_ptr();
    bp.dx = dx.data_ptr();
    bp.dx_add = add.defined() ? add.data_ptr() : nullptr;
    bp.dab = dab.data_ptr();
    bp.h = h.data_ptr();
    bp.mean = mean.data_ptr<float>();
    bp.rstd = rstd.data_ptr<float>();
    const auto stream = current_stream(x);
    cuda::swiglu_transition_backward_wgmma(bp, stream);
    variable_list result(6);
    if (ctx->needs_input_grad(4)) result[4] = at::matmul(dy.reshape({-1, c}).t(), h).to(w_out.scalar_type());
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2) || ctx->needs_input_grad(3)) {
      const LayerNormLinearWeightGrads g =
          layernorm_linear_weight_gradients(in.x, in.ln_w, in.ln_b, in.w_in, mean, rstd, dab);
      if (ctx->needs_input_grad(1)) result[1] = g.d_ln_w.to(ln_weight.scalar_type());
      if (ctx->needs_input_grad(2)) result[2] = g.d_ln_b.to(ln_bias.scalar_type());
      if (ctx->needs_input_grad(3)) result[3] = g.dw.to(w_in.scalar_type());
    }
    if (ctx->needs_input_grad(0)) result[0] = dx.to(x.scalar_type());
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard guard(saved[0].device());
    const auto type = static_cast<at::ScalarType>(ctx->saved_data["product"].toInt());
    const at::Tensor grad =
        grad_out[0].defined() ? grad_out[0] : at::zeros(saved[0].sizes(), saved[0].options().dtype(type));
    // The gradient of the passthrough output: added to dx by the fused kernel where dx leaves
    // it in x's own dtype (fp32 x, or x in the product dtype), else afterwards.
    const at::Tensor through = grad_out.size() > 1 ? grad_out[1] : at::Tensor();
    const at::ScalarType x_type = saved[0].scalar_type();
    const bool sm90 = ctx->saved_data["sm90"].toBool();
    const bool kernel_adds = sm90 && through.defined() && (x_type == at::kFloat || x_type == type);
    variable_list result = sm90 ? fused_backward(ctx, saved, grad, kernel_adds ? through.to(x_type) : at::Tensor(), type)
                                : unfused_backward(ctx, saved, grad, type);
    if (result[0].defined() && through.defined() && !kernel_adds) result[0] = result[0] + through;
    result.push_back(at::Tensor());  // the passthrough flag
    return result;
  }

  // ab = layernorm_linear(x) again, under the forward's autocast state so the same kernel
  // runs; dh = dy @ w_out; one swiglu backward pass gives d ab and h (for dw_out = dy^T h, in
  // the product dtype as the reference's linear differentiates); autograd from ab for the rest.
  static variable_list unfused_backward(AutogradContext* ctx, const variable_list& saved, const at::Tensor& grad,
                                        at::ScalarType type) {
    variable_list in;
    for (size_t i = 0; i < 4; ++i) in.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
    const at::Tensor& w_out = saved[4];
    const int64_t c = w_out.size(0), hidden = w_out.size(1);
    at::Tensor ab;
    {
      at::AutoGradMode grad_on(true);
      const AutocastScope autocast(at::kCUDA, ctx->saved_data["autocast"].toBool(),
                                   ctx->saved_data["autocast_dtype"].toScalarType());
      ab = layernorm_linear(in[0], in[1], in[2], in[3], std::nullopt);  // [..., 2h]
    }
    const at::Tensor dy = grad.to(type);                               // [..., c]
    at::Tensor dh = aligned_rows(at::matmul(dy, w_out.to(type)));      // [..., h]
    at::Tensor h = at::empty(dh.sizes(), dh.options());
    // d ab overwrites ab in place (each element is read, then written, by one thread), and h
    // and dh are released before the LayerNorm+Linear backward: the backward's transient
    // stays below what the unfused op kept for it (ab, h) plus d ab. No autograd node saved
    // ab, so overwriting it is safe; only its graph edge is used below.
    const at::Tensor dab = ab.detach();
    TORCH_INTERNAL_ASSERT(dab.is_contiguous() && reinterpret_cast<uintptr_t>(dab.data_ptr()) % 16 == 0);
    cuda::SwigluParams p = params(dab);
    p.dh = dh.data_ptr();
    p.out = dab.data_ptr();
    p.h_out = h.data_ptr();
    cuda::swiglu_backward(p, current_stream(dab));
    dh.reset();
    variable_list result(6);
    if (ctx->needs_input_grad(4))
      result[4] = at::matmul(dy.reshape({-1, c}).t(), h.reshape({-1, hidden})).to(w_out.scalar_type());
    h.reset();
    variable_list wanted;
    for (size_t i = 0; i < 4; ++i)
      if (ctx->needs_input_grad(i)) wanted.push_back(in[i]);
    if (wanted.empty()) return result;
    const variable_list g = torch::autograd::grad({ab}, wanted, {dab});
    for (size_t i = 0, k = 0; i < 4; ++i)
      if (ctx->needs_input_grad(i)) result[i] = g[k++];
    return result;
  }
};

// The kernels' outputs (y, and x itself with `passthrough`), or empty where the reference serves.
variable_list swiglu_transition_kernels(const at::Tensor& x, const at::Tensor& ln_weight, const at::Tensor& ln_bias,
                                        const at::Tensor& w_in, const at::Tensor& w_out, bool passthrough) {
  check_swiglu_transition_args(x, ln_weight, ln_bias, w_in, w_out);
  const int64_t c = x.size(-1);
  const at::ScalarType type = product_dtype(x, w_in);
  if (!is_16bit(type) || !kernels_run_on(x, "swiglu_transition")) return {};
  if (!cuda::swiglu_transition_fused_width(c) || w_out.size(1) % cuda::swiglu_transition_hidden_multiple(c) != 0) {
    warn_reference("swiglu_transition", "c " + std::to_string(c) + ", hidden " + std::to_string(w_out.size(1)));
    return {};
  }
  if (x.numel() / c < cuda::swiglu_transition_fused_min_rows(c)) return {};  // faster unfused, not a missing kernel
  return SwigluTransitionFunction::apply(x, ln_weight, ln_bias, w_in, w_out, static_cast<int64_t>(type), passthrough);
}

at::Tensor swiglu_transition_cuda(const at::Tensor& x, const at::Tensor& ln_weight, const at::Tensor& ln_bias,
                                  const at::Tensor& w_in, const at::Tensor& w_out) {
  const variable_list out = swiglu_transition_kernels(x, ln_weight, ln_bias, w_in, w_out, false);
  return out.empty() ? swiglu_transition_ref(x, ln_weight, ln_bias, w_in, w_out) : out[0];
}

std::tuple<at::Tensor, at::Tensor> swiglu_transition_passthrough_cuda(const at::Tensor& x, const at::Tensor& ln_weight,
                                                                      const at::Tensor& ln_bias,
                                                                      const at::Tensor& w_in,
                                                                      const at::Tensor& w_out) {
  const variable_list out = swiglu_transition_kernels(x, ln_weight, ln_bias, w_in, w_out, true);
  if (out.empty()) return swiglu_transition_passthrough_ref(x, ln_weight, ln_bias, w_in, w_out);
  return {out[0], out[1]};
}

at::Tensor swiglu_cuda(const at::Tensor& ab) {
  if (!is_16bit(ab.scalar_type()) || ab.dim() < 1 || ab.size(-1) % 2 != 0 || !kernels_run_on(ab, "swiglu"))
    return swiglu_ref(ab);
  return SwigluFunction::apply(ab)[0];
}

}  // namespace
}  // namespace megafold::ops

TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("swiglu_transition", &megafold::ops::swiglu_transition_cuda);
  m.impl("swiglu_transition_passthrough", &megafold::ops::swiglu_transition_passthrough_cuda);
  m.impl("swiglu", &megafold::ops::swiglu_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("swiglu_transition", &megafold::ops::swiglu_transition_cuda);
  m.impl("swiglu_transition_passthrough", &megafold::ops::swiglu_transition_passthrough_cuda);
  m.impl("swiglu", &megafold::ops::swiglu_cuda);
}
