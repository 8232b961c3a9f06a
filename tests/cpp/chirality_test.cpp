// Stereocentres from the reference conformers: every L-amino acid's C-alpha has one hand, a
// deposited structure agrees with its conformers at (nearly) every centre and its mirror image
// at none, under any rotation; the mirror image is reflected back and the truth is left alone.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "data/features.h"
#include "data/residue_constants.h"
#include "data/structure.h"
#include "model/chirality.h"
#include "model/diffusion_module.h"
#include "testing.h"

namespace megafold::model {
namespace {

constexpr int S = data::kMaxAtomsPerToken;

struct Fixture {
  data::Entry entry;
  data::Batch batch;
  at::Tensor truth;  // [1, N * S, 3] float64
  at::Tensor mask;   // [1, N * S] resolved atoms
};

Fixture load(const char* file) {
  Fixture f;
  f.entry = data::load_entry(std::string(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/") + file);
  f.batch = data::make_batch({&f.entry}, {{}}, 0);
  const int64_t N = f.batch.n_tokens();
  f.truth = f.batch.atom_coords.reshape({1, N * S, 3}).to(at::kDouble);
  f.mask = f.batch.atom_mask.reshape({1, N * S}).to(at::kDouble);
  return f;
}

TEST(Chirality, EveryLAminoAcidCalphaHasOneHand) {
  const Fixture f = load("1a8o.cif.gz");
  const ChiralCentres c = chiral_centres(f.batch);
  ASSERT_EQ(c.atoms.size(0), 1);
  // C-alpha (slot 1) centres: neighbours N (0), C (2), CB (4), in slot order.
  const at::Tensor centre_slot = c.atoms.select(2, 0).remainder(S);
  const at::Tensor ca = centre_slot.eq(1).logical_and(c.mask.gt(0));
  int64_t non_gly = 0;
  for (int64_t n = 0; n < f.batch.n_tokens(); ++n)
    non_gly += f.batch.ref.mask[0][n][4].item<float>() > 0 && f.batch.mol_type[0][n].item<int64_t>() == 0;
  EXPECT_EQ(ca.sum().item<int64_t>(), non_gly);
  const at::Tensor ca_signs = c.sign.masked_select(ca);
  EXPECT_TRUE(ca_signs.eq(ca_signs[0]).all().item<bool>()) << "L-amino acids of both hands";
  // More centres than the C-alphas (Ile and Thr CB).
  EXPECT_GT(c.mask.sum().item<int64_t>(), non_gly);
}

TEST(Chirality, TheTruthAgreesWithItsConformersAndItsMirrorImageDoesNot) {
  for (const char* file : {"1a8o.cif.gz", "1ehz.cif.gz"}) {  // a protein, a tRNA
    Fixture f = load(file);
    const ChiralCentres c = chiral_centres(f.batch);
    // Only centres whose four atoms are resolved say anything about the truth.
    ChiralCentres resolved = c;
    const at::Tensor atom_ok = at::gather(f.mask, 1, c.atoms.reshape({1, -1})).reshape(c.atoms.sizes());
    resolved.mask = c.mask * atom_ok.prod(-1).to(at::kFloat);
    ASSERT_GT(resolved.mask.sum().item<double>(), 50) << file;
    at::Tensor mirror = f.truth.clone();
    mirror.select(2, 0).neg_();
    // Random proper rotations (and a re-centring) as the diffusion loss draws them.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(testing::fresh_seed());
    const at::Tensor rotated = centre_random_augmentation(f.truth, f.mask, gen);
    const at::Tensor rotated_mirror = centre_random_augmentation(mirror, f.mask, gen);
    // Four samples of the one example: a fraction per row.
    const at::Tensor frac = inverted_fraction(at::cat({f.truth, mirror, rotated, rotated_mirror}), resolved);
    EXPECT_LT(frac[0].item<float>(), 0.02) << file;  // deposited errors are rare
    EXPECT_GT(frac[1].item<float>(), 0.98) << file;
    EXPECT_EQ(frac[2].item<float>(), frac[0].item<float>()) << file;  // proper rotations change nothing
    EXPECT_EQ(frac[3].item<float>(), frac[1].item<float>()) << file;
  }
}

TEST(Chirality, MirrorImagesAreReflectedBackAndTheTruthIsKept) {
  Fixture f = load("1a8o.cif.gz");
  const ChiralCentres c = chiral_centres(f.batch);
  const at::Tensor x = (f.truth * f.mask.unsqueeze(-1)).to(at::kFloat);
  at::Tensor mirror = x.clone();
  mirror.select(2, 0).neg_();
  mirror.select(2, 0).add_(17.0 * f.mask.to(at::kFloat));  // somewhere else
  const at::Tensor atom_mask = f.batch.ref.mask.reshape({1, -1});
  const Reflected r = reflect_mirror_images(at::cat({x, mirror}), c, atom_mask);
  EXPECT_FALSE(r.reflected[0].item<bool>());
  EXPECT_TRUE(r.reflected[1].item<bool>());
  EXPECT_TRUE(at::equal(r.x[0], x[0]));
  // The reflected row is the truth up to a rigid motion: all distances equal, same hand.
  auto dist = [&](const at::Tensor& y) {
    const at::Tensor k = y.index({f.mask[0].gt(0)}).to(at::kDouble);
    return at::cdist(k, k);
  };
  EXPECT_TRUE(at::allclose(dist(r.x[1]), dist(x[0]), 0, 1e-3));
  EXPECT_LT(inverted_fraction(r.x.narrow(0, 1, 1), c)[0].item<float>(), 0.5);
  // Slots without an atom stay zero.
  const at::Tensor empty = atom_mask[0].eq(0);
  EXPECT_EQ(r.x[1].index({empty}).abs().sum().item<float>(), 0.f);
}

}  // namespace
}  // namespace megafold::model
