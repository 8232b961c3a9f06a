#include "model/structure_losses.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "data/residue_constants.h"

namespace megafold::model {
namespace {

void check_coords(const char* what, const at::Tensor& x, const at::Tensor& mask) {
  MF_CHECK(x.dim() == 3 && x.size(2) == 3, what, ": coordinates must be [B, A, 3], got ", x.sizes());
  MF_CHECK(mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1), what,
           ": mask must be [B, A] = [", x.size(0), ", ", x.size(1), "], got ", mask.sizes());
}

// Distances [B, L, M] between every atom of x [B, L, 3] and of y [B, M, 3] by explicit
// differences (the matmul form of cdist loses ~1e-3 A, which matters against 0.5 A
// thresholds). Squared distances are clamped at 1e-12 before the root: the diagonal and
// coincident (e.g. padding) atoms would otherwise give 0 * inf = NaN gradients even where the
// pair is masked.
at::Tensor cross_distances(const at::Tensor& x, const at::Tensor& y) {
  return (x.unsqueeze(2) - y.unsqueeze(1)).pow(2).sum(-1).clamp_min(1e-12).sqrt();
}

}  // namespace

at::Tensor weighted_rigid_align(const at::Tensor& x, const at::Tensor& target, const at::Tensor& weights) {
  check_coords("weighted_rigid_align: x", x, weights);
  check_coords("weighted_rigid_align: target", target, weights);
  c10::AutoGradMode no_grad(false);  // AF3 SI Alg. 28 ends in stop_gradient
  const at::Tensor xd = x.detach().to(at::kDouble), td = target.detach().to(at::kDouble);
  const at::Tensor w = weights.detach().to(at::kDouble).unsqueeze(-1);  // [B, A, 1]
  const at::Tensor w_sum = w.sum(1, true).clamp_min(1e-12);
  const at::Tensor mu_x = (w * xd).sum(1, true) / w_sum, mu_t = (w * td).sum(1, true) / w_sum;
  const at::Tensor xc = xd - mu_x, tc = td - mu_t;
  // H = sum_l w_l xc_l tc_l^T; with H = U S V^T the best rotation is V D U^T, D = diag(1, 1,
  // sign det(V U^T)) so that a mirror image is never returned.
  const at::Tensor h = at::matmul((w * xc).transpose(1, 2), tc);  // [B, 3, 3]
  const auto [u, s, vh] = at::linalg_svd(h);
  const at::Tensor v = vh.transpose(1, 2), ut = u.transpose(1, 2);
  const at::Tensor d = at::sign(at::linalg_det(at::matmul(v, ut)));  // [B]
  at::Tensor fix = at::ones({x.size(0), 3}, xd.options());
  fix.select(1, 2).copy_(d);
  const at::Tensor r = at::matmul(v * fix.unsqueeze(1), ut);  // [B, 3, 3]
  return (at::matmul(xc, r.transpose(1, 2)) + mu_t).to(x.scalar_type());
}

at::Tensor aligned_mse_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& weights,
                            const at::Tensor& mask) {
  check_coords("aligned_mse_loss: pred", pred, mask);
  check_coords("aligned_mse_loss: gt", gt, mask);
  const at::Tensor w = weights * mask;
  const at::Tensor gt_aligned = weighted_rigid_align(gt, pred, w);
  const at::Tensor sq = (pred - gt_aligned).pow(2).sum(-1);  // [B, A]
  return (w * sq).sum(1) / (3 * mask.sum(1).clamp_min(1));
}

namespace {

constexpr double kThresholds[] = {0.5, 1.0, 2.0, 4.0};

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Calls fn(d, d_true, d_pred, in_l, in_m) for every partner m of atom l of row r that smooth
// lDDT scores in either direction: both masked, m != l, and the true distance below l's radius
// (in_l: the pair counts for l) or m's (in_m). d = x_l - x_m. x, y: predicted and true
// coordinates [R, A, 3]; mask, radius [R, A].
template <typename T, typename Fn>
void for_each_scored_partner(const T* x, const T* y, const T* mask, const T* radius, int64_t A, int64_t r, int64_t l,
                             Fn&& fn) {
  const T* xr = x + r * A * 3;
  const T* yr = y + r * A * 3;
  const T* mr = mask + r * A;
  const T* rr = radius + r * A;
  if (mr[l] == T(0)) return;
  for (int64_t m = 0; m < A; ++m) {
    if (m == l || mr[m] == T(0)) continue;
    T dt = 0, dp = 0, d[3];
    for (int k = 0; k < 3; ++k) {
      const T e = yr[3 * l + k] - yr[3 * m + k];
      d[k] = xr[3 * l + k] - xr[3 * m + k];
      dt += e * e;
      dp += d[k] * d[k];
    }
    dt = std::sqrt(std::max(dt, T(1e-12)));
    const bool in_l = dt < rr[l], in_m = dt < rr[m];
    if (in_l || in_m) fn(d, dt, std::sqrt(std::max(dp, T(1e-12))), in_l, in_m);
  }
}

// CPU smooth lDDT in one pass over atom pairs, without any [R, A, A] tensor: for every row r
// and atom l, the sum over scored partners m of sum_t sigmoid(t - |d_true - d_pred|) (eps) and
// their count. Each (r, l) is written by one thread, so the result is deterministic.
template <typename T>
void smooth_lddt_rows_cpu(const T* x, const T* y, const T* mask, const T* radius, int64_t R, int64_t A, T* eps,
                          T* count) {
  at::parallel_for(0, R * A, 1, [&](int64_t begin, int64_t end) {
    for (int64_t rl = begin; rl < end; ++rl) {
      T e = 0, n = 0;
      for_each_scored_partner(x, y, mask, radius, A, rl / A, rl % A, [&](const T*, T dt, T dp, bool in_l, bool) {
        if (!in_l) return;
        for (const double t : kThresholds) e += sigmoid(T(t) - std::abs(dt - dp));
        n += 1;
      });
      eps[rl] = e;
      count[rl] = n;
    }
  });
}

// Its gradient: dL/dx_l = sum_m (c_lm + c_ml) G_lm (x_l - x_m) / d_pred_lm with the symmetric
// G_lm = g_r / norm_r * 0.25 * sum_t sigmoid'(t - |delta|) * sign(d_pred - d_true); c_lm = 1
// where the pair counts for l (its radius), so c is symmetric when all radii are equal.
template <typename T>
void smooth_lddt_grad_cpu(const T* x, const T* y, const T* mask, const T* radius, const T* g_over_norm, int64_t R,
                          int64_t A, T* dx) {
  at::parallel_for(0, R * A, 1, [&](int64_t begin, int64_t end) {
    for (int64_t rl = begin; rl < end; ++rl) {
      T acc[3] = {0, 0, 0};
      for_each_scored_partner(x, y, mask, radius, A, rl / A, rl % A, [&](const T* d, T dt, T dp, bool in_l, bool in_m) {
        const T diff = dp - dt, delta = std::abs(diff);
        T slope = 0;
        for (const double t : kThresholds) {
          const T sg = sigmoid(T(t) - delta);
          slope += sg * (1 - sg);
        }
        const T sign = diff > 0 ? T(1) : diff < 0 ? T(-1) : T(0);
        const T w = T(int(in_l) + int(in_m)) * T(0.25) * slope * sign / dp;
        for (int k = 0; k < 3; ++k) acc[k] += w * d[k];
      });
      for (int k = 0; k < 3; ++k) dx[rl * 3 + k] = g_over_norm[rl / A] * acc[k];
    }
  });
}

// Pair entries per block of the smooth lDDT on a GPU: rows of atoms l are taken L at a time
// so that its [R, L, A] pair tensors hold about this many values (256 MB each in fp32). Whole
// [R, A, A] tensors would take R x 460 MB each at 768 tokens (A = 10752).
constexpr int64_t kPairBlock = int64_t{1} << 26;

// The scored pairs of atoms l0 .. l0 + L against all atoms, counted for l (c_l, l's radius)
// and for m (c_m, m's radius), true and predicted distances: [R, L, A] each.
struct PairBlock {
  at::Tensor c_l, c_m, d_true, d_pred;
};
PairBlock pair_block(const at::Tensor& x, const at::Tensor& y, const at::Tensor& mask, const at::Tensor& radius,
                     int64_t l0, int64_t L) {
  const int64_t A = x.size(1);
  PairBlock b;
  b.d_true = cross_distances(y.narrow(1, l0, L), y);
  b.d_pred = cross_distances(x.narrow(1, l0, L), x);
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(x.device());
  const at::Tensor not_self = at::arange(l0, l0 + L, i64).unsqueeze(1) != at::arange(A, i64).unsqueeze(0);
  const at::Tensor pair = mask.narrow(1, l0, L).unsqueeze(2) * mask.unsqueeze(1) * not_self.to(x.scalar_type());
  b.c_l = pair * (b.d_true < radius.narrow(1, l0, L).unsqueeze(2)).to(x.scalar_type());
  b.c_m = pair * (b.d_true < radius.unsqueeze(1)).to(x.scalar_type());
  return b;
}

// Smooth lDDT as one autograd node with an analytic backward. Autograd through the plain
// expression keeps ~10 [R, A, A] tensors (differences, distances, four sigmoids, ...); this
// node keeps none: on the CPU fused pair loops, on a GPU blocks of atom rows (kPairBlock), both
// forward and backward, which recomputes each block's distances.
struct SmoothLddt : public torch::autograd::Function<SmoothLddt> {
  // pred, gt [R, A, 3]; mask, radius [R, A]; gt, mask and radius carry no gradient.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& pred, const at::Tensor& gt,
                            const at::Tensor& mask, const at::Tensor& radius) {
    const at::Tensor x = pred.contiguous(), y = gt.to(pred.scalar_type()).contiguous();
    const at::Tensor mk = mask.to(pred.scalar_type()).contiguous();
    const at::Tensor rad = radius.to(pred.scalar_type()).contiguous();
    const int64_t R = x.size(0), A = x.size(1);
    at::Tensor eps_sum, count_sum;
    if (pred.is_cpu()) {
      at::Tensor eps = at::empty({R, A}, x.options()), count = at::empty({R, A}, x.options());
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "smooth_lddt", [&] {
        smooth_lddt_rows_cpu<scalar_t>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), mk.data_ptr<scalar_t>(),
                                       rad.data_ptr<scalar_t>(), R, A, eps.data_ptr<scalar_t>(),
                                       count.data_ptr<scalar_t>());
      });
      eps_sum = eps.sum(1);
      count_sum = count.sum(1);
    } else {
      eps_sum = at::zeros({R}, x.options());
      count_sum = at::zeros({R}, x.options());
      const int64_t L = std::clamp<int64_t>(kPairBlock / std::max<int64_t>(R * A, 1), 1, std::max<int64_t>(A, 1));
      for (int64_t l0 = 0; l0 < A; l0 += L) {
        const PairBlock b = pair_block(x, y, mk, rad, l0, std::min(L, A - l0));
        const at::Tensor delta = (b.d_true - b.d_pred).abs();
        at::Tensor eps = at::zeros_like(delta);
        for (const double t : kThresholds) eps += at::sigmoid(t - delta);
        eps_sum += (b.c_l * eps).sum({1, 2});
        count_sum += b.c_l.sum({1, 2});
      }
    }
    const at::Tensor norm = count_sum.clamp_min(1);
    ctx->save_for_backward({x, y, mk, rad, norm});
    return 1 - 0.25 * eps_sum / norm;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &y = saved[1], &mk = saved[2], &rad = saved[3], &norm = saved[4];
    const at::Tensor g = (grad_out[0] / norm).contiguous();
    at::Tensor dx = at::empty_like(x);
    if (x.is_cpu()) {
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "smooth_lddt_backward", [&] {
        smooth_lddt_grad_cpu<scalar_t>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), mk.data_ptr<scalar_t>(),
                                       rad.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), x.size(0), x.size(1),
                                       dx.data_ptr<scalar_t>());
      });
      return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    // d_lm = |x_l - x_m| and the pair weight G_lm = g / norm * 0.25 * sum_t sigmoid'(t - |delta|)
    // * sign(d_pred - d_true) is symmetric, so dL/dx_l = sum_m (c_lm + c_ml) G_lm (x_l - x_m) / d_lm
    // needs only the block's own rows.
    const int64_t R = x.size(0), A = x.size(1);
    const int64_t L = std::clamp<int64_t>(kPairBlock / std::max<int64_t>(R * A, 1), 1, std::max<int64_t>(A, 1));
    for (int64_t l0 = 0; l0 < A; l0 += L) {
      const int64_t n = std::min(L, A - l0);
      const PairBlock b = pair_block(x, y, mk, rad, l0, n);
      const at::Tensor diff = b.d_pred - b.d_true, delta = diff.abs();
      at::Tensor slope = at::zeros_like(delta);
      for (const double t : kThresholds) {
        const at::Tensor sg = at::sigmoid(t - delta);
        slope += sg * (1 - sg);
      }
      const at::Tensor h = g.view({-1, 1, 1}) * 0.25 * (b.c_l + b.c_m) * slope * at::sign(diff) / b.d_pred;  // [R, n, A]
      dx.narrow(1, l0, n).copy_(h.sum(2, true) * x.narrow(1, l0, n) - at::matmul(h, x));
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor smooth_lddt_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& mask, double radius) {
  return smooth_lddt_loss(pred, gt, mask, at::full(mask.sizes(), radius, pred.options()));
}

at::Tensor smooth_lddt_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& mask,
                            const at::Tensor& radius) {
  check_coords("smooth_lddt_loss: pred", pred, mask);
  check_coords("smooth_lddt_loss: gt", gt, mask);
  MF_CHECK(radius.sizes() == mask.sizes(), "smooth_lddt_loss: radius must have the mask's shape ", mask.sizes(),
           ", got ", radius.sizes());
  return SmoothLddt::apply(pred, gt.detach(), mask.detach(), radius.detach());
}

namespace {

// Atoms of one side of an lDDT pair: coordinates in both structures, mask and residue id.
struct Side {
  at::Tensor pred, ref, mask, residue;
};

// Pairs (l, m) that lDDT scores and, for each, how many of the thresholds 0.5, 1, 2, 4 A
// |d_pred - d_ref| stays under: both [B, L, M] double.
// radius: a scalar, or [B, L] per atom l.
std::pair<at::Tensor, at::Tensor> lddt_pairs(const Side& l, const Side& m, const at::Tensor& radius) {
  check_coords("lddt: pred", l.pred, l.mask);
  check_coords("lddt: ref", l.ref, l.mask);
  check_coords("lddt: reference-set pred", m.pred, m.mask);
  check_coords("lddt: reference-set ref", m.ref, m.mask);
  MF_CHECK(l.residue.sizes() == l.mask.sizes() && m.residue.sizes() == m.mask.sizes(),
           "lddt: residue ids must have the masks' shape [B, A], got ", l.residue.sizes(), " and ", m.residue.sizes());
  auto dbl = [](const at::Tensor& t) { return t.detach().to(at::kDouble); };
  const at::Tensor d_ref = cross_distances(dbl(l.ref), dbl(m.ref));
  const at::Tensor delta = (cross_distances(dbl(l.pred), dbl(m.pred)) - d_ref).abs();
  const at::Tensor other_residue = l.residue.unsqueeze(2) != m.residue.unsqueeze(1);
  const at::Tensor within = d_ref < (radius.dim() == 0 ? radius : radius.unsqueeze(2)).to(d_ref.device(), at::kDouble);
  const at::Tensor scored = dbl(l.mask).unsqueeze(2) * dbl(m.mask).unsqueeze(1) * (other_residue & within).to(at::kDouble);
  at::Tensor kept = at::zeros_like(delta);
  for (const double t : {0.5, 1.0, 2.0, 4.0}) kept += (delta < t).to(at::kDouble);
  return {scored, kept};
}

}  // namespace

Lddt lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
          double radius) {
  c10::AutoGradMode no_grad(false);
  const Side all{pred, ref, mask, residue};
  const auto [scored, kept] = lddt_pairs(all, all, at::scalar_tensor(radius, at::kDouble));
  const at::Tensor pairs = scored.sum({1, 2});
  const at::Tensor score = (scored * kept).sum({1, 2}) / (4 * pairs.clamp_min(1));
  return {score.to(pred.scalar_type()), pairs};
}

Lddt per_atom_lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
                   const at::Tensor& set_pred, const at::Tensor& set_ref, const at::Tensor& set_mask,
                   const at::Tensor& set_residue, double radius) {
  return per_atom_lddt(pred, ref, mask, residue, set_pred, set_ref, set_mask, set_residue,
                       at::scalar_tensor(radius, at::kDouble));
}

Lddt per_atom_lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
                   const at::Tensor& set_pred, const at::Tensor& set_ref, const at::Tensor& set_mask,
                   const at::Tensor& set_residue, const at::Tensor& radius) {
  c10::AutoGradMode no_grad(false);
  MF_CHECK(radius.dim() == 0 || radius.sizes() == mask.sizes(), "per_atom_lddt: radius must be a scalar or of the "
           "mask's shape ", mask.sizes(), ", got ", radius.sizes());
  const auto [scored, kept] =
      lddt_pairs({pred, ref, mask, residue}, {set_pred, set_ref, set_mask, set_residue}, radius);
  const at::Tensor pairs = scored.sum(2);
  const at::Tensor score = (scored * kept).sum(2) / (4 * pairs.clamp_min(1));
  return {score.to(pred.scalar_type()), pairs};
}

namespace {

// Per-token values by molecule type, repeated over the token's atom slots: [B, N] -> [B, N * 24].
at::Tensor per_atom_by_type(const at::Tensor& mol_type, double protein, double nucleotide, double ligand) {
  using data::MolType;
  const at::Tensor m = mol_type.to(at::kLong);
  const at::Tensor nuc = (m == static_cast<int64_t>(MolType::kRna)) | (m == static_cast<int64_t>(MolType::kDna));
  const at::Tensor lig = m == static_cast<int64_t>(MolType::kLigand);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(m.device());
  const at::Tensor v = at::full(m.sizes(), protein, f32) + (nucleotide - protein) * nuc.to(at::kFloat) +
                       (ligand - protein) * lig.to(at::kFloat);
  return v.repeat_interleave(data::kMaxAtomsPerToken, 1);
}

}  // namespace

at::Tensor atom_loss_weights(const at::Tensor& mol_type) { return per_atom_by_type(mol_type, 1.0, 6.0, 11.0); }

at::Tensor atom_lddt_radius(const at::Tensor& mol_type) { return per_atom_by_type(mol_type, 15.0, 30.0, 15.0); }

}  // namespace megafold::model
