// Structure losses and lDDT: rigid alignment recovers a known motion and never reflects;
// lDDT against hand-computed cases; losses invariant to rigid motions; smooth lDDT gradient.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "data/residue_constants.h"
#include "model/structure_losses.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

// A random proper rotation per example: QR of a Gaussian matrix, signs fixed so det = +1.
at::Tensor random_rotation(int64_t B, at::ScalarType dtype) {
  const auto [q, r] = at::linalg_qr(at::randn({B, 3, 3}, at::kDouble));
  at::Tensor rot = q * at::sign(at::diagonal(r, 0, -2, -1)).unsqueeze(1);
  const at::Tensor flip = at::where(at::linalg_det(rot) < 0, -1.0, 1.0);
  rot.select(2, 2).mul_(flip.unsqueeze(1));
  return rot.to(dtype);
}

at::Tensor move(const at::Tensor& x, const at::Tensor& rot, const at::Tensor& shift) {
  return at::matmul(x, rot.transpose(1, 2)) + shift.unsqueeze(1);
}

class StructureLosses : public ::testing::Test {
 protected:
  void SetUp() override { fresh_seed(); }
};

TEST_F(StructureLosses, RigidAlignRecoversAKnownMotionIgnoringZeroWeights) {
  const int64_t B = 3, A = 37;
  const at::Tensor target = at::randn({B, A, 3}, at::kDouble) * 10;
  const at::Tensor rot = random_rotation(B, at::kDouble), shift = at::randn({B, 3}, at::kDouble) * 20;
  at::Tensor x = move(target, rot, shift);
  at::Tensor w = at::rand({B, A}, at::kDouble) + 0.1;
  // Atoms with zero weight may be anywhere: they must not move the solution.
  w.narrow(1, 0, 5).zero_();
  x.narrow(1, 0, 5).add_(at::randn({B, 5, 3}, at::kDouble) * 100);
  const at::Tensor aligned = weighted_rigid_align(x, target, w);
  const at::Tensor err = (aligned - target).narrow(1, 5, A - 5).abs().max();
  EXPECT_LT(err.item<double>(), 1e-9 * target.abs().max().item<double>());
  EXPECT_FALSE(aligned.requires_grad());
}

TEST_F(StructureLosses, RigidAlignNeverReturnsAMirrorImage) {
  const int64_t B = 2, A = 20;
  const at::Tensor target = at::randn({B, A, 3}, at::kDouble);
  at::Tensor mirrored = target.clone();
  mirrored.select(2, 0).neg_();  // a reflection: no rotation maps it back
  const at::Tensor aligned = weighted_rigid_align(mirrored, target, at::ones({B, A}, at::kDouble));
  // The result is a rotated copy of `mirrored` (distances kept), still chiral-opposite.
  auto dist = [](const at::Tensor& x) { return (x.unsqueeze(2) - x.unsqueeze(1)).pow(2).sum(-1).sqrt(); };
  EXPECT_TRUE(at::allclose(dist(aligned), dist(mirrored), 1e-9, 1e-9));
  auto volume = [](const at::Tensor& x) {  // signed volume of the first tetrahedron
    const at::Tensor a = x.select(1, 1) - x.select(1, 0), b = x.select(1, 2) - x.select(1, 0),
                     c = x.select(1, 3) - x.select(1, 0);
    return (at::linalg_cross(a, b) * c).sum(-1);
  };
  EXPECT_TRUE(at::equal(at::sign(volume(aligned)), at::sign(volume(mirrored))));
}

TEST_F(StructureLosses, LddtHandComputedCases) {
  // Four atoms in four residues on a line, 3 A apart; the prediction moves the last atom out
  // by 0.7 A: its three pairs keep thresholds 1, 2, 4 (3/4), the other three pairs all four.
  const at::Tensor ref = at::tensor({0., 0., 0., 3., 0., 0., 6., 0., 0., 9., 0., 0.}, at::kDouble).view({1, 4, 3});
  at::Tensor pred = ref.clone();
  pred[0][3][0] = 9.7;
  const at::Tensor mask = at::ones({1, 4}, at::kDouble);
  const at::Tensor residue = at::arange(4, at::kLong).view({1, 4});
  const Lddt all = lddt(pred, ref, mask, residue);
  EXPECT_NEAR(all.score.item<double>(), (3 * 1.0 + 3 * 0.75) / 6, 1e-12);
  EXPECT_EQ(all.pairs.item<double>(), 12);
  // Radius 8: the 9 A pair (0, 3) is not scored: (3 * 1 + 2 * 0.75) / 5.
  EXPECT_NEAR(lddt(pred, ref, mask, residue, 8.0).score.item<double>(), 4.5 / 5, 1e-12);
  // Atoms 2 and 3 in one residue: their pair is not scored, nor is a masked atom's.
  const at::Tensor same = at::tensor({0, 1, 2, 2}, at::kLong).view({1, 4});
  EXPECT_NEAR(lddt(pred, ref, mask, same).score.item<double>(), (3 * 1.0 + 2 * 0.75) / 5, 1e-12);
  const at::Tensor drop_last = at::tensor({1., 1., 1., 0.}, at::kDouble).view({1, 4});
  EXPECT_NEAR(lddt(pred, ref, drop_last, residue).score.item<double>(), 1.0, 1e-12);
  // No scored pair at all: score 0 with 0 pairs, not NaN.
  const Lddt none = lddt(pred, ref, at::zeros({1, 4}, at::kDouble), residue);
  EXPECT_EQ(none.score.item<double>(), 0.0);
  EXPECT_EQ(none.pairs.item<double>(), 0.0);
}

TEST_F(StructureLosses, LossesAreInvariantToRigidMotions) {
  const int64_t B = 2, A = 29;
  const at::Tensor gt = at::randn({B, A, 3}, at::kDouble) * 6;
  const at::Tensor pred = gt + at::randn({B, A, 3}, at::kDouble);
  at::Tensor mask = (at::rand({B, A}, at::kDouble) > 0.2).to(at::kDouble);
  const at::Tensor w = 1 + 5 * (at::rand({B, A}, at::kDouble) > 0.8).to(at::kDouble);
  const at::Tensor rot = random_rotation(B, at::kDouble), shift = at::randn({B, 3}, at::kDouble) * 30;
  const at::Tensor moved = move(pred, rot, shift);
  const double mse = aligned_mse_loss(pred, gt, w, mask).mean().item<double>();
  EXPECT_GT(mse, 0.1);
  EXPECT_NEAR(aligned_mse_loss(moved, gt, w, mask).mean().item<double>(), mse, 1e-9 * mse);
  EXPECT_NEAR(aligned_mse_loss(pred, move(gt, rot, shift), w, mask).mean().item<double>(), mse, 1e-9 * mse);
  const double sl = smooth_lddt_loss(pred, gt, mask).mean().item<double>();
  EXPECT_NEAR(smooth_lddt_loss(moved, gt, mask).mean().item<double>(), sl, 1e-12);
  const at::Tensor residue = at::arange(A, at::kLong).expand({B, A});
  EXPECT_TRUE(at::allclose(lddt(moved, gt, mask, residue).score, lddt(pred, gt, mask, residue).score, 0, 1e-12));
  // A perfect prediction: MSE 0, lDDT 1, smooth lDDT loss 1 - mean_t sigmoid(t).
  EXPECT_LT(aligned_mse_loss(move(gt, rot, shift), gt, w, mask).max().item<double>(), 1e-14);
  EXPECT_NEAR(lddt(gt, gt, mask, residue).score.min().item<double>(), 1.0, 1e-12);
  double floor = 0;
  for (double t : {0.5, 1.0, 2.0, 4.0}) floor += 0.25 / (1 + std::exp(-t));
  EXPECT_NEAR(smooth_lddt_loss(gt, gt, mask).max().item<double>(), 1 - floor, 1e-12);
}

TEST_F(StructureLosses, GradientsMatchFiniteDifferences) {
  const int64_t B = 2, A = 6;
  const at::Tensor gt = at::randn({B, A, 3}, at::kDouble) * 3;
  const at::Tensor pred = (gt + at::randn({B, A, 3}, at::kDouble) * 0.7).requires_grad_(true);
  const at::Tensor mask = at::tensor({1., 1., 1., 1., 0., 1., 1., 1., 1., 1., 1., 1.}, at::kDouble).view({B, A});
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) { return smooth_lddt_loss(x[0], gt, mask, 6.0); }, {pred});
  // The alignment is detached, so the MSE gradient is that of a fixed target.
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) {
        return ((x[0] - weighted_rigid_align(gt, pred.detach(), mask)).pow(2).sum(-1) * mask).sum();
      },
      {pred});
  const at::Tensor g = torch::autograd::grad({aligned_mse_loss(pred, gt, at::ones_like(mask), mask).mean()}, {pred})[0];
  const at::Tensor target = weighted_rigid_align(gt, pred.detach(), mask);
  const at::Tensor expected = 2 * (pred.detach() - target) * mask.unsqueeze(-1) / (3 * mask.sum(1).view({B, 1, 1})) / B;
  EXPECT_TRUE(at::allclose(g, expected, 1e-10, 1e-12));
}

// The fused smooth lDDT (one pass over pairs, analytic backward) against AF3 Alg. 27 written
// as plain autograd tensor code, float64, with masked atoms and pairs on both sides of the
// radius: one radius for all atoms, and per-atom radii (AF3: 30 A for nucleotide atoms, 15 A
// for the others, so the scored pairs are not symmetric).
TEST_F(StructureLosses, SmoothLddtMatchesItsPlainExpression) {
  const int64_t B = 3, A = 41;
  const at::Tensor gt = at::randn({B, A, 3}, at::kDouble) * 6;
  const at::Tensor pred = (gt + at::randn({B, A, 3}, at::kDouble) * 1.5).requires_grad_(true);
  const at::Tensor mask = (at::rand({B, A}, at::kDouble) > 0.2).to(at::kDouble);
  const at::Tensor mixed = at::where(at::rand({B, A}) > 0.5, 14.0, 7.0).to(at::kDouble);
  for (const at::Tensor& radius : {at::full({B, A}, 9.0, at::kDouble), mixed}) {
    auto plain = [&](const at::Tensor& x) {
      auto dist = [](const at::Tensor& y) { return (y.unsqueeze(2) - y.unsqueeze(1)).pow(2).sum(-1).clamp_min(1e-12).sqrt(); };
      const at::Tensor d_true = dist(gt), delta = (d_true - dist(x)).abs();
      at::Tensor eps = at::zeros_like(delta);
      for (double t : {0.5, 1.0, 2.0, 4.0}) eps = eps + 0.25 * at::sigmoid(t - delta);
      const at::Tensor c = mask.unsqueeze(2) * mask.unsqueeze(1) * (1 - at::eye(A, at::kDouble)) *
                           (d_true < radius.unsqueeze(2)).to(at::kDouble);
      return 1 - (c * eps).sum({1, 2}) / c.sum({1, 2}).clamp_min(1);
    };
    const at::Tensor w = at::rand({B}, at::kDouble);
    const at::Tensor ours = smooth_lddt_loss(pred, gt, mask, radius), ref = plain(pred);
    EXPECT_LT(rel_error(ours, ref), 1e-13);
    const at::Tensor g_ours = torch::autograd::grad({(ours * w).sum()}, {pred})[0];
    const at::Tensor g_ref = torch::autograd::grad({(ref * w).sum()}, {pred})[0];
    EXPECT_LT(rel_error(g_ours, g_ref), 1e-12);
  }
  EXPECT_TRUE(at::equal(smooth_lddt_loss(pred, gt, mask, 9.0), smooth_lddt_loss(pred, gt, mask, at::full({B, A}, 9.0, at::kDouble))));
}

// AF3's molecule weights and radii per atom slot: protein 1 / 15 A, DNA and RNA 6 / 30 A,
// ligand 11 / 15 A.
TEST_F(StructureLosses, MoleculeTypeWeightsAndRadii) {
  const at::Tensor mol = at::tensor({0, 1, 2, 3}, at::kLong).view({1, 4});
  const at::Tensor w = atom_loss_weights(mol), r = atom_lddt_radius(mol);
  ASSERT_EQ(w.sizes(), (at::IntArrayRef{1, 4 * data::kMaxAtomsPerToken}));
  const double weights[] = {1, 6, 6, 11}, radii[] = {15, 30, 30, 15};
  for (int t = 0; t < 4; ++t)
    for (int a = 0; a < data::kMaxAtomsPerToken; ++a) {
      EXPECT_EQ(w[0][t * data::kMaxAtomsPerToken + a].item<double>(), weights[t]);
      EXPECT_EQ(r[0][t * data::kMaxAtomsPerToken + a].item<double>(), radii[t]);
    }
}

// The GPU form (blocks of atom rows against all atoms, analytic backward) against the CPU
// form (fused pair loops), float64: the same loss and gradient, with one block (300 atoms) and
// with two, the second partial (6000 atoms: 5592 rows per block of 2^26 pair entries). Runs
// on the device; skipped without CUDA.
TEST_F(StructureLosses, SmoothLddtOnTheGpuMatchesTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t A : {300, 6000}) {
    const int64_t B = 2;
    const at::Tensor gt = at::randn({B, A, 3}, at::kDouble) * (A > 1000 ? 30 : 8);
    const at::Tensor pred = (gt + at::randn({B, A, 3}, at::kDouble) * 2).requires_grad_(true);
    const at::Tensor mask = (at::rand({B, A}, at::kDouble) > 0.1).to(at::kDouble);
    const at::Tensor w = at::rand({B}, at::kDouble);
    // Per-atom radii (nucleotide atoms 30 A, the rest 15 A): asymmetric scored pairs.
    const at::Tensor radius = at::where(at::rand({B, A}) > 0.7, 30.0, 15.0).to(at::kDouble);
    const at::Tensor cpu = smooth_lddt_loss(pred, gt, mask, radius);
    const at::Tensor g_cpu = torch::autograd::grad({(cpu * w).sum()}, {pred})[0];
    const at::Tensor pred_gpu = pred.detach().cuda().requires_grad_(true);
    const at::Tensor gpu = smooth_lddt_loss(pred_gpu, gt.cuda(), mask.cuda(), radius.cuda());
    const at::Tensor g_gpu = torch::autograd::grad({(gpu * w.cuda()).sum()}, {pred_gpu})[0];
    EXPECT_LT(rel_error(gpu.cpu(), cpu), 1e-12) << A << " atoms";
    EXPECT_LT(rel_error(g_gpu.cpu(), g_cpu), 1e-10) << A << " atoms";
  }
}

TEST_F(StructureLosses, BadShapesAreNamed) {
  const at::Tensor x = at::zeros({1, 4, 3}), mask = at::ones({1, 5});
  try {
    lddt(x, x, mask, at::zeros({1, 5}, at::kLong));
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("lddt: pred: mask must be [B, A]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megafold::model
