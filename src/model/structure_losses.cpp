#include "model/structure_losses.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/check.h"

namespace megafold::model {
namespace {

void check_coords(const char* what, const at::Tensor& x, const at::Tensor& mask) {
  MF_CHECK(x.dim() == 3 && x.size(2) == 3, what, ": coordinates must be [B, A, 3], got ", x.sizes());
  MF_CHECK(mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1), what,
           ": mask must be [B, A] = [", x.size(0), ", ", x.size(1), "], got ", mask.sizes());
}

// Pairwise distances [B, A, A] by explicit differences (the matmul form of cdist loses
// ~1e-3 A, which matters against 0.5 A thresholds). Squared distances are clamped at 1e-12
// before the root: the diagonal and coincident (e.g. padding) atoms would otherwise give
// 0 * inf = NaN gradients even where the pair is masked.
at::Tensor distances(const at::Tensor& x) {
  return (x.unsqueeze(2) - x.unsqueeze(1)).pow(2).sum(-1).clamp_min(1e-12).sqrt();
}

// Ordered pairs l != m of masked atoms: [B, A, A] float.
at::Tensor pair_mask(const at::Tensor& mask) {
  const int64_t A = mask.size(1);
  const at::Tensor not_self = 1 - at::eye(A, mask.options());
  return mask.unsqueeze(2) * mask.unsqueeze(1) * not_self;
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

at::Tensor smooth_lddt_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& mask, double radius) {
  check_coords("smooth_lddt_loss: pred", pred, mask);
  check_coords("smooth_lddt_loss: gt", gt, mask);
  const at::Tensor d_true = distances(gt.detach()), d_pred = distances(pred);
  const at::Tensor delta = (d_true - d_pred).abs();
  const at::Tensor eps = 0.25 * (at::sigmoid(0.5 - delta) + at::sigmoid(1.0 - delta) + at::sigmoid(2.0 - delta) +
                                 at::sigmoid(4.0 - delta));
  const at::Tensor c = pair_mask(mask) * (d_true < radius).to(mask.scalar_type());
  const at::Tensor lddt = (c * eps).sum({1, 2}) / c.sum({1, 2}).clamp_min(1);
  return 1 - lddt;
}

Lddt lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
          double radius) {
  check_coords("lddt: pred", pred, mask);
  check_coords("lddt: ref", ref, mask);
  MF_CHECK(residue.sizes() == mask.sizes(), "lddt: residue must be [B, A] like mask, got ", residue.sizes());
  c10::AutoGradMode no_grad(false);
  const at::Tensor p = pred.detach().to(at::kDouble), r = ref.detach().to(at::kDouble);
  const at::Tensor m = mask.to(at::kDouble);
  const at::Tensor d_ref = distances(r), delta = (distances(p) - d_ref).abs();
  const at::Tensor other_residue = residue.unsqueeze(2) != residue.unsqueeze(1);
  const at::Tensor scored = pair_mask(m) * (other_residue & (d_ref < radius)).to(at::kDouble);
  at::Tensor kept = at::zeros_like(delta);
  for (const double t : {0.5, 1.0, 2.0, 4.0}) kept += (delta < t).to(at::kDouble);
  const at::Tensor pairs = scored.sum({1, 2});
  const at::Tensor score = (scored * kept).sum({1, 2}) / (4 * pairs.clamp_min(1));
  return {score.to(pred.scalar_type()), pairs};
}

}  // namespace megafold::model
