// Confidence head: per-atom lDDT targets on hand-computed cases, the expected-value readout, the
// loss of a perfect prediction, representative atoms, token frames, the aligned and distance
// errors and their losses against float64 references written from AF3 SI Alg. 29-30 and Sec.
// 4.3, pTM / ipTM / chain-pair ipTM against a direct evaluation of their definitions, the clash
// rule, and stopped gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <numeric>

#include "data/features.h"
#include "data/structure.h"
#include "model/confidence.h"
#include "model/confidence_scores.h"
#include "model/structure_losses.h"
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
  EXPECT_NEAR(ranking_score(one, false), one.ptm, 1e-12);
  EXPECT_NEAR(ranking_score(s, true), 0.8 * s.iptm + 0.2 * s.ptm - 100, 1e-12);
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

}  // namespace
}  // namespace megafold::model
