// CUDA binding of triangle_multiplication's projection, operands and contract stages
// (AutogradCUDA and CUDA keys): 16-bit tensors go through triangle_multiplication_layout.cu,
// layernorm_linear's kernels and cuBLAS, anything else through the ATen references.
//   projection  on H100/H200 one layernorm_linear forward whose epilogue makes the operands
//             (see TrimulEpilogue) and keeps no projection; backward = one kernel that
//             recomputes it and gives its gradient and dz, then layernorm_linear's weight
//             gradients.
//   operands  proj rows -> a, b returned as [B, n, N, c] views of channel-major [B, c, n, N]
//             memory, and the output gate as rows; backward takes da, db in that layout (a
//             copy only if a caller changed it) and writes the projection's whole gradient.
//   contract  the channel-major operands (or their transposes: the incoming update) go to
//             cuBLAS as they are; t comes back as rows [B, I, J, c] for the output LayerNorm.
//             Each operand's gradient is produced in its operand's memory order, so the
//             operands' backward reads it without a copy.
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/cuda_binding.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "ops/layernorm_linear/layernorm_linear_binding.h"
#include "ops/triangle_multiplication/triangle_multiplication.h"
#include "ops/triangle_multiplication/triangle_multiplication_cuda.h"

namespace megafold::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B, I, J, c] pair tensor -> the kernels' layout description.
cuda::PairLayout pair_layout(const at::Tensor& t) {
  return {kernel_dtype(t.scalar_type()), t.size(0), t.size(1) * t.size(2), t.size(3)};
}

// The channel-major [B, c, I, J] memory behind a [B, I, J, c] tensor (free when it is laid out
// so, which the kernels' outputs and contract's gradients are).
at::Tensor channel_major(const at::Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); }

// Rows of the projection evenly strided with contiguous channels: [B, n, N, width] read in place.
bool rows_in_place(const at::Tensor& p) {
  return p.stride(3) == 1 && p.stride(1) == p.size(2) * p.stride(2) && p.stride(0) == p.size(1) * p.stride(1);
}

// The operands' backward: from the projection rows, the mask (float, or empty) and the
// gradients of a, b and gate, the projection's whole gradient in one pass (no zero-filled
// tensor for slices to land in).
at::Tensor operands_backward(const at::Tensor& proj, const at::Tensor& mask, int64_t c, const variable_list& grads) {
  const c10::cuda::CUDAGuard guard(proj.device());
  const int64_t B = proj.size(0), n = proj.size(1), N = proj.size(2), c_gate = proj.size(3) - 4 * c;
  auto grad_cm = [&](const at::Tensor& g) {
    return g.defined() ? channel_major(g.to(proj.scalar_type())) : at::zeros({B, c, n, N}, proj.options());
  };
  const at::Tensor da = grad_cm(grads[0]), db = grad_cm(grads[1]);
  const at::Tensor dgate = grads[2].defined() ? grads[2].to(proj.scalar_type()).contiguous()
                                              : at::zeros({B, n, N, c_gate}, proj.options());
  const at::Tensor dproj = at::empty({B, n, N, 4 * c + c_gate}, proj.options());
  cuda::PairLayout l = pair_layout(proj);
  l.c = c;
  cuda::TrimulOperands o{proj.data_ptr(), proj.stride(2), mask.numel() > 0 ? mask.data_ptr<float>() : nullptr,
                         c_gate, da.data_ptr(), db.data_ptr(), dgate.data_ptr(), dproj.data_ptr()};
  cuda::trimul_operands_backward(l, o, current_stream(proj));
  return dproj;
}

struct OperandsFunction : public torch::autograd::Function<OperandsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& proj_in, const at::Tensor& mask_or_empty,
                               int64_t c) {
    const c10::cuda::CUDAGuard guard(proj_in.device());
    const at::Tensor proj = rows_in_place(proj_in) ? proj_in : proj_in.contiguous();
    const int64_t B = proj.size(0), n = proj.size(1), N = proj.size(2), c_gate = proj.size(3) - 4 * c;
    const at::Tensor mask = mask_or_empty.numel() > 0 ? mask_or_empty.to(at::kFloat).contiguous() : at::Tensor();
    const at::Tensor a = at::empty({B, c, n, N}, proj.options()), b = at::empty({B, c, n, N}, proj.options());
    const at::Tensor gate = at::empty({B, n, N, c_gate}, proj.options());
    cuda::PairLayout l = pair_layout(proj);
    l.c = c;
    cuda::TrimulOperands o{proj.data_ptr(), proj.stride(2), mask.defined() ? mask.data_ptr<float>() : nullptr, c_gate,
                           a.data_ptr(), b.data_ptr(), gate.data_ptr(), nullptr};
    cuda::trimul_operands_forward(l, o, current_stream(proj));
    ctx->save_for_backward({proj, mask.defined() ? mask : at::empty({0}, proj.options().dtype(at::kFloat))});
    ctx->saved_data["c"] = c;
    return {a.permute({0, 2, 3, 1}), b.permute({0, 2, 3, 1}), gate};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    return {operands_backward(s[0], s[1], ctx->saved_data["c"].toInt(), grads), at::Tensor(), at::Tensor()};
  }
};

// The projection and the operands, fused on H100/H200: layernorm_linear's forward makes a, b
// and the gate in its epilogue and keeps no projection; the backward recomputes it in one
// kernel that writes its gradient and dz (trimul_projection_backward), then layernorm_linear's
// weight-gradient kernels read that gradient once. With `passthrough` z is a fourth output, whose
// gradient the kernel adds to dz (where dz keeps z's dtype: fp32 z, or z in the product dtype;
// else afterwards).
struct ProjectionFunction : public torch::autograd::Function<ProjectionFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& ln_w,
                               const at::Tensor& ln_b, const at::Tensor& w, const at::Tensor& mask_or_empty,
                               int64_t c, bool passthrough) {
    const c10::cuda::CUDAGuard guard(z.device());
    // Outputs without a gradient come undefined: the backward then reads zeros only for a or b
    // and adds nothing for the passthrough.
    ctx->set_materialize_grads(false);
    const at::Tensor mask = mask_or_empty.numel() > 0 ? mask_or_empty.to(at::kFloat).contiguous() : at::Tensor();
    at::Tensor a, b, gate;
    const LayerNormLinearContext l = layernorm_linear_trimul_forward(z, ln_w, ln_b, w, mask, c, a, b, gate);
    ctx->save_for_backward({l.x, l.ln_w, l.ln_b, l.w, l.mean, l.rstd,
                            mask.defined() ? mask : at::empty({0}, z.options().dtype(at::kFloat))});
    ctx->saved_data["c"] = c;
    auto code = [](at::ScalarType t) { return static_cast<int64_t>(t); };
    ctx->saved_data["dtypes"] =
        std::vector<int64_t>{code(l.x_dtype), code(l.ln_w_dtype), code(l.ln_b_dtype), code(l.w_dtype)};
    if (passthrough) return {a.permute({0, 2, 3, 1}), b.permute({0, 2, 3, 1}), gate, z};
    return {a.permute({0, 2, 3, 1}), b.permute({0, 2, 3, 1}), gate};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const std::vector<int64_t> dt = ctx->saved_data["dtypes"].toIntVector();
    auto type = [&](int i) { return static_cast<at::ScalarType>(dt[i]); };
    const at::Tensor &x = s[0], &ln_w = s[1], &ln_b = s[2], &w = s[3], &mean = s[4], &rstd = s[5], &mask = s[6];
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t c = ctx->saved_data["c"].toInt(), c_gate = w.size(0) - 4 * c;
    const int64_t B = x.size(0), plane = x.size(1) * x.size(2), M = B * plane;  // x: z [B, n, N, 128]
    const auto t16 = w.options();
    // The incoming gradients in the layouts the kernel reads (free for what contract and the
    // residual step produce): da, db channel-major [B, c, plane], d gate as rows.
    auto channel_major_grad = [&](const at::Tensor& g) {
      return g.defined() ? aligned_rows(channel_major(g.to(w.scalar_type()))) : at::zeros({B, c, plane}, t16);
    };
    const at::Tensor da = channel_major_grad(grads[0]), db = channel_major_grad(grads[1]);
    const at::Tensor dgate = grads[2].defined() ? aligned_rows(grads[2].to(w.scalar_type()))
                                                : at::zeros({M, c_gate}, t16);
    const at::Tensor dproj = at::empty({M, 4 * c + c_gate}, t16), dx = at::empty(x.sizes(), x.options());
    const at::Tensor through = grads.size() > 3 ? grads[3] : at::Tensor();
    const bool kernel_adds = through.defined() && x.scalar_type() == type(0);
    const at::Tensor add = kernel_adds ? aligned_rows(through.to(x.scalar_type())) : at::Tensor();
    cuda::TrimulProjectionBackwardParams p{};
    p.x_dtype = kernel_dtype(x.scalar_type());
    p.dtype = kernel_dtype(w.scalar_type());
    p.batch = B;
    p.plane = plane;
    p.c = c;
    p.c_gate = c_gate;
    p.x = x.data_ptr();
    p.ln_w = ln_w.data_ptr<float>();
    p.ln_b = ln_b.data_ptr<float>();
    p.w = w.data_ptr();
    p.mean = mean.data_ptr<float>();
    p.rstd = rstd.data_ptr<float>();
    p.mask = mask.numel() > 0 ? mask.data_ptr<float>() : nullptr;
    p.da = da.data_ptr();
    p.db = db.data_ptr();
    p.dgate = dgate.data_ptr();
    p.dproj = dproj.data_ptr();
    p.dx = dx.data_ptr();
    p.dx_add = kernel_adds ? add.data_ptr() : nullptr;
    cuda::trimul_projection_backward(p, current_stream(x));
    const LayerNormLinearWeightGrads g = layernorm_linear_weight_gradients(x, ln_w, ln_b, w, mean, rstd, dproj);
    at::Tensor dz = dx.to(type(0));
    if (through.defined() && !kernel_adds) dz = dz + through;
    return {dz, g.d_ln_w.to(type(1)), g.d_ln_b.to(type(2)), g.dw.to(type(3)), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

// X @ Y^T-style products in the memory order of `like`: when `like` is a transposed view of
// contiguous memory, (lhs @ rhs) is computed as (rhs^T @ lhs^T)^T so that it lands in that order.
at::Tensor matmul_like(const at::Tensor& like, const at::Tensor& lhs, const at::Tensor& rhs) {
  if (!like.is_contiguous() && like.transpose(-1, -2).is_contiguous())
    return at::matmul(rhs.transpose(-1, -2), lhs.transpose(-1, -2)).transpose(-1, -2);
  return at::matmul(lhs, rhs);
}

struct ContractFunction : public torch::autograd::Function<ContractFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    const c10::cuda::CUDAGuard guard(a.device());
    const at::Tensor A = a.permute({0, 3, 1, 2}), Bm = b.permute({0, 3, 1, 2});  // [B, c, I, K], [B, c, J, K]
    const at::Tensor t_cm = at::matmul(A, Bm.transpose(-1, -2)).contiguous();     // [B, c, I, J]
    const at::Tensor t = at::empty({a.size(0), a.size(1), b.size(1), a.size(3)}, a.options());
    cuda::channels_to_rows(pair_layout(t), t_cm.data_ptr(), t.data_ptr(), current_stream(a));
    ctx->save_for_backward({a, b});
    return {t};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &a = s[0], &b = s[1];
    const c10::cuda::CUDAGuard guard(a.device());
    const at::Tensor dt = grads[0].to(a.scalar_type()).contiguous();
    const at::Tensor dT = at::empty({dt.size(0), dt.size(3), dt.size(1), dt.size(2)}, dt.options());
    cuda::rows_to_channels(pair_layout(dt), dt.data_ptr(), dT.data_ptr(), current_stream(a));
    const at::Tensor A = a.permute({0, 3, 1, 2}), Bm = b.permute({0, 3, 1, 2});
    // T = A Bm^T: dA = dT Bm, dBm = dT^T A.
    const at::Tensor dA = matmul_like(A, dT, Bm), dB = matmul_like(Bm, dT.transpose(-1, -2), A);
    return {dA.permute({0, 2, 3, 1}), dB.permute({0, 2, 3, 1})};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> operands_cuda(const at::Tensor& proj, const std::optional<at::Tensor>& mask,
                                                             int64_t c) {
  if (!is_16bit(proj.scalar_type()) || proj.dim() != 4 || c < 1 || proj.size(3) < 4 * c ||
      !kernels_run_on(proj, "triangle_multiplication"))
    return triangle_multiplication_operands_ref(proj, mask, c);
  const bool has_mask = mask.has_value() && mask->defined();
  // The kernels read one mask value per pair; a broadcasting mask takes the reference.
  if (has_mask && mask->sizes() != proj.sizes().slice(0, 3)) return triangle_multiplication_operands_ref(proj, mask, c);
  const variable_list r = OperandsFunction::apply(proj, has_mask ? *mask : at::empty({0}, proj.options()), c);
  return {r[0], r[1], r[2]};
}

// The fused projection's outputs (a, b, gate, and z itself with `passthrough`), or empty where
// the reference serves (no sm_90a kernels, shapes the epilogue does not take, a broadcasting mask).
variable_list projection_kernels(const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w,
                                 const at::Tensor& ln_b, const at::Tensor& w, int64_t c, bool passthrough) {
  const bool has_mask = mask.has_value() && mask->defined();
  if (!layernorm_linear_trimul_fits(z, w, c) || (has_mask && mask->sizes() != z.sizes().slice(0, 3))) return {};
  check_layernorm_linear_args(z, ln_w, ln_b, w, std::nullopt);
  const at::Tensor mask_or_empty = has_mask ? *mask : at::empty({0}, z.options());
  return ProjectionFunction::apply(z, ln_w, ln_b, w, mask_or_empty, c, passthrough);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> projection_cuda(const at::Tensor& z,
                                                               const std::optional<at::Tensor>& mask,
                                                               const at::Tensor& ln_w, const at::Tensor& ln_b,
                                                               const at::Tensor& w, int64_t c) {
  const variable_list r = projection_kernels(z, mask, ln_w, ln_b, w, c, false);
  if (r.empty()) return triangle_multiplication_projection_ref(z, mask, ln_w, ln_b, w, c);
  return {r[0], r[1], r[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> projection_passthrough_cuda(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c) {
  const variable_list r = projection_kernels(z, mask, ln_w, ln_b, w, c, true);
  if (r.empty()) return triangle_multiplication_projection_passthrough_ref(z, mask, ln_w, ln_b, w, c);
  return {r[0], r[1], r[2], r[3]};
}

at::Tensor contract_cuda(const at::Tensor& a, const at::Tensor& b) {
  if (!is_16bit(a.scalar_type()) || a.scalar_type() != b.scalar_type() || a.dim() != 4 || b.dim() != 4 ||
      !kernels_run_on(a, "triangle_multiplication"))
    return triangle_multiplication_contract_ref(a, b);
  TORCH_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(2) && a.size(3) == b.size(3),
              "triangle_multiplication: operands ", a.sizes(), " and ", b.sizes(), " do not contract");
  return ContractFunction::apply(a, b)[0];
}

}  // namespace
}  // namespace megafold::ops

TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("triangle_multiplication_operands", &megafold::ops::operands_cuda);
  m.impl("triangle_multiplication_contract", &megafold::ops::contract_cuda);
  m.impl("triangle_multiplication_projection", &megafold::ops::projection_cuda);
  m.impl("triangle_multiplication_projection_passthrough", &megafold::ops::projection_passthrough_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("triangle_multiplication_operands", &megafold::ops::operands_cuda);
  m.impl("triangle_multiplication_contract", &megafold::ops::contract_cuda);
  m.impl("triangle_multiplication_projection", &megafold::ops::projection_cuda);
  m.impl("triangle_multiplication_projection_passthrough", &megafold::ops::projection_passthrough_cuda);
}
