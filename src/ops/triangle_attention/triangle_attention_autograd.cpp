// CUDA binding of triangle_attention and triangle_attention_projected: autograd Functions
// around the kernels of triangle_attention_{wgmma,mma,simt}.cu, registered for the
// AutogradCUDA and CUDA keys. q, k, v and gate are read in place through their strides (the
// ending-node variant passes transposed views); only a head dim that is not innermost is
// copied. The bias is made contiguous in q's dtype: it is N^2 * H elements, read N times by the
// kernels. The kernels write the gradients through strides: the plain op's into dense tensors
// (the bias's in float, then converted to the bias's dtype), the projected op's into the views
// of one gradient of the projection, so it needs no concatenation. float64 inputs and head dims
// without a kernel use the ATen reference (still differentiable).
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
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
                                          const at::Tensor& mask, const at::Tensor& mask_tiles,
                                          const at::Tensor& gate) {
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
    p.mask_tiles = reinterpret_cast<const uint32_t*>(mask_tiles.data_ptr<int32_t>());
    p.mask_words = mask_tiles.size(2);
  }
  return p;
}

// t, copied to a dense tensor unless it starts 4-byte aligned with even strides: the sm_90a
// forward reads the gate two elements at a time.
at::Tensor pair_layout(const at::Tensor& t) {
  bool even = reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0;
  for (int64_t i = 0; i + 1 < t.dim(); ++i) even = even && (t.size(i) == 1 || t.stride(i) % 2 == 0);
  return even ? t : t.contiguous();
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

// q, k or v as the kernels read them: tma_layout for the sm_90a kernels, else kernel_layout.
at::Tensor operand_layout(const at::Tensor& t, at::ScalarType type, bool sm90) {
  return sm90 ? tma_layout(t, type) : kernel_layout(t, type);
}

// A C++ autograd Function records device and shape of every tensor input, so an absent
// optional crosses it as an empty tensor on `like`'s device (an empty bias/mask/gate only occurs
// with an empty q, where nothing is computed either way), and is undefined again inside.
at::Tensor absent_as_empty(const std::optional<at::Tensor>& t, const at::Tensor& like) {
  return t.has_value() && t->defined() ? *t : at::empty({0}, like.options());
}
at::Tensor given(const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); }

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
// with -inf to a multiple of 64 keys so that the sm_90a forward copies whole tiles of it; and
// per row, which of those tiles hold a masked key (the sm_90a kernels add the mask to those
// only).
struct KeyMask {
  at::Tensor additive, tiles;
};
KeyMask key_mask(const at::Tensor& mask) {
  const at::Tensor m = mask.to(at::kFloat);
  const int64_t B = m.size(0), R = m.size(1), n = m.size(2), padded = (n + 63) / 64 * 64;
  const int64_t words = (padded / 64 + 31) / 32;
  const at::Tensor additive = at::empty({B, R, padded}, m.options());
  const at::Tensor tiles = at::empty({B, R, words}, m.options().dtype(at::kInt));
  int64_t stride[3];
  copy_strides(m, stride);
  cuda::make_key_mask(m.data_ptr<float>(), stride, B, R, n, additive.data_ptr<float>(), padded,
                      reinterpret_cast<uint32_t*>(tiles.data_ptr<int32_t>()), words, current_stream(m));
  return {additive.narrow(-1, 0, n), tiles};
}

at::Tensor dense_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

// Whether t has strides `want` in every dimension longer than one.
bool same_layout(const at::Tensor& t, at::IntArrayRef want) {
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) > 1 && t.stride(i) != want[i]) return false;
  return true;
}

// The bias in dtype `type` as a dense [B, H, N, N] tensor: a strided view in that dtype (the
// model's, a projection's columns) through the copy kernel, anything else through ATen.
at::Tensor heads_major(const at::Tensor& bias, at::ScalarType type) {
  if (bias.scalar_type() != type || bias.is_contiguous()) return bias.to(type).contiguous();
  const at::Tensor out = dense_like(bias);
  int64_t stride[4];
  copy_strides(bias, stride);
  cuda::bias_heads_major(bias.data_ptr(), stride, bias.size(0), bias.size(1), bias.size(2), bias.element_size(),
                         out.data_ptr(), current_stream(bias));
  return out;
}

// What the forward keeps for backward (inputs in kernel layout; bias, mask, gate undefined
// when absent) and runs it with.
struct Saved {
  at::Tensor q, k, v, bias, mask, mask_tiles, gate, o, lse;
};

// The forward kernels on kernel-layout inputs. `out` receives the gated output through its
// strides (ignored without a gate: out is o).
Saved run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                  const at::Tensor& mask, const at::Tensor& gate, at::Tensor& out) {
  const bool sm90 = sm90_kernels(q);
  Saved s;
  s.q = q, s.k = k, s.v = v, s.gate = sm90 && gate.defined() ? pair_layout(gate) : gate;
  s.bias = bias.defined() ? heads_major(bias, q.scalar_type()) : bias;
  if (mask.defined()) {
    const KeyMask m = key_mask(mask);
    s.mask = m.additive, s.mask_tiles = m.tiles;
  }
  s.o = dense_like(q);
  if (!gate.defined()) out = s.o;
  s.lse = at::empty({q.size(0), q.size(1), q.size(3), q.size(2)}, q.options().dtype(at::kFloat));
  cuda::TriangleAttentionParams p = make_params(q, k, v, s.bias, s.mask, s.mask_tiles, s.gate);
  const auto sm90_bias = sm90 ? use_sm90(p, s.bias, false) : std::pair<at::Tensor, at::Tensor>();
  p.o = s.o.data_ptr();
  p.out = out.data_ptr();
  copy_strides(out, p.out_stride);
  p.lse = s.lse.data_ptr<float>();
  cuda::triangle_attention_forward(p, current_stream(q));
  return s;
}

// Where the backward kernels write the gradients (through their strides; dbias in its dtype).
struct Grads {
  at::Tensor dq, dk, dv, d_gate, dbias;
};

// The backward kernels. d_out has out's layout `out_strides` (a copy is made otherwise). Where
// a bias-gradient reduction runs (16-bit inputs) it also zeroes `dbias_zero_after` elements after
// each pair row's heads; returns whether it did (false when asked for none).
bool run_backward(const Saved& s, const at::Tensor& grad, at::IntArrayRef out_strides, const Grads& g,
                  int64_t dbias_zero_after = 0) {
  const at::Tensor& q = s.q;
  const bool sm90 = sm90_kernels(q);
  at::Tensor d_out = grad.defined() ? grad.to(q.scalar_type()) : at::zeros_like(s.o);
  // Without a gate d_out is the kernels' d_o, which they read dense (by TMA on sm_90a: 16-byte
  // aligned). A fresh allocation is both.
  const at::IntArrayRef want = s.gate.defined() ? out_strides : s.o.strides();
  if (!same_layout(d_out, want) || (sm90 && reinterpret_cast<uintptr_t>(d_out.data_ptr()) % 16 != 0)) {
    at::Tensor laid = at::empty_strided(d_out.sizes(), want, d_out.options());
    laid.copy_(d_out);
    d_out = laid;
  }
  const at::Tensor d_o = s.gate.defined() ? dense_like(s.o) : d_out;
  const at::Tensor delta = at::empty_like(s.lse);
  // The sm_90a dK/dV kernel reads each query's (lse, delta) pair with its tiles.
  const at::Tensor& lse = s.lse;
  const at::Tensor stats =
      sm90 ? at::empty({lse.size(0), lse.size(1), lse.size(2), (lse.size(3) + 1) / 2 * 2, 2}, lse.options())
           : at::Tensor();
  at::Tensor partial;
  cuda::TriangleAttentionParams p = make_params(q, s.k, s.v, s.bias, s.mask, s.mask_tiles, s.gate);
  const auto sm90_bias = sm90 ? use_sm90(p, s.bias, true) : std::pair<at::Tensor, at::Tensor>();
  p.o = s.o.data_ptr();
  p.lse = s.lse.data_ptr<float>();
  p.d_out = d_out.data_ptr();
  copy_strides(d_out, p.out_stride);
  p.d_o = d_o.data_ptr();
  p.delta = delta.data_ptr<float>();
  if (sm90) {
    p.stats = stats.data_ptr<float>();
    p.stats_ld = stats.size(3);
  }
  auto output = [](const at::Tensor& t, void*& ptr, int64_t* stride) {
    ptr = t.data_ptr();
    copy_strides(t, stride);
  };
  if (s.gate.defined()) output(g.d_gate, p.d_gate, p.d_gate_stride);
  output(g.dq, p.dq, p.dq_stride);
  output(g.dk, p.dk, p.dk_stride);
  output(g.dv, p.dv, p.dv_stride);
  if (s.bias.defined()) {
    output(g.dbias, p.dbias, p.dbias_stride);
    p.dbias_dtype = kernel_dtype(g.dbias.scalar_type());
    const int64_t chunks = cuda::dbias_partials(p);
    if (chunks == 1 && g.dbias.scalar_type() == at::kFloat && g.dbias.is_contiguous()) {
      // One chunk (a single row, as the single track's attention has) into a dense float
      // gradient: the partial sums are the gradient, written in place (dbias_reduce skips it).
      p.dbias_partial = g.dbias.data_ptr<float>();
    } else if (chunks > 0) {
      partial = at::empty({chunks, s.bias.numel()}, s.bias.options().dtype(at::kFloat));
      p.dbias_partial = partial.data_ptr<float>();
      p.dbias_zero_after = dbias_zero_after;
    }
  }
  cuda::triangle_attention_backward(p, current_stream(q));
  return p.dbias_zero_after > 0;
}

void save(AutogradContext* ctx, const Saved& s) {
  ctx->save_for_backward({s.q, s.k, s.v, s.bias, s.mask, s.mask_tiles, s.gate, s.o, s.lse});
}
Saved saved(AutogradContext* ctx) {
  const variable_list v = ctx->get_saved_variables();
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

struct TriangleAttentionFunction : public torch::autograd::Function<TriangleAttentionFunction> {
  // bias, mask and gate arrive as empty tensors when absent (see absent_as_empty).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& bias_or_empty,
                               const at::Tensor& mask_or_empty, const at::Tensor& gate_or_empty) {
    const c10::cuda::CUDAGuard guard(q.device());
    const at::Tensor bias = given(bias_or_empty), mask = given(mask_or_empty), gate = given(gate_or_empty);
    const at::ScalarType type = q.scalar_type();
    const bool sm90 = sm90_kernels(q);
    const at::Tensor q_ = operand_layout(q, type, sm90);
    at::Tensor out = gate.defined() ? dense_like(q_) : at::Tensor();
    const Saved s = run_forward(q_, operand_layout(k, type, sm90), operand_layout(v, type, sm90), bias, mask,
                                gate.defined() ? kernel_layout(gate, type) : gate, out);
    save(ctx, s);
    ctx->saved_data["k_dtype"] = k.scalar_type();
    ctx->saved_data["v_dtype"] = v.scalar_type();
    ctx->saved_data["bias_dtype"] = bias.defined() ? bias.scalar_type() : type;
    ctx->saved_data["gate_dtype"] = gate.defined() ? gate.scalar_type() : type;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const Saved s = saved(ctx);
    const c10::cuda::CUDAGuard guard(s.q.device());
    // Dense gradients; the bias's in float (an fp32 bias keeps its precision), cast below.
    Grads g{dense_like(s.o), dense_like(s.o), dense_like(s.o), s.gate.defined() ? dense_like(s.o) : at::Tensor(),
            s.bias.defined() ? at::empty(s.bias.sizes(), s.bias.options().dtype(at::kFloat)) : at::Tensor()};
    run_backward(s, grad_out[0], s.o.strides(), g);
    auto typed = [&](const at::Tensor& t, const char* key) {
      return t.defined() ? t.to(ctx->saved_data[key].toScalarType()) : t;
    };
    return {g.dq, typed(g.dk, "k_dtype"), typed(g.dv, "v_dtype"), typed(g.dbias, "bias_dtype"), at::Tensor(),
            typed(g.d_gate, "gate_dtype")};
  }
};

// The projection op: q, k, v, gate and (unless given) the bias are views of proj, and the
// backward writes proj's gradient whole through the same views.
struct ProjectedFunction : public torch::autograd::Function<ProjectedFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& proj, const at::Tensor& bias_or_empty,
                               const at::Tensor& mask_or_empty, int64_t heads, int64_t head_dim, bool transposed) {
    const c10::cuda::CUDAGuard guard(proj.device());
    const at::Tensor own_bias = given(bias_or_empty);
    const ProjectedOperands x = projected_operands(proj, heads, head_dim, transposed);
    const at::ScalarType type = proj.scalar_type();
    const bool sm90 = sm90_kernels(x.q);
    // The ending node's output with rows and columns swapped in memory, as the caller reads it.
    at::Tensor out = transposed ? dense_like(x.q.transpose(1, 2)).transpose(1, 2) : dense_like(x.q);
    const Saved s = run_forward(operand_layout(x.q, type, sm90), operand_layout(x.k, type, sm90),
                                operand_layout(x.v, type, sm90), own_bias.defined() ? own_bias : x.bias,
                                given(mask_or_empty), kernel_layout(x.gate, type), out);
    save(ctx, s);
    ctx->saved_data["shape"] = proj.sizes();
    ctx->saved_data["out_strides"] = out.strides();
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["head_dim"] = head_dim;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["own_bias"] = own_bias.defined();
    ctx->saved_data["bias_dtype"] = own_bias.defined() ? own_bias.scalar_type() : type;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const Saved s = saved(ctx);
    const c10::cuda::CUDAGuard guard(s.q.device());
    const int64_t H = ctx->saved_data["heads"].toInt(), d = ctx->saved_data["head_dim"].toInt();
    const bool own_bias = ctx->saved_data["own_bias"].toBool();
    const at::Tensor dproj = at::empty(ctx->saved_data["shape"].toIntVector(), s.o.options());
    const ProjectedOperands x = projected_operands(dproj, H, d, ctx->saved_data["transposed"].toBool());
    const int64_t written = 4 * H * d + (own_bias ? 0 : H), pad = dproj.size(3) - written;
    const at::Tensor dbias = own_bias ? at::empty(s.bias.sizes(), s.bias.options().dtype(at::kFloat)) : x.bias;
    // The padding columns follow the bias's when the op projects its own bias: the bias-gradient
    // reduction writes them with it where it runs, else they are zeroed here.
    const bool padding_written = run_backward(s, grad_out[0], ctx->saved_data["out_strides"].toIntVector(),
                                              {x.q, x.k, x.v, x.gate, dbias}, own_bias ? 0 : pad);
    if (pad > 0 && !padding_written) dproj.narrow(-1, written, pad).zero_();
    return {dproj, own_bias ? dbias.to(ctx->saved_data["bias_dtype"].toScalarType()) : at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
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
  return TriangleAttentionFunction::apply(q, k, v, absent_as_empty(bias, q), absent_as_empty(mask, q),
                                          absent_as_empty(gate, q))[0];
}

at::Tensor triangle_attention_projected_cuda(const at::Tensor& proj, const std::optional<at::Tensor>& bias,
                                             const std::optional<at::Tensor>& mask, int64_t heads, int64_t head_dim,
                                             bool transposed) {
  const ProjectedOperands x = projected_operands(proj, heads, head_dim, transposed);
  const bool own_bias = bias.has_value() && bias->defined();
  check_triangle_attention_args(x.q, x.k, x.v, own_bias ? *bias : x.bias, mask, x.gate);
  // The kernels store gradients two elements at a time: an odd projection width (or a shape the
  // kernels leave to the reference) goes through the views and the plain op instead.
  if (proj.size(3) % 2 != 0 || proj.scalar_type() == at::kDouble || !cuda::supported_head_dim(head_dim) ||
      !kernels_run_on(proj, "triangle_attention"))
    return triangle_attention(x.q, x.k, x.v, own_bias ? *bias : x.bias, mask, x.gate);
  return ProjectedFunction::apply(proj, absent_as_empty(bias, proj), absent_as_empty(mask, proj), heads, head_dim,
                                  transposed)[0];
}

}  // namespace
}  // namespace megafold::ops

// AutogradCUDA takes precedence over the CompositeImplicitAutograd reference for CUDA
// tensors; the CUDA key serves calls that skip autograd (inference mode).
TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("triangle_attention", &megafold::ops::triangle_attention_cuda);
  m.impl("triangle_attention_projected", &megafold::ops::triangle_attention_projected_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("triangle_attention", &megafold::ops::triangle_attention_cuda);
  m.impl("triangle_attention_projected", &megafold::ops::triangle_attention_projected_cuda);
}
