// CUDA binding of layernorm_linear: an autograd Function around the kernels
// (layernorm_linear_wgmma.cu on H100/H200, layernorm_linear_mma.cu elsewhere), registered
// for the AutogradCUDA and CUDA keys. The kernels serve c_in = 128 with 16-bit products:
// 16-bit x and weight, or any fp32/16-bit x under CUDA autocast (the model's case: fp32
// residual stream, fp32 master weights, bf16 products), giving the reference's output dtype.
// Everything else (other widths, fp32 or float64 without autocast, odd c_out) runs the ATen
// reference, still differentiable.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/cuda_binding.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "ops/layernorm_linear/layernorm_linear_binding.h"
#include "ops/layernorm_linear/layernorm_linear_cuda.h"

namespace megafold::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor kernel_rows(const at::Tensor& t, at::ScalarType type) { return aligned_rows(t.to(type)); }

cuda::LayerNormLinearParams make_params(const at::Tensor& x, const at::Tensor& ln_w, const at::Tensor& ln_b,
                                        const at::Tensor& w, const at::Tensor& bias, const at::Tensor& mean,
                                        const at::Tensor& rstd) {
  cuda::LayerNormLinearParams p{};
  p.x_dtype = kernel_dtype(x.scalar_type());
  p.dtype = kernel_dtype(w.scalar_type());
  p.M = x.numel() / cuda::kLayerNormLinearCin;
  p.N = w.size(0);
  p.eps = static_cast<float>(kLayerNormEps);
  p.x = x.data_ptr();
  p.ln_w = ln_w.data_ptr<float>();
  p.ln_b = ln_b.data_ptr<float>();
  p.w = w.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  p.mean = mean.data_ptr<float>();
  p.rstd = rstd.data_ptr<float>();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(x.device().index());
  p.sm90 = cuda::layernorm_linear_use_sm90(p.N, prop->major, prop->minor);
  return p;
}

// The weight-gradient workspaces and outputs of a backward over M rows of N features.
struct WeightGradBuffers {
  at::Tensor g_partial, db_partial, g, dw, db, d_ln_w, d_ln_b;
};

WeightGradBuffers weight_grad_buffers(cuda::LayerNormLinearParams& p, const at::TensorOptions& f32) {
  const int64_t N = p.N, K = cuda::kLayerNormLinearCin;
  const int64_t chunks = cuda::layernorm_linear_dw_chunks(p.M, N, p.sm90);
  WeightGradBuffers b{at::empty({chunks, N, K}, f32), at::empty({chunks, N}, f32), at::empty({N, K}, f32),
                      at::empty({N, K}, f32),          at::empty({N}, f32),        at::empty({K}, f32),
                      at::empty({K}, f32)};
  p.g_partial = b.g_partial.data_ptr<float>();
  p.db_partial = b.db_partial.data_ptr<float>();
  p.g = b.g.data_ptr<float>();
  p.dw = b.dw.data_ptr<float>();
  p.db = b.db.data_ptr<float>();
  p.d_ln_w = b.d_ln_w.data_ptr<float>();
  p.d_ln_b = b.d_ln_b.data_ptr<float>();
  return b;
}

// The inputs in kernel layout (x in fp32 or the product type `type`, the weight in `type`, the
// LayerNorm's parameters in fp32) with the inputs' dtypes, and the row statistics the forward
// will write.
LayerNormLinearContext kernel_context(const at::Tensor& x, const at::Tensor& ln_w, const at::Tensor& ln_b,
                                      const at::Tensor& w, at::ScalarType type) {
  const int64_t M = x.numel() / cuda::kLayerNormLinearCin;
  const auto f32 = x.options().dtype(at::kFloat);
  return {kernel_rows(x, x.scalar_type() == at::kFloat ? at::kFloat : type),
          aligned_rows(ln_w.to(at::kFloat)),  // read as float4 / float2
          aligned_rows(ln_b.to(at::kFloat)),
          kernel_rows(w, type),
          at::empty({M}, f32),
          at::empty({M}, f32),
          x.scalar_type(),
          ln_w.scalar_type(),
          ln_b.scalar_type(),
          w.scalar_type()};
}

struct LayerNormLinearFunction : public torch::autograd::Function<LayerNormLinearFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& ln_weight,
                               const at::Tensor& ln_bias, const at::Tensor& weight, const at::Tensor& bias_or_empty,
                               int64_t product) {
    const c10::cuda::CUDAGuard guard(x.device());
    const auto type = static_cast<at::ScalarType>(product);
    const at::Tensor bias = bias_or_empty.numel() > 0 ? aligned_rows(bias_or_empty.to(at::kFloat)) : at::Tensor();
    const LayerNormLinearContext c = kernel_context(x, ln_weight, ln_bias, weight, type);
    std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
    out_shape.back() = weight.size(0);
    const at::Tensor y = at::empty(out_shape, x.options().dtype(type));
    cuda::LayerNormLinearParams p = make_params(c.x, c.ln_w, c.ln_b, c.w, bias, c.mean, c.rstd);
    p.y = y.data_ptr();
    cuda::layernorm_linear_forward(p, current_stream(x));
    ctx->save_for_backward({c.x, c.ln_w, c.ln_b, c.w, c.mean, c.rstd});
    ctx->saved_data["x_dtype"] = c.x_dtype;
    ctx->saved_data["ln_w_dtype"] = c.ln_w_dtype;
    ctx->saved_data["ln_b_dtype"] = c.ln_b_dtype;
    ctx->saved_data["w_dtype"] = c.w_dtype;
    ctx->saved_data["bias_dtype"] = bias_or_empty.numel() > 0 ? bias_or_empty.scalar_type() : at::kFloat;
    ctx->saved_data["has_bias"] = bias_or_empty.numel() > 0;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list s = ctx->get_saved_variables();
    auto dtype = [&](const char* key) { return ctx->saved_data[key].toScalarType(); };
    const LayerNormLinearContext c{s[0], s[1], s[2], s[3], s[4], s[5],
                                   dtype("x_dtype"), dtype("ln_w_dtype"), dtype("ln_b_dtype"), dtype("w_dtype")};
    const int64_t N = c.w.size(0), K = cuda::kLayerNormLinearCin;
    const at::Tensor dy = grad_out[0].defined()
                              ? grad_out[0]
                              : at::zeros({c.x.numel() / K, N}, c.x.options().dtype(c.w.scalar_type()));
    const LayerNormLinearGrads g = layernorm_linear_backward(c, dy);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    return {g.dx, g.d_ln_w, g.d_ln_b, g.dw, has_bias ? g.db.to(dtype("bias_dtype")) : at::Tensor(), at::Tensor()};
  }
};

at::Tensor layernorm_linear_cuda(const at::Tensor& x, const at::Tensor& ln_weight, const at::Tensor& ln_bias,
                                 const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  check_layernorm_linear_args(x, ln_weight, ln_bias, weight, bias);
  const at::ScalarType type = product_dtype(x, weight);
  if (!is_16bit(type) || !kernels_run_on(x, "layernorm_linear"))
    return layernorm_linear_ref(x, ln_weight, ln_bias, weight, bias);
  if (x.size(-1) != cuda::kLayerNormLinearCin || weight.size(0) % 2 != 0) {
    warn_reference("layernorm_linear", "c_in " + std::to_string(x.size(-1)) + ", c_out " +
                                           std::to_string(weight.size(0)) + " (kernel: c_in " +
                                           std::to_string(cuda::kLayerNormLinearCin) + ", even c_out)");
    return layernorm_linear_ref(x, ln_weight, ln_bias, weight, bias);
  }
  const at::Tensor absent = at::empty({0}, x.options());
  return LayerNormLinearFunction::apply(x, ln_weight, ln_bias, weight,
                                        bias.has_value() && bias->defined() ? *bias : absent,
                                        static_cast<int64_t>(type))[0];
}

}  // namespace

LayerNormLinearWeightGrads layernorm_linear_weight_gradients(const at::Tensor& x, const at::Tensor& ln_w,
                                                             const at::Tensor& ln_b, const at::Tensor& w,
                                                             const at::Tensor& mean, const at::Tensor& rstd,
                                                             const at::Tensor& dy) {
  cuda::LayerNormLinearParams p = make_params(x, ln_w, ln_b, w, at::Tensor(), mean, rstd);
  TORCH_CHECK(p.N % 8 == 0 && dy.size(-1) == p.N, "layernorm_linear_weight_gradients: dy must be [M, ", p.N, "]");
  const WeightGradBuffers b = weight_grad_buffers(p, x.options().dtype(at::kFloat));
  p.dy = dy.data_ptr();
  p.dx = nullptr;
  cuda::layernorm_linear_backward(p, current_stream(x));
  return {b.d_ln_w, b.d_ln_b, b.dw};
}

bool layernorm_linear_trimul_fits(const at::Tensor& z, const at::Tensor& w, int64_t c) {
  if (!z.is_cuda() || z.dim() != 4 || z.size(-1) != cuda::kLayerNormLinearCin || w.dim() != 2 ||
      w.size(1) != cuda::kLayerNormLinearCin || !is_16bit(product_dtype(z, w)) ||
      !kernels_run_on(z, "triangle_multiplication"))
    return false;
  cuda::LayerNormLinearParams p{};
  p.M = z.numel() / cuda::kLayerNormLinearCin;
  p.N = w.size(0);
  const cuda::TrimulEpilogue e{z.size(0), z.size(1) * z.size(2), c, w.size(0) - 4 * c, nullptr, nullptr, nullptr,
                               nullptr};
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(z.device().index());
  return cuda::layernorm_linear_trimul_epilogue_fits(p, e, prop->major, prop->minor);
}

LayerNormLinearContext layernorm_linear_trimul_forward(const at::Tensor& z, const at::Tensor& ln_w,
                                                       const at::Tensor& ln_b, const at::Tensor& w,
                                                       const at::Tensor& mask, int64_t c, at::Tensor& a,
                                                       at::Tensor& b, at::Tensor& gate) {
  const c10::cuda::CUDAGuard guard(z.device());
  const at::ScalarType type = product_dtype(z, w);
  const LayerNormLinearContext ctx = kernel_context(z, ln_w, ln_b, w, type);
  const int64_t B = z.size(0), n = z.size(1), N = z.size(2), c_gate = w.size(0) - 4 * c;
  const auto out = z.options().dtype(type);
  a = at::empty({B, c, n, N}, out);
  b = at::empty({B, c, n, N}, out);
  gate = at::empty({B, n, N, c_gate}, out);
  cuda::LayerNormLinearParams p = make_params(ctx.x, ctx.ln_w, ctx.ln_b, ctx.w, at::Tensor(), ctx.mean, ctx.rstd);
  const cuda::TrimulEpilogue e{B, n * N, c, c_gate, mask.defined() ? mask.data_ptr<float>() : nullptr,
                               a.data_ptr(), b.data_ptr(), gate.data_ptr()};
  cuda::layernorm_linear_forward_trimul(p, e, current_stream(z));
  return ctx;
}

LayerNormLinearGrads layernorm_linear_backward(const LayerNormLinearContext& ctx, const at::Tensor& dy) {
  const c10::cuda::CUDAGuard guard(ctx.x.device());
  const at::Tensor dy_ = kernel_rows(dy, ctx.w.scalar_type());
  cuda::LayerNormLinearParams p = make_params(ctx.x, ctx.ln_w, ctx.ln_b, ctx.w, at::Tensor(), ctx.mean, ctx.rstd);
  const at::Tensor dx = at::empty(ctx.x.sizes(), ctx.x.options());
  const WeightGradBuffers b = weight_grad_buffers(p, ctx.x.options().dtype(at::kFloat));
  p.dy = dy_.data_ptr();
  p.dx = dx.data_ptr();
  cuda::layernorm_linear_backward(p, current_stream(ctx.x));
  return {dx.to(ctx.x_dtype), b.d_ln_w.to(ctx.ln_w_dtype), b.d_ln_b.to(ctx.ln_b_dtype), b.dw.to(ctx.w_dtype), b.db};
}

}  // namespace megafold::ops

// AutogradCUDA takes precedence over the CompositeImplicitAutograd reference for CUDA
// tensors; the CUDA key serves calls that skip autograd (inference mode).
TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("layernorm_linear", &megafold::ops::layernorm_linear_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("layernorm_linear", &megafold::ops::layernorm_linear_cuda);
}
