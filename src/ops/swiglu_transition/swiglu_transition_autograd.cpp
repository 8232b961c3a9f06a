// CUDA binding of the transition's gated activation (swiglu, AutogradCUDA and CUDA keys):
// 16-bit ab through swiglu_gate.cu, anything else through the ATen reference. Under autocast
// ab already comes in the product dtype from the projection before it.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/swiglu_transition/swiglu_cuda.h"
#include "ops/swiglu_transition/swiglu_transition.h"

namespace megafold::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void* current_stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// Contiguous, 16-byte aligned rows for the kernels' vector accesses: a copy only for unusual views.
at::Tensor kernel_rows(const at::Tensor& t) {
  at::Tensor r = t.contiguous();
  return reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 == 0 ? r : r.clone();
}

cuda::SwigluParams params(const at::Tensor& ab) {
  cuda::SwigluParams p{};
  p.dtype = ab.scalar_type() == at::kHalf ? cuda::DType::kFloat16 : cuda::DType::kBFloat16;
  p.h = ab.size(-1) / 2;
  p.M = p.h == 0 ? 0 : ab.numel() / (2 * p.h);
  p.ab = ab.data_ptr();
  return p;
}

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& ab_in) {
    const c10::cuda::CUDAGuard guard(ab_in.device());
    const at::Tensor ab = kernel_rows(ab_in);
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
    const at::Tensor dh = kernel_rows(grads[0].to(ab.scalar_type()));
    const at::Tensor dab = at::empty(ab.sizes(), ab.options());
    cuda::SwigluParams p = params(ab);
    p.dh = dh.data_ptr();
    p.out = dab.data_ptr();
    cuda::swiglu_backward(p, current_stream(ab));
    return {dab};
  }
};

at::Tensor swiglu_cuda(const at::Tensor& ab) {
  const bool kernel_types = ab.scalar_type() == at::kHalf || ab.scalar_type() == at::kBFloat16;
  if (!kernel_types || ab.dim() < 1 || ab.size(-1) % 2 != 0) return swiglu_ref(ab);
  return SwigluFunction::apply(ab)[0];
}

}  // namespace
}  // namespace megafold::ops

TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) { m.impl("swiglu", &megafold::ops::swiglu_cuda); }
TORCH_LIBRARY_IMPL(megafold, CUDA, m) { m.impl("swiglu", &megafold::ops::swiglu_cuda); }
