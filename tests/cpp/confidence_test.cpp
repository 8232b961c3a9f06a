// Confidence head (pLDDT): per-atom lDDT targets on hand-computed cases, the expected-value
// readout, the loss of a perfect prediction, representative atoms, and stopped gradients.
#include <gtest/gtest.h>

#include <numeric>

#include "data/features.h"
#include "data/structure.h"
#include "model/confidence.h"
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
  const at::Tensor logits = head(b, s_inputs, s, z, x, 0);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, A, cfg.confidence.plddt_bins}));
  plddt_loss(logits, x, b).loss.backward();
  for (const at::Tensor& t : {s_inputs, s, z, x}) EXPECT_FALSE(t.grad().defined());
  for (const auto& p : head->named_parameters())
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
}

}  // namespace
}  // namespace megafold::model
