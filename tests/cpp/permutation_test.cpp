// Chain permutation of the ground truth: a prediction that swapped the copies of a homodimer is
// matched back exactly, whatever its rigid motion; chains that are not copies, or copies
// cropped differently, are never swapped; scores see the matched ground truth, and flag mirror
// images, whose lDDT is perfect.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "data/features.h"
#include "data/residue_constants.h"
#include "data/structure.h"
#include "model/permutation.h"
#include "model/scoring.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;
using data::kMaxAtomsPerToken;

const std::string kData = MEGAFOLD_TEST_SOURCE_DIR "/data/pdb";

// Rows of chain `asym` in a one-example batch.
std::vector<int64_t> rows_of(const data::Batch& b, int64_t asym) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < b.n_tokens(); ++i)
    if (b.asym_id[0][i].item<int64_t>() == asym && b.token_mask[0][i].item<float>() > 0) rows.push_back(i);
  return rows;
}

// x [1, N * 24, 3] with the token rows of chains p and q exchanged.
at::Tensor swap_chains(const at::Tensor& x, const data::Batch& b, int64_t p, int64_t q, at::Tensor* perm = nullptr) {
  const int64_t N = b.n_tokens();
  std::vector<int64_t> order(N);
  std::iota(order.begin(), order.end(), 0);
  const std::vector<int64_t> rp = rows_of(b, p), rq = rows_of(b, q);
  EXPECT_EQ(rp.size(), rq.size());
  for (size_t k = 0; k < rp.size(); ++k) std::swap(order[rp[k]], order[rq[k]]);
  const at::Tensor idx = at::tensor(order, at::kLong);
  if (perm) *perm = idx;
  return x.view({1, N, kMaxAtomsPerToken, 3}).index_select(1, idx).reshape({1, N * kMaxAtomsPerToken, 3});
}

at::Tensor rigidly_moved(const at::Tensor& x) {
  const at::Tensor q = std::get<0>(at::linalg_qr(torch::randn({3, 3}, torch::kDouble))).to(at::kFloat);
  const at::Tensor r = at::linalg_det(q).item<float>() < 0 ? -q : q;  // a rotation, not a reflection
  return at::matmul(x, r.t()) + torch::tensor({12.f, -3.f, 40.f});
}

TEST(Permutation, SwappedHomodimerCopiesAreMatchedBack) {
  torch::manual_seed(static_cast<uint64_t>(fresh_seed()));
  // 3u8v: two copies of an 83-residue chain and an ion.
  const data::Entry e = data::load_entry(kData + "/3u8v.cif.gz");
  const data::Batch b = data::make_batch({&e}, {{}}, 0);
  const int64_t N = b.n_tokens(), A = N * kMaxAtomsPerToken;
  ASSERT_EQ(b.entity_id[0][rows_of(b, 0)[0]].item<int64_t>(), b.entity_id[0][rows_of(b, 1)[0]].item<int64_t>());
  const at::Tensor gt = b.atom_coords.reshape({1, A, 3});
  // A prediction equal to the truth, moved: nothing to permute.
  const at::Tensor same = rigidly_moved(gt);
  EXPECT_TRUE(at::equal(chain_permutation(same, b)[0], at::arange(N, at::kLong)));
  // The copies swapped (and moved): the ground truth's copies follow them.
  at::Tensor order;
  const at::Tensor swapped = rigidly_moved(swap_chains(gt, b, 0, 1, &order));
  EXPECT_TRUE(at::equal(chain_permutation(swapped, b)[0], order));
  const data::Batch matched = permute_ground_truth(swapped, b);
  EXPECT_TRUE(at::equal(matched.atom_coords, b.atom_coords.index_select(1, order)));
  EXPECT_TRUE(at::equal(matched.atom_mask, b.atom_mask.index_select(1, order)));
  EXPECT_TRUE(at::equal(matched.restype, b.restype));
  // Scores see the matched truth: the swapped prediction is a perfect one.
  EXPECT_NEAR(score_structures(swapped, b).lddt_ca[0].item<float>(), 1.0, 1e-5);
  EXPECT_NEAR(score_structures(swapped, b).lddt_all[0].item<float>(), 1.0, 1e-5);
  // Several samples per example: each matched on its own.
  const at::Tensor two = at::cat({same, swapped});
  const StructureScores sc = score_structures(two, b);
  EXPECT_NEAR(sc.lddt_all[0].item<float>(), 1.0, 1e-5);
  EXPECT_NEAR(sc.lddt_all[1].item<float>(), 1.0, 1e-5);
}

TEST(Permutation, ScoresFlagMirrorImagesWhoseLddtIsPerfect) {
  torch::manual_seed(static_cast<uint64_t>(fresh_seed()));
  const data::Entry e = data::load_entry(kData + "/3u8v.cif.gz");
  const data::Batch b = data::make_batch({&e}, {{}}, 0);
  const int64_t A = b.n_tokens() * kMaxAtomsPerToken;
  const at::Tensor gt = b.atom_coords.reshape({1, A, 3});
  const at::Tensor flip = torch::tensor({-1.f, 1.f, 1.f});
  const at::Tensor mirror = rigidly_moved(gt * flip);
  // Noise of 1 A keeps the hand; a reflection of the noisy copy swaps it.
  const at::Tensor noisy = rigidly_moved(gt + torch::randn({1, A, 3}));
  const StructureScores sc = score_structures(at::cat({rigidly_moved(gt), mirror, noisy, noisy * flip}), b);
  EXPECT_NEAR(sc.lddt_all[1].item<float>(), 1.0, 1e-5);  // distances alone cannot tell
  EXPECT_TRUE(at::equal(sc.mirrored, torch::tensor({0.f, 1.f, 0.f, 1.f})));
  // Three points have no hand.
  const at::Tensor three = torch::randn({1, 3, 3}, torch::kDouble);
  EXPECT_EQ(mirror_images(three * flip.to(at::kDouble), three, torch::ones({1, 3})).item<float>(), 0.f);
}

TEST(Permutation, OnlyCopiesWithTheSameResiduesSwap) {
  torch::manual_seed(static_cast<uint64_t>(fresh_seed()));
  // The two copies of 3u8v cropped to different residues are not interchangeable.
  const data::Entry e = data::load_entry(kData + "/3u8v.cif.gz");
  const data::Batch whole = data::make_batch({&e}, {{}}, 0);
  const std::vector<int64_t> a = rows_of(whole, 0), b = rows_of(whole, 1);
  std::vector<int32_t> sel;
  for (size_t k = 0; k < 60; ++k) sel.push_back(static_cast<int32_t>(a[k]));
  for (size_t k = 1; k < 61; ++k) sel.push_back(static_cast<int32_t>(b[k]));
  const data::Batch cropped = data::make_batch({&e}, {sel}, 0);
  const int64_t N = cropped.n_tokens();
  const at::Tensor gt = cropped.atom_coords.reshape({1, N * kMaxAtomsPerToken, 3});
  EXPECT_TRUE(at::equal(chain_permutation(rigidly_moved(gt), cropped)[0], at::arange(N, at::kLong)));
  // A complex without copies: the identity.
  const data::Entry lig = data::load_entry(kData + "/4cup.cif.gz");
  const data::Batch one = data::make_batch({&lig}, {{}}, 0);
  const int64_t M = one.n_tokens();
  const at::Tensor x = one.atom_coords.reshape({1, M * kMaxAtomsPerToken, 3}) + torch::randn({1, M * kMaxAtomsPerToken, 3});
  EXPECT_TRUE(at::equal(chain_permutation(x, one)[0], at::arange(M, at::kLong)));
}

// Ubiquitin with the names of some symmetric side-chain atoms exchanged in the prediction (two
// ASP, one GLU, one PHE ring): the ground truth takes the exchanged names in those residues and
// only there.
TEST(Permutation, SymmetricSideChainAtomsFollowThePrediction) {
  const data::Entry e = data::load_entry(kData + "/1ubi.pdb.gz");
  const data::Batch b = data::make_batch({&e}, {{}}, 0);
  const int64_t N = b.n_tokens();
  at::Tensor pred = b.atom_coords.clone();  // [1, N, 24, 3]
  std::vector<int64_t> swapped;
  std::map<std::string, int> wanted = {{"ASP", 2}, {"GLU", 1}, {"PHE", 1}};
  for (int64_t i = 0; i < N; ++i) {
    const int t = static_cast<int>(b.restype[0][i].item<int64_t>());
    const std::string name(data::residue_name(t));
    if (!wanted.count(name) || wanted[name] == 0) continue;
    const std::vector<std::pair<const char*, const char*>> pairs =
        name == "ASP" ? std::vector<std::pair<const char*, const char*>>{{"OD1", "OD2"}}
        : name == "GLU" ? std::vector<std::pair<const char*, const char*>>{{"OE1", "OE2"}}
                        : std::vector<std::pair<const char*, const char*>>{{"CD1", "CD2"}, {"CE1", "CE2"}};
    bool resolved = true;
    for (const auto& [x, y] : pairs)
      resolved = resolved && b.atom_mask[0][i][data::atom_slot(t, x)].item<float>() > 0 &&
                 b.atom_mask[0][i][data::atom_slot(t, y)].item<float>() > 0;
    if (!resolved) continue;
    for (const auto& [x, y] : pairs) {
      const int sx = data::atom_slot(t, x), sy = data::atom_slot(t, y);
      pred[0][i][sx] = b.atom_coords[0][i][sy];
      pred[0][i][sy] = b.atom_coords[0][i][sx];
    }
    --wanted[name];
    swapped.push_back(i);
  }
  ASSERT_EQ(swapped.size(), 4u);
  const data::Batch renamed = rename_symmetric_atoms(pred.reshape({1, -1, 3}), b);
  EXPECT_TRUE(at::equal(renamed.atom_coords * b.atom_mask.unsqueeze(-1), pred * b.atom_mask.unsqueeze(-1)));
  EXPECT_TRUE(at::equal(renamed.atom_mask, b.atom_mask));
  // The truth itself as the prediction: nothing renamed.
  const data::Batch same = rename_symmetric_atoms(b.atom_coords.reshape({1, -1, 3}), b);
  EXPECT_TRUE(at::equal(same.atom_coords, b.atom_coords));
}

// 1qz5: actin with ATP. A prediction that exchanged ATP's gamma-phosphate oxygens O1G/O2G and
// the beta ones O1B/O2B: the ground truth follows (automorphisms of ATP's bond graph); the
// other ligands (a 67-atom toxin, a calcium) and the protein stay as they are.
TEST(Permutation, SymmetricLigandAtomsFollowThePrediction) {
  const data::Entry e = data::load_entry(kData + "/1qz5.cif.gz");
  const data::Batch b = data::make_batch({&e}, {{}}, 0);
  const int64_t N = b.n_tokens();
  std::map<std::string, int64_t> row;  // ATP atom name -> token row
  for (int64_t i = 0; i < N; ++i) {
    const int t = b.token_index[0][i].item<int64_t>();
    if (e.per_atom(t) && e.residue_code(t) == "ATP") row[std::string(e.token_atoms[t].atom_name())] = i;
  }
  ASSERT_EQ(row.size(), 31u);
  at::Tensor pred = b.atom_coords.clone();
  at::Tensor order = at::arange(N, at::kLong);
  for (const auto& [x, y] : {std::pair<const char*, const char*>{"O1G", "O2G"}, {"O1B", "O2B"}}) {
    pred[0][row[x]] = b.atom_coords[0][row[y]];
    pred[0][row[y]] = b.atom_coords[0][row[x]];
    order[row[x]] = row[y];
    order[row[y]] = row[x];
  }
  const data::Batch matched = permute_ligand_atoms(pred.reshape({1, -1, 3}), b);
  EXPECT_TRUE(at::equal(matched.atom_coords, b.atom_coords.index_select(1, order)));
  EXPECT_TRUE(at::equal(matched.atom_mask, b.atom_mask.index_select(1, order)));
  EXPECT_TRUE(at::equal(permute_ligand_atoms(b.atom_coords.reshape({1, -1, 3}), b).atom_coords, b.atom_coords));
  // The whole pipeline scores the renamed prediction as perfect.
  EXPECT_NEAR(score_structures(pred.reshape({1, -1, 3}), b).lddt_all[0].item<float>(), 1.0, 1e-5);
}

}  // namespace
}  // namespace megafold::model
