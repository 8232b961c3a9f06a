// CUDA binding of the transition's gated activation (swiglu, AutogradCUDA and CUDA keys):
// 16-bit ab through swiglu_gate.cu, anything else through the ATen reference. Under autocast
// ab already comes in the product dtype from the projection before it.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/cuda_binding.h"
#include "ops/swiglu_transition/swiglu_cuda.h"
#include "ops/swiglu_transition/swiglu_transition.h"

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

at::Tensor swiglu_cuda(const at::Tensor& ab) {
  if (!is_16bit(ab.scalar_type()) || ab.dim() < 1 || ab.size(-1) % 2 != 0) return swiglu_ref(ab);
  return SwigluFunction::apply(ab)[0];
}

}  // namespace
}  // namespace megafold::ops

TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) { m.impl("swiglu", &megafold::ops::swiglu_cuda); }
TORCH_LIBRARY_IMPL(megafold, CUDA, m) { m.impl("swiglu", &megafold::ops::swiglu_cuda); }
