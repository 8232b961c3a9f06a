// CUDA binding of triangle_attention: an autograd Function around the kernels of
// triangle_attention_{mma,simt}.cu, registered for the AutogradCUDA and CUDA keys. q, k, v
// and gate are read in place through their strides (the ending-node variant passes transposed
// views); only a head dim that is not innermost is copied. The bias is made contiguous in
// q's dtype: it is N^2 * H elements, read N times by the kernels. The bias gradient comes back
// in float and is converted to the bias's dtype. float64 inputs and head dims without a
// kernel use the ATen reference (still differentiable).
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

#include "ops/cuda_binding.h"
#include "ops/reference_mode.h"
#include "ops/triangle_attention/triangle_attention.h"
#include "ops/triangle_attention/triangle_attention_cuda.h"

namespace megafold::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void copy_strides(const at::Tensor& t, int64_t* out) {
  for (int64_t i = 0; i < t.dim(); ++i) out[i] = t.stride(i);
}

// t in dtype `type` with a unit innermost stride (a view when it already has both).
at::Tensor kernel_layout(const at::Tensor& t, at::ScalarType type) {
  at::Tensor r = t.to(type);
  return r.stride(-1) == 1 || r.size(-1) == 1 ? r : r.contiguous();
}

// Inputs shared by forward and backward (already in kernel layout).
cuda::TriangleAttentionParams make_params(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const at::Tensor& bias,
                                          const at::Tensor& mask, const at::Tensor& gate) {
  cuda::TriangleAttentionParams p{};
  p.dtype = kernel_dtype(q.scalar_type());
  p.B = q.size(0), p.R = q.size(1), p.N = q.size(2), p.H = q.size(3), p.d = q.size(4);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.d)));
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr();
  copy_strides(q, p.q_stride);
  copy_strides(k, p.k_stride);
  copy_strides(v, p.v_stride);
  if (gate.defined()) {
    p.gate = gate.data_ptr();
    copy_strides(gate, p.gate_stride);
  }
  if (bias.defined()) p.bias = bias.data_ptr();
  if (mask.defined()) {
    p.mask = mask.data_ptr<float>();
    p.mask_ld = mask.stride(1);
  }
  return p;
}

// Whether the sm_90a kernels run for q's device, dtype and head dim.
bool sm90_kernels(const at::Tensor& q) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(q.device().index());
  return cuda::use_sm90(kernel_dtype(q.scalar_type()), q.size(4), prop->major, prop->minor);
}

// kernel_layout, copied to a dense tensor when TMA cannot read the strides in place (the
// model's projections are laid out so that it can).
at::Tensor tma_layout(const at::Tensor& t, at::ScalarType type) {
  at::Tensor r = kernel_layout(t, type);
  int64_t s[5];
  copy_strides(r, s);
  return cuda::tma_operand(r.data_ptr(), s, r.element_size()) ? r : r.clone(at::MemoryFormat::Contiguous);
}

// A contiguous [..., N] bias, or a copy whose rows are padded to a multiple of 8 elements.
at::Tensor tma_rows(const at::Tensor& bias) {
  const int64_t n = bias.size(-1), padded = (n + 7) / 8 * 8;
  if (padded == n && reinterpret_cast<uintptr_t>(bias.data_ptr()) % 16 == 0) return bias;
  std::vector<int64_t> sizes = bias.sizes().vec();
  sizes.back() = padded;
  at::Tensor r = at::empty(sizes, bias.options()).narrow(-1, 0, n);
  r.copy_(bias);
  return r;
}

// For the sm_90a kernels: the workspace of the bias's score-order tiles and, for the backward
// (dK/dV reads the bias itself), the bias with TMA-readable rows; kept alive by the caller.
std::pair<at::Tensor, at::Tensor> use_sm90(cuda::TriangleAttentionParams& p, const at::Tensor& bias, bool backward) {
  p.sm90 = true;
  if (!bias.defined()) return {};
  at::Tensor rows;
  if (backward) {
    rows = tma_rows(bias);
    p.bias_rows = rows.data_ptr();
    p.bias_ld = rows.stride(2);
  }
  const int64_t tiles = (p.N + 63) / 64;
  at::Tensor fragments = at::empty({p.B * p.H * tiles * tiles * 64 * 64}, bias.options().dtype(at::kFloat));
  p.bias_fragments = fragments.data_ptr<float>();
  return {rows, fragments};
}

// The key mask as the kernels take it: additive (0 attends, -inf masks), float, rows padded
// with -inf to a multiple of 64 keys so that the sm_90a forward copies whole tiles of it.
at::Tensor additive_mask(const at::Tensor& mask) {
  const int64_t n = mask.size(-1), padded = (n + 63) / 64 * 64;
  at::Tensor r = at::full({mask.size(0), mask.size(1), padded}, -INFINITY, mask.options().dtype(at::kFloat));
  return r.narrow(-1, 0, n).masked_fill_(mask.ne(0), 0.f);
}

at::Tensor dense_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

struct TriangleAttentionFunction : public torch::autograd::Function<TriangleAttentionFunction> {
  // bias, mask and gate arrive as empty tensors when absent (see absent_as_empty).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& bias_or_empty,
                               const at::Tensor& mask_or_empty, const at::Tensor& gate_or_empty) {
    const c10::cuda::CUDAGuard guard(q.device());
    auto given = [](const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); };
    const at::Tensor bias = given(bias_or_empty), mask = given(mask_or_empty), gate = given(gate_or_empty);
    const at::ScalarType type = q.scalar_type();
    const bool sm90 = sm90_kernels(q);
    auto operand = [&](const at::Tensor& t) { return sm90 ? tma_layout(t, type) : kernel_layout(t, type); };
    const at::Tensor q_ = operand(q), k_ = operand(k), v_ = operand(v);
    const at::Tensor gate_ = gate.defined() ? kernel_layout(gate, type) : gate;
    const at::Tensor bias_ = bias.defined() ? bias.to(type).contiguous() : bias;
    const at::Tensor mask_f = mask.defined() ? additive_mask(mask) : mask;
    const at::Tensor o = dense_like(q_);
    const at::Tensor out = gate.defined() ? dense_like(q_) : o;
    const at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(3), q.size(2)}, q.options().dtype(at::kFloat));
    cuda::TriangleAttentionParams p = make_params(q_, k_, v_, bias_, mask_f, gate_);
    const auto sm90_bias = sm90 ? use_sm90(p, bias_, false) : std::pair<at::Tensor, at::Tensor>();
    p.o = o.data_ptr();
    p.out = out.data_ptr();
    p.lse = lse.data_ptr<float>();
    cuda::triangle_attention_forward(p, current_stream(q));
    ctx->save_for_backward({q_, k_, v_, bias_, mask_f, gate_, o, lse});
    ctx->saved_data["k_dtype"] = k.scalar_type();
    ctx->saved_data["v_dtype"] = v.scalar_type();
    ctx->saved_data["bias_dtype"] = bias.defined() ? bias.scalar_type() : type;
    ctx->saved_data["gate_dtype"] = gate.defined() ? gate.scalar_type() : type;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &q = s[0], &k = s[1], &v = s[2], &bias = s[3], &mask = s[4], &gate = s[5],
                     &o = s[6], &lse = s[7];
    const c10::cuda::CUDAGuard guard(q.device());
    const bool sm90 = sm90_kernels(q);
    at::Tensor d_out = grad_out[0].defined() ? grad_out[0].to(q.scalar_type()).contiguous() : at::zeros_like(o);
    if (sm90 && reinterpret_cast<uintptr_t>(d_out.data_ptr()) % 16 != 0) d_out = d_out.clone();
    const at::Tensor d_o = gate.defined() ? dense_like(o) : d_out;
    const at::Tensor d_gate = gate.defined() ? dense_like(o) : at::Tensor();
    const at::Tensor delta = at::empty_like(lse);
    const at::Tensor dq = dense_like(o), dk = dense_like(o), dv = dense_like(o);
    // The sm_90a dK/dV kernel reads each query's (lse, delta) pair with its tiles.
    const at::Tensor stats =
        sm90 ? at::empty({lse.size(0), lse.size(1), lse.size(2), (lse.size(3) + 1) / 2 * 2, 2}, lse.options())
             : at::Tensor();
    at::Tensor dbias, partial;
    cuda::TriangleAttentionParams p = make_params(q, k, v, bias, mask, gate);
    const auto sm90_bias = sm90 ? use_sm90(p, bias, true) : std::pair<at::Tensor, at::Tensor>();
    p.o = o.data_ptr();
    p.lse = lse.data_ptr<float>();
    p.d_out = d_out.data_ptr();
    p.d_o = d_o.data_ptr();
    p.delta = delta.data_ptr<float>();
    if (sm90) {
      p.stats = stats.data_ptr<float>();
      p.stats_ld = stats.size(3);
    }
    if (gate.defined()) p.d_gate = d_gate.data_ptr();
    p.dq = dq.data_ptr(), p.dk = dk.data_ptr(), p.dv = dv.data_ptr();
    if (bias.defined()) {
      dbias = at::empty(bias.sizes(), bias.options().dtype(at::kFloat));
      p.dbias = dbias.data_ptr<float>();
      const int64_t chunks = cuda::dbias_partials(p);
      if (chunks > 0) {
        partial = at::empty({chunks, bias.numel()}, bias.options().dtype(at::kFloat));
        p.dbias_partial = partial.data_ptr<float>();
      }
    }
    cuda::triangle_attention_backward(p, current_stream(q));
    auto typed = [&](const at::Tensor& t, const char* key) {
      return t.defined() ? t.to(ctx->saved_data[key].toScalarType()) : t;
    };
    return {dq, typed(dk, "k_dtype"), typed(dv, "v_dtype"), typed(dbias, "bias_dtype"), at::Tensor(),
            typed(d_gate, "gate_dtype")};
  }
};

at::Tensor triangle_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::optional<at::Tensor>& bias,
                                   const std::optional<at::Tensor>& mask,
                                   const std::optional<at::Tensor>& gate) {
  check_triangle_attention_args(q, k, v, bias, mask, gate);
  if (q.scalar_type() == at::kDouble || !kernels_run_on(q, "triangle_attention"))
    return triangle_attention_ref(q, k, v, bias, mask, gate);
  if (!cuda::supported_head_dim(q.size(4))) {
    warn_reference("triangle_attention", "head dim " + std::to_string(q.size(4)) + " (kernels: 16, 24, 32, 48, 64)");
    return triangle_attention_ref(q, k, v, bias, mask, gate);
  }
  // A C++ autograd Function records device and shape of every tensor input, so an absent
  // optional is passed as an empty tensor (an empty bias/mask/gate only occurs with an empty
  // q, where nothing is computed either way).
  const at::Tensor empty = at::empty({0}, q.options());
  auto absent_as_empty = [&](const std::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() ? *t : empty;
  };
  return TriangleAttentionFunction::apply(q, k, v, absent_as_empty(bias), absent_as_empty(mask),
                                          absent_as_empty(gate))[0];
}

}  // namespace
}  // namespace megafold::ops

// AutogradCUDA takes precedence over the CompositeImplicitAutograd reference for CUDA
// tensors; the CUDA key serves calls that skip autograd (inference mode).
TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("triangle_attention", &megafold::ops::triangle_attention_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("triangle_attention", &megafold::ops::triangle_attention_cuda);
}
