// Confidence head: per-atom lDDT targets on hand-computed cases, the expected-value readout, the
// loss of a perfect prediction, representative atoms, token frames, the aligned and distance
// errors and their losses against float64 references written from AF3 SI Alg. 29-30 and Sec.
// 4.3, pTM / ipTM / chain-pair ipTM against a direct evaluation of their definitions, the clash
// rule, the disorder term (residue areas against the cap formula and DSSP, windowing against
// numpy's reflection, the fraction, the residues of a real batch), the ranking score term by
// term, and stopped gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/af3_json.h"
#include "data/features.h"
#include "data/structure.h"
#include "model/confidence.h"
#include "model/confidence_scores.h"
#include "model/structure_losses.h"
#include "model/surface_area.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;
using data::kMaxAtomsPerToken;

// Atom l at the origin against three set atoms: true distances 3, 5 and 20 A, predicted 3.4,
// 6.5 and 20. The 20 A partner is outside 15 A; 0.4 A error keeps 4 of 4 thresholds, 1.5 A
// keeps 2 (2 and 4 A): lDDT_l = (1 + 0.5) / 2. The set atoms score against each other too.
TEST(PerAtomLddt, HandComputedCase) {
  const at::Tensor ref = at::tensor({0., 0., 0.}, at::kDouble).view({1, 1, 3});
  const at::Tensor pred = ref.clone();
  const at::Tensor set_ref = at::tensor({3., 0., 0., 0., 5., 0., 0., 0., 20.}, at::kDouble).view({1, 3, 3});
  const at::Tensor set_pred = at::tensor({3.4, 0., 0., 0., 6.5, 0., 0., 0., 20.}, at::kDouble).view({1, 3, 3});
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  const Lddt l = per_atom_lddt(pred, ref, at::ones({1, 1}, at::kDouble), at::zeros({1, 1}, i64), set_pred, set_ref,
                               at::ones({1, 3}, at::kDouble), at::arange(1, 4, i64).view({1, 3}));
  EXPECT_NEAR(l.score.item<double>(), 0.75, 1e-12);
  EXPECT_EQ(l.pairs.item<double>(), 2.0);
  // The same atom as a member of its own residue's set is not its own partner.
  const Lddt self = per_atom_lddt(pred, ref, at::ones({1, 1}, at::kDouble), at::zeros({1, 1}, i64), set_pred, set_ref,
                                  at::ones({1, 3}, at::kDouble), at::zeros({1, 3}, i64));
  EXPECT_EQ(self.pairs.item<double>(), 0.0);
  EXPECT_EQ(self.score.item<double>(), 0.0);
  // A nucleotide atom's 30 A radius takes the 20 A partner in too (exact there): (1 + 0.5 + 1) / 3.
  const Lddt wide = per_atom_lddt(pred, ref, at::ones({1, 1}, at::kDouble), at::zeros({1, 1}, i64), set_pred, set_ref,
                                  at::ones({1, 3}, at::kDouble), at::arange(1, 4, i64).view({1, 3}),
                                  at::full({1, 1}, 30.0, at::kDouble));
  EXPECT_EQ(wide.pairs.item<double>(), 3.0);
  EXPECT_NEAR(wide.score.item<double>(), 2.5 / 3.0, 1e-12);
}

TEST(Plddt, ExpectedValueOfTheBins) {
  EXPECT_NEAR(plddt_from_logits(at::zeros({2, 5, 50})).mean().item<double>(), 50.0, 1e-4);
  at::Tensor logits = at::full({1, 1, 50}, -1e4);
  logits[0][0][7] = 0;
  EXPECT_NEAR(plddt_from_logits(logits).item<double>(), 15.0, 1e-3);  // centre of bin 7: 7.5 / 50
}

data::Batch ubiquitin_batch(int n_real, int pad_to) {
  static const data::Entry e = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1ubi.pdb.gz");
  std::vector<int32_t> sel(n_real);
  std::iota(sel.begin(), sel.end(), 0);
  return data::make_batch({&e}, {sel}, pad_to);
}

TEST(Plddt, PerfectPredictionTargetsTheTopBin) {
  const data::Batch b = ubiquitin_batch(20, 23);
  const int64_t A = 23 * kMaxAtomsPerToken;
  const at::Tensor gt = b.atom_coords.reshape({1, A, 3});
  at::Tensor logits = at::full({1, A, 50}, -30.0);
  logits.select(2, 49).fill_(30.0);
  const PlddtLoss perfect = plddt_loss(logits, gt, b);
  EXPECT_NEAR(perfect.target.item<double>(), 1.0, 1e-6);
  EXPECT_LT(perfect.loss.item<double>(), 1e-20);
  // A noisy structure scores lower and the same confident logits now cost a lot.
  const PlddtLoss noisy = plddt_loss(logits, gt + at::randn_like(gt) * 3, b);
  EXPECT_LT(noisy.target.item<double>(), 0.9);
  EXPECT_GT(noisy.loss.item<double>(), 1.0);
}

// AF3 SI Sec. 4.4: CB (CA for glycine), C4 for purines, C2 for pyrimidines, picked per token.
TEST(Plddt, RepresentativeAtomsPerTokenType) {
  const std::vector<std::pair<int, std::string>> expected = {
      {0, "CB"}, {7, "CA"}, {data::kRnaG, "C4"}, {data::kRnaU, "C2"}, {data::kDnaA, "C4"}, {data::kDnaT, "C2"}};
  const int64_t N = static_cast<int64_t>(expected.size());
  std::vector<int64_t> slots;
  for (const auto& [t, name] : expected) {
    const int slot = data::representative_atom_slot(t);
    EXPECT_EQ(data::atom_names(t)[slot], name) << data::residue_name(t);
    slots.push_back(slot);
  }
  at::Tensor x = at::arange(N * kMaxAtomsPerToken * 3, at::kFloat).view({1, N * kMaxAtomsPerToken, 3});
  const at::Tensor rep = slot_atoms(x, at::tensor(slots, at::kLong).view({1, N}));
  const at::Tensor xs = x.view({1, N, kMaxAtomsPerToken, 3});
  for (int64_t i = 0; i < N; ++i) EXPECT_TRUE(at::equal(rep[0][i], xs[0][i][slots[i]])) << i;
}

// The head learns from its inputs but sends no gradient back into them.
TEST(ConfidenceHead, GradientsStopAtItsInputs) {
  fresh_seed();
  ModelConfig cfg;
  cfg.c_s = 16, cfg.c_z = 8, cfg.tri_attn_heads = 2, cfg.tri_attn_head_dim = 4, cfg.tri_mul_hidden = 8;
  cfg.single_attn_heads = 2, cfg.single_attn_head_dim = 4, cfg.dropout = 0;
  cfg.confidence.n_blocks = 1;
  ConfidenceHead head(cfg, 32);
  randomise_parameters(*head, 0.3);
  const data::Batch b = ubiquitin_batch(10, 12);
  const int64_t N = 12, A = N * kMaxAtomsPerToken;
  const at::Tensor s_inputs = at::randn({1, N, 32}).requires_grad_(true);
  const at::Tensor s = at::randn({1, N, 16}).requires_grad_(true);
  const at::Tensor z = at::randn({1, N, N, 8}).requires_grad_(true);
  const at::Tensor x = (b.atom_coords.reshape({1, A, 3}) + at::randn({1, A, 3})).requires_grad_(true);
  const ConfidenceLogits logits = head(b, s_inputs, s, z, x, 0);
  EXPECT_EQ(logits.plddt.sizes(), (std::vector<int64_t>{1, A, cfg.confidence.plddt_bins}));
  EXPECT_EQ(logits.pae.sizes(), (std::vector<int64_t>{1, N, N, cfg.confidence.error_bins}));
  EXPECT_EQ(logits.pde.sizes(), (std::vector<int64_t>{1, N, N, cfg.confidence.error_bins}));
  EXPECT_EQ(logits.resolved.sizes(), (std::vector<int64_t>{1, A, 2}));
  // PDE reads z_ij + z_ji: symmetric logits.
  EXPECT_LT((logits.pde - logits.pde.transpose(1, 2)).abs().max().item<double>(), 1e-5);
  confidence_loss(logits, x, b, cfg.confidence).total.backward();
  for (const at::Tensor& t : {s_inputs, s, z, x}) EXPECT_FALSE(t.grad().defined());
  for (const auto& p : head->named_parameters())
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
}

using Vec = std::array<double, 3>;
Vec sub(const Vec& a, const Vec& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
Vec add(const Vec& a, const Vec& b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
double dot(const Vec& a, const Vec& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec unit(const Vec& a) {
  const double n = std::sqrt(dot(a, a));
  return {a[0] / n, a[1] / n, a[2] / n};
}
Vec cross(const Vec& a, const Vec& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
Vec atom(const at::Tensor& x, int64_t index) {  // x [A, 3] double
  return {x[index][0].item<double>(), x[index][1].item<double>(), x[index][2].item<double>()};
}
// SI Alg. 30: x in the frame (a, b, c).
Vec in_frame(const Vec& a, const Vec& b, const Vec& c, const Vec& x) {
  const Vec w1 = unit(sub(a, b)), w2 = unit(sub(c, b));
  const Vec e1 = unit(add(w1, w2)), e2 = unit(sub(w2, w1)), e3 = cross(e1, e2);
  const Vec d = sub(x, b);
  return {dot(d, e1), dot(d, e2), dot(d, e3)};
}

double norm(const Vec& a) { return std::sqrt(dot(a, a)); }
double largest(std::initializer_list<Vec> xs) {
  double m = 0;
  for (const Vec& x : xs) m = std::max({m, std::abs(x[0]), std::abs(x[1]), std::abs(x[2])});
  return m;
}
// What float32 arithmetic may move x expressed in the frame (a, b, c): coordinates of magnitude
// |x| carry ~eps |x| each; the axes inherit that over the frame's edges, amplified by
// 1 / |w1 +- w2| where the frame is near a line, and carry it over the lever |x - b|.
double frame_tolerance(const Vec& a, const Vec& b, const Vec& c, const Vec& x) {
  const double eps = std::ldexp(1.0, -23);
  const Vec w1 = unit(sub(a, b)), w2 = unit(sub(c, b));
  const double cond = 1.0 / std::min(norm(add(w1, w2)), norm(sub(w2, w1)));
  const double edge = std::min(norm(sub(a, b)), norm(sub(c, b)));
  return 16 * eps * largest({a, b, c, x}) * (1 + cond * norm(sub(x, b)) / edge);
}

// 4cup: BAZ2B bromodomain (115 residues), the fragment ZYB (11 atoms) and three methanols.
data::Batch complex_batch() {
  static const data::Entry e = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/4cup.cif.gz");
  return data::make_batch({&e}, {{}}, 0);
}

TEST(ConfidenceFrames, ResiduesUseTheirBackboneAndLigandAtomsTheirNearestNeighbours) {
  const data::Batch b = complex_batch();
  const int64_t N = b.n_tokens();
  const at::Tensor pos = b.ref.pos.to(at::kDouble);
  int ligand_frames = 0, methanol = 0;
  for (int64_t i = 0; i < N; ++i) {
    const at::Tensor f = b.frame_atoms[0][i];
    const bool has = b.frame_mask[0][i].item<float>() > 0;
    if (b.mol_type[0][i].item<int64_t>() == static_cast<int64_t>(data::MolType::kProtein)) {
      ASSERT_TRUE(has) << i;
      EXPECT_EQ(f[0].item<int64_t>(), i * kMaxAtomsPerToken + data::kAtomN);
      EXPECT_EQ(f[1].item<int64_t>(), i * kMaxAtomsPerToken + data::kAtomCA);
      EXPECT_EQ(f[2].item<int64_t>(), i * kMaxAtomsPerToken + data::kAtomC);
      continue;
    }
    // A ligand atom: within its conformer, the two nearest other atoms, unless fewer than two
    // or the three within 25 degrees of a line.
    const int64_t uid = b.ref.space_uid[0][i].item<int64_t>();
    std::vector<std::pair<double, int64_t>> others;
    const Vec me = {pos[0][i][0][0].item<double>(), pos[0][i][0][1].item<double>(), pos[0][i][0][2].item<double>()};
    for (int64_t j = 0; j < N; ++j)
      if (j != i && b.ref.space_uid[0][j].item<int64_t>() == uid) {
        const Vec o = {pos[0][j][0][0].item<double>(), pos[0][j][0][1].item<double>(), pos[0][j][0][2].item<double>()};
        others.push_back({dot(sub(o, me), sub(o, me)), j});
      }
    std::stable_sort(others.begin(), others.end(), [](auto& x, auto& y) { return x.first < y.first; });
    if (others.size() < 2) {
      EXPECT_FALSE(has) << "token " << i << ": no frame from " << others.size() + 1 << " atoms";
      ++methanol;
      continue;
    }
    auto at_row = [&](int64_t j) {
      return Vec{pos[0][j][0][0].item<double>(), pos[0][j][0][1].item<double>(), pos[0][j][0][2].item<double>()};
    };
    const Vec u = unit(sub(at_row(others[0].second), me)), v = unit(sub(at_row(others[1].second), me));
    const double angle = std::acos(std::clamp(dot(u, v), -1.0, 1.0)) * 180.0 / M_PI;
    EXPECT_EQ(has, angle >= 25.0 && angle <= 155.0) << "token " << i << ", angle " << angle;
    if (!has) continue;
    ++ligand_frames;
    EXPECT_EQ(f[0].item<int64_t>(), others[0].second * kMaxAtomsPerToken);
    EXPECT_EQ(f[1].item<int64_t>(), i * kMaxAtomsPerToken);
    EXPECT_EQ(f[2].item<int64_t>(), others[1].second * kMaxAtomsPerToken);
  }
  EXPECT_GE(ligand_frames, 6);  // most of ZYB's 11 atoms
  EXPECT_EQ(methanol, 6);       // three methanols, two heavy atoms each: no frames
}

// A perturbed structure: aligned and distance errors and their losses against the SI written
// out in float64 on the same float32 coordinates (the model computes in float32: tolerances
// from float32's precision, frame_tolerance).
TEST(ConfidenceErrors, AlignedAndDistanceErrorsMatchTheirDefinitions) {
  fresh_seed();
  data::Batch b = complex_batch();
  const int64_t N = b.n_tokens(), A = N * kMaxAtomsPerToken;
  b.atom_mask[0][3][1] = 0.f;  // an unresolved CA: token 3 has no frame, and no centre
  const at::Tensor gt = b.atom_coords.reshape({A, 3}).to(at::kDouble);
  const at::Tensor pred = (gt + 1.5 * at::randn({A, 3}, at::kDouble)).to(at::kFloat).to(at::kDouble);
  const PairErrors pae = aligned_errors(pred.unsqueeze(0).to(at::kFloat), b);
  const PairErrors pde = distance_errors(pred.unsqueeze(0).to(at::kFloat), b);
  const at::Tensor amask = b.atom_mask.reshape({A});
  // Rigid motions of the prediction change no aligned error.
  const at::Tensor q = std::get<0>(at::linalg_qr(at::randn({3, 3}, at::kDouble)));
  const at::Tensor moved = (at::matmul(pred, q.t()) + at::tensor({4.0, -7.0, 2.5}, at::kDouble)).to(at::kFloat).to(at::kDouble);
  const PairErrors again = aligned_errors(moved.unsqueeze(0).to(at::kFloat), b);
  int64_t counted = 0;
  for (int64_t i = 0; i < N; i += 7)
    for (int64_t j = 0; j < N; j += 5) {
      const at::Tensor f = b.frame_atoms[0][i];
      const int64_t fa = f[0].item<int64_t>(), fb = f[1].item<int64_t>(), fc = f[2].item<int64_t>();
      const int64_t cj = j * kMaxAtomsPerToken + b.centre_slot[0][j].item<int64_t>();
      const int64_t ci = i * kMaxAtomsPerToken + b.centre_slot[0][i].item<int64_t>();
      const bool frame_ok = b.frame_mask[0][i].item<float>() > 0 && amask[fa].item<float>() > 0 &&
                            amask[fb].item<float>() > 0 && amask[fc].item<float>() > 0;
      const bool centre_j = amask[cj].item<float>() > 0, centre_i = amask[ci].item<float>() > 0;
      EXPECT_EQ(pae.mask[0][i][j].item<float>(), frame_ok && centre_j ? 1.f : 0.f) << i << " " << j;
      EXPECT_EQ(pde.mask[0][i][j].item<float>(), centre_i && centre_j ? 1.f : 0.f) << i << " " << j;
      if (frame_ok && centre_j) {
        const Vec p = in_frame(atom(pred, fa), atom(pred, fb), atom(pred, fc), atom(pred, cj));
        const Vec t = in_frame(atom(gt, fa), atom(gt, fb), atom(gt, fc), atom(gt, cj));
        const double tol = frame_tolerance(atom(pred, fa), atom(pred, fb), atom(pred, fc), atom(pred, cj)) +
                           frame_tolerance(atom(gt, fa), atom(gt, fb), atom(gt, fc), atom(gt, cj));
        EXPECT_NEAR(pae.error[0][i][j].item<double>(), std::sqrt(dot(sub(p, t), sub(p, t))), tol) << i << " " << j;
        // The moved prediction's coordinates were rounded to float32 again: twice its own tolerance.
        const double moved_tol = tol + 2 * frame_tolerance(atom(moved, fa), atom(moved, fb), atom(moved, fc), atom(moved, cj));
        EXPECT_NEAR(again.error[0][i][j].item<double>(), pae.error[0][i][j].item<double>(), moved_tol) << i << " " << j;
        ++counted;
      }
      if (centre_i && centre_j) {
        const Vec dp = sub(atom(pred, ci), atom(pred, cj)), dt = sub(atom(gt, ci), atom(gt, cj));
        const double tol = 16 * std::ldexp(1.0, -23) *
                           largest({atom(pred, ci), atom(pred, cj), atom(gt, ci), atom(gt, cj)});
        EXPECT_NEAR(pde.error[0][i][j].item<double>(), std::abs(std::sqrt(dot(dp, dp)) - std::sqrt(dot(dt, dt))), tol);
      }
    }
  EXPECT_GT(counted, 100);
  EXPECT_EQ(pae.mask[0][3].sum().item<float>(), 0.f);
  EXPECT_EQ(pae.mask[0].select(1, 3).sum().item<float>(), 0.f);
  // The loss: cross-entropy of the binned errors (64 bins over 32 A, the last open-ended),
  // mean over the counted pairs.
  const at::Tensor logits = at::randn({1, N, N, 64});
  const at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
  double sum = 0, pairs = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j)
      if (pae.mask[0][i][j].item<float>() > 0) {
        const int64_t bin = std::min<int64_t>(63, static_cast<int64_t>(pae.error[0][i][j].item<double>() / 0.5));
        sum -= logp[0][i][j][bin].item<double>();
        pairs += 1;
      }
  EXPECT_NEAR(pair_error_loss(logits, pae, 32.0).item<double>(), sum / pairs, 1e-5);
}

TEST(ConfidenceErrors, ResolvedLossCountsTheAtomsEachTokenHas) {
  data::Batch b = ubiquitin_batch(6, 8);
  const int64_t A = 8 * kMaxAtomsPerToken;
  b.atom_mask[0][2][5] = 0.f;  // one side-chain atom unobserved
  const at::Tensor logits = at::randn({1, A, 2});
  const at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
  double sum = 0, atoms = 0;
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t a = 0; a < kMaxAtomsPerToken; ++a)
      if (b.ref.mask[0][t][a].item<float>() > 0) {
        sum -= logp[0][t * kMaxAtomsPerToken + a][b.atom_mask[0][t][a].item<float>() > 0 ? 1 : 0].item<double>();
        atoms += 1;
      }
  EXPECT_NEAR(resolved_loss(logits, b).item<double>(), sum / atoms, 1e-6);
}

// pTM, ipTM and chain-pair ipTM by their definitions, term by term in float64; rows without a
// frame align nothing.
TEST(ConfidenceScores, TmScoresMatchTheirDefinitions) {
  fresh_seed();
  const int64_t N = 23, bins = 64, C = 3;
  const at::Tensor logits = 2 * at::randn({N, N, bins});
  const at::Tensor asym = at::tensor(std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                          1, 2, 2, 0, 0});
  at::Tensor mask = at::ones({N});
  mask[21] = 0, mask[22] = 0;  // padding
  at::Tensor frames = at::ones({N});
  frames[4] = 0, frames[20] = 0;  // tokens without a frame (an ion, a colinear ligand atom)
  const at::Tensor p = at::softmax(logits.to(at::kDouble), -1);
  auto framed = [&](int64_t i) { return frames[i].item<float>() > 0; };
  auto score = [&](auto in, auto pair) {
    double n = 0;
    for (int64_t i = 0; i < N; ++i) n += in(i);
    const double d0 = 1.24 * std::cbrt(std::max(n, 19.0) - 15.0) - 1.8;
    double best = -1;
    for (int64_t i = 0; i < N; ++i) {
      if (!in(i) || !framed(i)) continue;
      double total = 0, count = 0;
      for (int64_t j = 0; j < N; ++j) {
        if (!in(j) || !pair(i, j)) continue;
        double tm = 0;
        for (int64_t k = 0; k < bins; ++k) {
          const double e = (k + 0.5) * 0.5;
          tm += p[i][j][k].item<double>() / (1 + (e / d0) * (e / d0));
        }
        total += tm, count += 1;
      }
      if (count > 0) best = std::max(best, total / count);
    }
    return best;
  };
  auto chain = [&](int64_t i) { return asym[i].item<int64_t>(); };
  auto real = [&](int64_t i) { return mask[i].item<float>() > 0; };
  const TmScores s = tm_scores(logits, mask, frames, asym, C, 32.0);
  // float32 probabilities and products: ~1e-6 of terms of order 1.
  EXPECT_NEAR(s.ptm, score(real, [](int64_t, int64_t) { return true; }), 2e-6);
  EXPECT_NEAR(s.iptm, score(real, [&](int64_t i, int64_t j) { return chain(i) != chain(j); }), 2e-6);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < C; ++d) {
      auto in = [&](int64_t i) { return real(i) && (chain(i) == c || chain(i) == d); };
      const double want = c == d ? score(in, [](int64_t, int64_t) { return true; })
                                 : score(in, [&](int64_t i, int64_t j) { return chain(i) != chain(j); });
      EXPECT_NEAR(s.chain_pair_iptm[c][d].item<double>(), want, 2e-6) << c << " " << d;
    }
  // One chain: no interface.
  const TmScores one = tm_scores(logits, mask, frames, at::zeros({N}, at::kLong), 1, 32.0);
  EXPECT_TRUE(std::isnan(one.iptm));
  EXPECT_NEAR(ranking_score(one, 0.0, false), one.ptm, 1e-12);
  EXPECT_NEAR(ranking_score(s, 0.0, true), 0.8 * s.iptm + 0.2 * s.ptm - 100, 1e-12);
  // Certain errors of 0.25 A (the first bin's centre): every term is 1 / (1 + (0.25 / d0)^2),
  // with d0 = 0.453 A for 21 tokens.
  at::Tensor sure = at::full({N, N, bins}, -50.0);
  sure.select(2, 0).fill_(50.0);
  const double d0 = 1.24 * std::cbrt(21.0 - 15.0) - 1.8;
  EXPECT_NEAR(tm_scores(sure, mask, frames, asym, C, 32.0).ptm, 1 / (1 + (0.25 / d0) * (0.25 / d0)), 1e-6);
  EXPECT_NEAR(expected_error(sure, 32.0).mean().item<double>(), 0.25, 1e-5);
}

TEST(ConfidenceScores, ClashesNeedManyAtomsOrHalfAChain) {
  fresh_seed();
  // Chain 0: 300 atoms on a 1.5 A grid; chain 1: 4 atoms far away.
  at::Tensor x = at::zeros({304, 3});
  for (int64_t a = 0; a < 300; ++a) x[a] = at::tensor({1.5 * (a % 10), 1.5 * ((a / 10) % 10), 1.5 * (a / 100)});
  for (int64_t a = 300; a < 304; ++a) x[a] = at::tensor({100.0 + 2.0 * a, 0.0, 0.0});
  at::Tensor chain = at::zeros({304}, at::kLong);
  chain.narrow(0, 300, 4).fill_(1);
  const at::Tensor mask = at::ones({304});
  EXPECT_FALSE(has_clash(x, mask, chain, 2));
  // One of chain 1's four atoms on top of chain 0: 1 pair, a quarter of chain 1: no clash.
  x[300] = x[55] + 0.3;
  EXPECT_FALSE(has_clash(x, mask, chain, 2));
  // Three of four atoms: over half of chain 1.
  x[301] = x[56] + 0.3, x[302] = x[57] + 0.3;
  EXPECT_TRUE(has_clash(x, mask, chain, 2));
  // ... unless they are not there.
  at::Tensor absent = mask.clone();
  absent.narrow(0, 301, 2).zero_();
  EXPECT_FALSE(has_clash(x, absent, chain, 2));
  // Over 100 clashing atoms, under half of either chain: chain 1 of 400 atoms, `shadows` of them
  // 0.35 A from one atom of chain 0 each (the grid's next atom is 1.15 A away), the rest far off.
  auto shadowed = [&](int64_t shadows) {
    at::Tensor y = at::cat({x.narrow(0, 0, 300), at::zeros({400, 3})});
    for (int64_t a = 0; a < 400; ++a)
      y[300 + a] = a < shadows ? y[a] + 0.2 : at::tensor({-100.0 - 2.0 * a, 0.0, 0.0});
    const at::Tensor c = at::cat({at::zeros({300}, at::kLong), at::ones({400}, at::kLong)});
    return has_clash(y, at::ones({700}), c, 2);
  };
  EXPECT_FALSE(shadowed(100));  // 100 clashing atoms in each chain: not over 100; 25% and 33%
  EXPECT_TRUE(shadowed(101));
}

// ---- The disorder term and the ranking score (AF3 SI Sec. 5.9.3) ----

constexpr double kPi = std::numbers::pi;
constexpr double kCaSphere = 1.87 + kWaterProbeRadius;  // DSSP's CA radius expanded by the probe
constexpr double kHalfDot = 2 * kPi * kCaSphere * kCaSphere / kSurfaceDots;  // see surface_dots

// Residues collapsed onto their CA: every other atom (DSSP radius r < 1.87 A) sits (1.87 - r) / 2
// from the CA in a random direction. Its expanded sphere then lies inside CA's (offset + r +
// probe < 3.27 A): it has no free dot, and whatever dot it covers CA's sphere covers too; and no
// dot of CA's own sphere lies within it (3.27 - offset > r + probe). So each residue acts as one
// sphere of radius 3.27 A around its CA, whose exposure has closed forms.
struct CollapsedResidues {
  std::vector<double> xyz, radius, max_area;
  std::vector<int64_t> atom_residue, residue_chain;

  void add(int t, int64_t chain, const std::array<double, 3>& centre, std::mt19937_64& rng) {
    const int64_t residue = static_cast<int64_t>(residue_chain.size());
    residue_chain.push_back(chain);
    max_area.push_back(max_accessible_area(t));
    std::normal_distribution<double> g;
    for (const std::string_view name : data::atom_names(t)) {
      if (name.empty()) continue;
      const double r = dssp_atom_radius(name), offset = name == "CA" ? 0.0 : 0.5 * (1.87 - r);
      const std::array<double, 3> v{g(rng), g(rng), g(rng)};
      const double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      for (int d = 0; d < 3; ++d) xyz.push_back(centre[d] + offset * v[d] / n);
      radius.push_back(r);
      atom_residue.push_back(residue);
    }
  }
  // An atom the disorder term leaves out (a ligand's, say), here with no coordinates at all.
  void add_left_out() {
    for (int d = 0; d < 3; ++d) xyz.push_back(std::numeric_limits<double>::quiet_NaN());
    radius.push_back(0.0);
    atom_residue.push_back(-1);
  }
  at::Tensor coords() const { return at::tensor(xyz, at::kDouble).view({-1, 3}); }
  ProteinResidues residues() const {
    const int64_t R = static_cast<int64_t>(residue_chain.size());
    return {at::tensor(atom_residue, at::kLong), at::tensor(radius, at::kDouble),
            at::tensor(residue_chain, at::kLong).view({R}), at::tensor(max_area, at::kDouble).view({R})};
  }
};

// Two residues d apart along z: each one's sphere loses the cap toward the other, z >= z0 =
// d / (2 R) for equal radii, so its area is 2 pi R^2 (1 + z0), up to half a dot for a cap
// around the dots' axis. DSSP's whole A^2 then adds up to 0.5 before the division by the
// maximum: |RASA - min(1, area / max)| <= (0.5 + half a dot) / max.
TEST(DisorderTerm, ResidueAreasOfTwoResiduesFollowTheCapFormula) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int trial = 0; trial < 40; ++trial) {
    const int t1 = static_cast<int>(rng() % 20), t2 = static_cast<int>(rng() % 20);
    const double d = 0.8 + 3.2 * uniform(rng), sign = trial % 2 ? 1.0 : -1.0;
    const std::array<double, 3> c1{40 * uniform(rng), 40 * uniform(rng), 40 * uniform(rng)};
    CollapsedResidues r;
    r.add(t1, 0, c1, rng);
    r.add_left_out();
    r.add(t2, 0, {c1[0], c1[1], c1[2] + sign * d}, rng);
    const at::Tensor sasa = residue_sasa(r.coords(), r.residues());
    const at::Tensor rasa = residue_rasa(r.coords(), r.residues());
    const double area = 2 * kPi * kCaSphere * kCaSphere * (1 + d / (2 * kCaSphere));
    for (int64_t k = 0; k < 2; ++k) {
      const double max = r.max_area[k];
      EXPECT_NEAR(sasa[k].item<double>(), area, kHalfDot + 1e-9) << "seed " << seed << " trial " << trial;
      EXPECT_NEAR(rasa[k].item<double>(), std::min(1.0, area / max), (0.5 + kHalfDot) / max)
          << "seed " << seed << " trial " << trial;
    }
    // As two chains each is measured alone: the whole sphere, 4 pi 3.27^2 = 134.37 A^2 -> 134.
    r.residue_chain[1] = 1;
    const at::Tensor alone = residue_rasa(r.coords(), r.residues());
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(alone[k].item<double>(), std::min(1.0, 134.0 / r.max_area[k]));
  }
}

// numpy's np.pad(x, half, 'reflect') as numpy builds it: passes that each mirror the current
// array about its end values (without repeating them), at most size - 1 values per side.
std::vector<double> numpy_reflect_pad(std::vector<double> v, int64_t half) {
  if (v.size() == 1) return std::vector<double>(2 * half + 1, v[0]);  // numpy repeats a lone value
  int64_t left = half, right = half;
  while (left > 0 || right > 0) {
    const int64_t n = static_cast<int64_t>(v.size());
    const int64_t l = std::min(left, n - 1), r = std::min(right, n - 1);
    std::vector<double> out;
    for (int64_t k = l; k >= 1; --k) out.push_back(v[k]);
    out.insert(out.end(), v.begin(), v.end());
    for (int64_t k = 1; k <= r; ++k) out.push_back(v[n - 1 - k]);
    v = std::move(out);
    left -= l, right -= r;
  }
  return v;
}

// AF3's window: np.convolve(np.pad(rasa, half, 'reflect'), np.ones(window), 'valid') / window.
std::vector<double> numpy_window(const std::vector<double>& rasa, int64_t window) {
  const std::vector<double> padded = numpy_reflect_pad(rasa, (window - 1) / 2);
  std::vector<double> out;
  for (size_t i = 0; i < rasa.size(); ++i) {
    double sum = 0;
    for (int64_t j = 0; j < window; ++j) sum += padded[i + j];
    out.push_back(sum / static_cast<double>(window));
  }
  return out;
}

TEST(DisorderTerm, WindowMirrorsEachChainLikeNumpyReflect) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lengths = {1, 2, 3, 7, 12, 13, 14, 30, 61};
  std::vector<int64_t> chain;
  for (size_t c = 0; c < lengths.size(); ++c) chain.insert(chain.end(), lengths[c], static_cast<int64_t>(5 * c + 2));
  const at::Tensor rasa = at::rand({static_cast<int64_t>(chain.size())}, at::kDouble);
  const at::Tensor chains = at::tensor(chain, at::kLong);
  for (const int64_t window : {int64_t{1}, int64_t{3}, kDisorderWindow, static_cast<int64_t>(2 * (rng() % 40) + 1)}) {
    const at::Tensor got = windowed_rasa(rasa, chains, window);
    int64_t start = 0;
    for (const int64_t n : lengths) {
      std::vector<double> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = rasa[start + i].item<double>();
      const std::vector<double> want = numpy_window(values, window);
      // Sums of at most 121 values in [0, 1]: a few ulp of the sum.
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(got[start + i].item<double>(), want[i], 1e-13) << "window " << window << " chain of " << n;
      start += n;
    }
  }
  EXPECT_NE(error_of([&] { windowed_rasa(rasa, chains, 24); }).find("window must be odd"), std::string::npos);
  EXPECT_NE(error_of([&] { windowed_rasa(rasa, chains.narrow(0, 0, 5)); }).find("must match"), std::string::npos);
}

// Isolated residues have exact areas (every dot free): 134 A^2 each, RASA min(1, 134 / max).
// The fraction is then the count of windowed RASA > 0.581 over the residues, chain by chain;
// a second chain laid over the first buries none of it, as AF3 measures chains alone.
TEST(DisorderTerm, FractionDisorderedCountsWindowedRasaOfEachChainAlone) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  // Mostly ARG (134 / 248 = 0.54, ordered alone), else residues above 0.581 alone (TRP 0.590,
  // TYR 0.604, LYS 0.654, GLN 0.677): windows fall on either side of the cutoff.
  const std::vector<int> above = {data::amino_acid_index("TRP"), data::amino_acid_index("TYR"),
                                  data::amino_acid_index("LYS"), data::amino_acid_index("GLN")};
  auto draw = [&] { return rng() % 10 < 6 ? data::amino_acid_index("ARG") : above[rng() % above.size()]; };
  const int64_t L0 = 5 + static_cast<int64_t>(rng() % 40), L1 = 1 + static_cast<int64_t>(rng() % 30);
  CollapsedResidues r;
  std::vector<double> rasa0, rasa1;
  for (int64_t i = 0; i < L0; ++i) {
    const int t = draw();
    r.add(t, 0, {15.0 * static_cast<double>(i), 0.0, 0.0}, rng);
    rasa0.push_back(std::min(1.0, 134.0 / max_accessible_area(t)));
  }
  for (int64_t i = 0; i < L1; ++i) {
    const int t = draw();
    r.add(t, 1, {15.0 * static_cast<double>(i) + 0.5, 0.0, 0.0}, rng);  // on top of chain 0's residue i
    rasa1.push_back(std::min(1.0, 134.0 / max_accessible_area(t)));
  }
  const ProteinResidues res = r.residues();
  const at::Tensor rasa = residue_rasa(r.coords(), res);
  std::vector<double> want = numpy_window(rasa0, kDisorderWindow), want1 = numpy_window(rasa1, kDisorderWindow);
  want.insert(want.end(), want1.begin(), want1.end());
  std::vector<double> all = rasa0;
  all.insert(all.end(), rasa1.begin(), rasa1.end());
  double disordered = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    EXPECT_EQ(rasa[static_cast<int64_t>(k)].item<double>(), all[k]) << "seed " << seed << " residue " << k;
    disordered += want[k] > kDisorderRasaCutoff;
  }
  EXPECT_DOUBLE_EQ(fraction_disordered(r.coords(), res), disordered / static_cast<double>(all.size()))
      << "seed " << seed;
  // Measured as one chain, the residues laid over each other bury each other.
  ProteinResidues one = res;
  one.residue_chain = at::zeros_like(res.residue_chain);
  const at::Tensor together = residue_rasa(r.coords(), one);
  for (int64_t i = 0; i < std::min(L0, L1); ++i) {
    EXPECT_LT(together[i].item<double>(), rasa[i].item<double>()) << i;
    EXPECT_LT(together[L0 + i].item<double>(), rasa[L0 + i].item<double>()) << i;
  }
  // No protein residues: nothing is disordered.
  CollapsedResidues none;
  none.add_left_out();
  EXPECT_EQ(fraction_disordered(none.coords(), none.residues()), 0.0);
}

TEST(DisorderTerm, BadInputIsNamed) {
  std::mt19937_64 rng(1);
  CollapsedResidues r;
  r.add(0, 0, {0.0, 0.0, 0.0}, rng);
  r.add(5, 0, {3.0, 0.0, 0.0}, rng);
  const ProteinResidues res = r.residues();
  const at::Tensor x = r.coords();
  const int64_t A = x.size(0);
  EXPECT_NE(error_of([&] { residue_sasa(x.narrow(0, 0, A - 1), res); }).find("coords must be [A, 3] = [" +
                                                                             std::to_string(A)),
            std::string::npos);
  at::Tensor bad = x.clone();
  bad[7][2] = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { residue_sasa(bad, res); }).find("coordinates of atom 7 are not finite"), std::string::npos);
  ProteinResidues wrong = res;
  wrong.atom_residue = res.atom_residue.clone();
  wrong.atom_residue[0] = 2;
  EXPECT_NE(error_of([&] { residue_sasa(x, wrong); }).find("atom_residue must lie in [-1, 2)"), std::string::npos);
  wrong = res;
  wrong.residue_max_area = res.residue_max_area.narrow(0, 0, 1);
  EXPECT_NE(error_of([&] { residue_sasa(x, wrong); }).find("residue_max_area must be [R] = [2]"), std::string::npos);
}

// DSSP's output for ubiquitin (tests/fixtures/dssp/1ubi.dssp: mkdssp 4.2.2, whose surface code
// is that of the DSSP 4.4 AF3 builds, run on data/pdb/1ubi.pdb.gz): per residue, the one-letter
// code and the ACC column (whole A^2) that AF3 reads back.
std::vector<std::pair<char, int>> dssp_accessibility(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::pair<char, int>> acc;
  bool rows = false;
  for (std::string line; std::getline(in, line);) {
    if (rows && line.size() > 38 && line[13] != '!') acc.emplace_back(line[13], std::stoi(line.substr(34, 4)));
    rows = rows || line.rfind("  #  RESIDUE", 0) == 0;
  }
  return acc;
}

// Our residue areas against DSSP's on a real structure. A dot on a sphere's rim can fall either
// way between DSSP's float arithmetic and our double: one dot is at most 4 pi 3.27^2 / 401 =
// 0.34 A^2, which can move the whole-A^2 value by one. Residue 76 is left out: DSSP counts its
// terminal OXT, which our atom layout does not have. The fraction disordered then equals AF3's
// computation from DSSP's column (76 is a glycine whose RASA is capped at 1 either way).
TEST(DisorderTerm, ResidueAreasMatchDsspOnUbiquitin) {
  const data::Entry e = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1ubi.pdb.gz");
  data::Batch b = data::make_batch({&e}, {{}}, 0);
  b.ref.mask = b.atom_mask;  // the atoms the crystal resolved
  const ProteinResidues r = protein_residues(b, 0);
  const at::Tensor x = b.atom_coords[0].reshape({-1, 3});
  const at::Tensor sasa = residue_sasa(x, r);
  const auto dssp = dssp_accessibility(MEGAFOLD_TEST_SOURCE_DIR "/tests/fixtures/dssp/1ubi.dssp");
  ASSERT_EQ(dssp.size(), 76u);
  ASSERT_EQ(sasa.numel(), 76);
  std::vector<double> rasa;
  for (int64_t k = 0; k < 76; ++k) {
    const auto [letter, acc] = dssp[k];
    if (k < 75) {
      EXPECT_NEAR(std::floor(sasa[k].item<double>() + 0.5), acc, 1.0) << "residue " << k + 1;
    }
    rasa.push_back(std::min(1.0, acc / max_accessible_area(data::amino_acid_of_letter(letter))));
  }
  EXPECT_EQ(rasa.back(), 1.0);
  // Each RASA within 1 / max_area <= 1 / 84 of AF3's, and so each window's mean.
  const std::vector<double> want = numpy_window(rasa, kDisorderWindow);
  const at::Tensor windowed = windowed_rasa(residue_rasa(x, r), r.residue_chain);
  double disordered = 0;
  for (int64_t k = 0; k < 76; ++k) {
    EXPECT_NEAR(windowed[k].item<double>(), want[k], 1.0 / 84) << "residue " << k + 1;
    disordered += want[k] > kDisorderRasaCutoff;
  }
  // A folded domain: its most exposed window, around the C-terminal tail, stays below 0.581.
  EXPECT_EQ(disordered, 0.0);
  EXPECT_EQ(fraction_disordered(x, r), 0.0);
}

// The residues of a real job (tests/fixtures/af3/complex.json): protein chains A and B,
// MKTSAYIAKQR with a phosphoserine (SEP, per-atom tokens) at 4, beside RNA, DNA, ligands and a
// glycan, which the disorder term leaves out.
TEST(DisorderTerm, ProteinResiduesOfAnAlphaFold3Job) {
  const data::Af3Input in = data::load_af3_json(MEGAFOLD_TEST_SOURCE_DIR "/tests/fixtures/af3/complex.json");
  data::Batch b = data::make_batch({&in.entry}, {{}}, in.entry.n_tokens() + 3);  // and padding tokens
  const ProteinResidues r = protein_residues(b, 0);
  ASSERT_EQ(r.residue_chain.numel(), 22);
  const std::string sequence = "MKTSAYIAKQR";
  for (int64_t k = 0; k < 22; ++k) {
    EXPECT_EQ(r.residue_chain[k].item<int64_t>(), k / 11);  // chains A and B are asym 0 and 1
    const int t = k % 11 == 3 ? data::kUnknownAminoAcid : data::amino_acid_of_letter(sequence[k % 11]);
    EXPECT_EQ(r.residue_max_area[k].item<double>(), max_accessible_area(t)) << k;
  }
  // Every atom of a real protein token is in a residue, named by its radius; nothing else is.
  constexpr int S = kMaxAtomsPerToken;
  const int64_t N = b.n_tokens();
  ASSERT_EQ(r.atom_residue.numel(), N * S);
  int64_t sep_atoms = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int s = 0; s < S; ++s) {
      const bool protein = b.token_mask[0][i].item<float>() > 0 &&
                           b.mol_type[0][i].item<int64_t>() == static_cast<int64_t>(data::MolType::kProtein);
      const bool has = b.ref.mask[0][i][s].item<float>() > 0;
      const int64_t residue = r.atom_residue[i * S + s].item<int64_t>();
      EXPECT_EQ(residue >= 0, protein && has) << "token " << i << " slot " << s;
      if (residue < 0) continue;
      std::string name;
      for (int c = 0; c < 4 && b.ref.name_chars[0][i][s][c].item<int64_t>() > 0; ++c)
        name += static_cast<char>(b.ref.name_chars[0][i][s][c].item<int64_t>() + 32);
      EXPECT_EQ(r.atom_radius[i * S + s].item<double>(), dssp_atom_radius(name)) << name;
      sep_atoms += residue == 3;
    }
  EXPECT_EQ(sep_atoms, 10);  // SEP's heavy atoms but its leaving OXT: N CA CB OG C O P O1P O2P O3P
  // A residue without its backbone O is left out, as DSSP drops incomplete residues.
  b.ref.mask[0][1][data::kAtomO] = 0;
  const ProteinResidues fewer = protein_residues(b, 0);
  EXPECT_EQ(fewer.residue_chain.numel(), 21);
  EXPECT_EQ(fewer.atom_residue.narrow(0, S, S).max().item<int64_t>(), -1);
  // A chain must come in one run of tokens.
  b.asym_id[0][21] = 0;
  EXPECT_NE(error_of([&] { protein_residues(b, 0); }).find("not consecutive"), std::string::npos);
  EXPECT_NE(error_of([&] { protein_residues(b, 1); }).find("example 1 of a batch of 1"), std::string::npos);
}

TEST(RankingScore, WeighsEachTermAsAlphaFold3) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    TmScores tm;
    tm.ptm = uniform(rng), tm.iptm = uniform(rng);
    const double f = uniform(rng);
    EXPECT_NEAR(ranking_score(tm, f, false), 0.8 * tm.iptm + 0.2 * tm.ptm + 0.5 * f, 1e-15);
    EXPECT_NEAR(ranking_score(tm, f, true), 0.8 * tm.iptm + 0.2 * tm.ptm + 0.5 * f - 100, 1e-13);
    // One chain: no ipTM, pTM in place of the whole ipTM / pTM average.
    tm.iptm = std::numeric_limits<double>::quiet_NaN();
    EXPECT_NEAR(ranking_score(tm, f, false), tm.ptm + 0.5 * f, 1e-15);
  }
  TmScores tm;
  tm.ptm = 0.5, tm.iptm = 0.5;
  EXPECT_EQ(ranking_score(tm, 1.0, false), 1.0);
  for (const double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    EXPECT_NE(error_of([&] { ranking_score(tm, bad, false); }).find("fraction_disordered must lie in [0, 1]"),
              std::string::npos);
}

}  // namespace
}  // namespace megafold::model
