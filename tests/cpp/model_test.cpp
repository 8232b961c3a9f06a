// Model: shapes, masking, dropout determinism, activation checkpointing, distogram.
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>
#include <map>
#include <numeric>

#include "data/features.h"
#include "data/structure.h"
#include "core/autocast.h"
#include "core/seed.h"
#include "model/confidence_scores.h"
#include "model/heads.h"
#include "model/model.h"
#include "model/permutation.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

ModelConfig tiny_config() {
  ModelConfig c;
  c.c_s = 16;
  c.c_z = 8;
  c.n_blocks = 2;
  c.tri_attn_heads = 2;
  c.tri_attn_head_dim = 4;
  c.tri_mul_hidden = 8;
  c.single_attn_heads = 2;
  c.single_attn_head_dim = 4;
  c.dropout = 0.25;
  c.msa.n_blocks = 1, c.msa.c_m = 8, c.msa.opm_hidden = 4, c.msa.heads = 2, c.msa.head_dim = 4;
  return c;
}

// tiny_config() with a tiny diffusion module (2 samples, 3 sampler steps) and no dropout.
ModelConfig tiny_diffusion_config() {
  ModelConfig c = tiny_config();
  c.dropout = 0.0;
  DiffusionConfig& d = c.diffusion;
  d.c_token = 16, d.n_blocks = 1, d.heads = 2, d.fourier_dim = 16, d.c_atom = 8, d.c_atompair = 4;
  d.atom_blocks = 1, d.atom_heads = 2, d.samples = 2, d.weight = 4.0, d.sampler_steps = 3;
  return c;
}

data::Batch batch_of(const data::Entry& e, int n_real, int pad_to) {
  std::vector<int32_t> sel(n_real);
  std::iota(sel.begin(), sel.end(), 0);
  return data::make_batch({&e}, {sel}, pad_to);
}

data::Entry ubiquitin() { return data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1ubi.pdb.gz"); }

TEST(Model, OutputShapesAndSymmetricDistogram) {
  fresh_seed();
  MegaFold m(tiny_config());
  randomise_parameters(*m);
  const data::Entry e = ubiquitin();
  const data::Batch b = batch_of(e, 37, 37);
  m->eval();
  const TrunkOutput out = m->forward(b, 0);
  EXPECT_EQ(out.s.sizes(), (std::vector<int64_t>{1, 37, 16}));
  EXPECT_EQ(out.z.sizes(), (std::vector<int64_t>{1, 37, 37, 8}));
  EXPECT_EQ(out.distogram_logits.sizes(), (std::vector<int64_t>{1, 37, 37, 64}));
  EXPECT_TRUE(at::allclose(out.distogram_logits, out.distogram_logits.transpose(1, 2)));
}

TEST(Model, PaddingDoesNotChangeRealTokens) {
  fresh_seed();
  MegaFold m(tiny_config());
  randomise_parameters(*m);
  m->eval();
  const data::Entry e = ubiquitin();
  const TrunkOutput plain = m->forward(batch_of(e, 31, 31), 0);
  const TrunkOutput padded = m->forward(batch_of(e, 31, 45), 0);
  EXPECT_LT(rel_error(padded.s.narrow(1, 0, 31), plain.s), 1e-5);
  EXPECT_LT(rel_error(padded.z.narrow(1, 0, 31).narrow(2, 0, 31), plain.z), 1e-5);
}

// A crop that fills the batch runs the Pairformer without masks: the same bits as with masks of
// ones (training mode, dropout on), forward and gradients; make_batch knows which it is.
TEST(Model, UnpaddedCropRunsTheTrunkWithoutMasksAndTheSameBits) {
  fresh_seed();
  const data::Entry e = ubiquitin();
  EXPECT_TRUE(batch_of(e, 20, 24).padded);
  const data::Batch unpadded = batch_of(e, 20, 20);
  ASSERT_FALSE(unpadded.padded);
  data::Batch masked = unpadded;
  masked.padded = true;
  MegaFold m(tiny_config());
  randomise_parameters(*m);
  auto run = [&](const data::Batch& b) {
    m->zero_grad(true);
    const TrunkOutput out = m->forward(b, 7);
    (out.distogram_logits * out.distogram_logits).sum().backward();
    std::vector<at::Tensor> r{out.s.detach(), out.z.detach()};
    for (const at::Tensor& p : m->parameters())
      if (p.grad().defined()) r.push_back(p.grad().clone());
    return r;
  };
  const auto want = run(masked), got = run(unpadded);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "output / gradient " << i;
}

TEST(Model, DropoutIsAPureFunctionOfTheSeed) {
  fresh_seed();
  MegaFold m(tiny_config());
  randomise_parameters(*m);
  const data::Batch b = batch_of(ubiquitin(), 20, 20);
  const at::Tensor a = m->forward(b, 11).z, a2 = m->forward(b, 11).z, c = m->forward(b, 12).z;
  EXPECT_TRUE(at::equal(a, a2));
  EXPECT_FALSE(at::equal(a, c));
}

TEST(Model, CheckpointedBlocksGiveTheSameLossAndGradients) {
  fresh_seed();
  ModelConfig cfg = tiny_config();
  MegaFold plain(cfg);
  randomise_parameters(*plain);
  cfg.checkpoint_blocks = true;
  MegaFold ckpt(cfg);
  {
    torch::NoGradGuard g;
    auto src = plain->parameters(), dst = ckpt->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  const data::Batch b = batch_of(ubiquitin(), 24, 28);
  const at::Tensor l1 = plain->loss(b, plain->forward(b, 5), 0).total;
  const at::Tensor l2 = ckpt->loss(b, ckpt->forward(b, 5), 0).total;
  EXPECT_EQ(l1.item<float>(), l2.item<float>());
  l1.backward();
  l2.backward();
  auto p1 = plain->parameters(), p2 = ckpt->parameters();
  // The last block's single-track parameters do not reach the distogram loss: undefined or
  // zero gradients are equivalent there.
  auto grad = [](const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); };
  int reached = 0;
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_LT(rel_error(grad(p2[i]), grad(p1[i])), 1e-6) << "parameter " << i;
    reached += grad(p1[i]).abs().sum().item<double>() > 0;
  }
  EXPECT_GT(reached, static_cast<int>(p1.size()) / 2);
}

// Autocast caches bf16 copies of fp32 weights process-wide. A recomputation in backward must
// not leave copies behind: the next forward, after the weights changed, has to use the new
// weights (CPU autocast shares the cache mechanism with CUDA, so this runs in CI).
TEST(Model, RecomputeUnderAutocastLeavesNoStaleWeightCopies) {
  fresh_seed();
  ModelConfig cfg = tiny_config();
  cfg.checkpoint_blocks = true;
  cfg.dropout = 0.0;
  MegaFold m(cfg), fresh(cfg);
  randomise_parameters(*m);
  const data::Batch b = batch_of(ubiquitin(), 20, 24);
  auto loss_of = [&](MegaFold& model) {
    AutocastScope ac(at::kCPU, true, at::kBFloat16);
    return model->loss(b, model->forward(b, 3), 0).total;
  };
  loss_of(m).backward();  // recomputes every block under autocast
  {
    torch::NoGradGuard g;
    auto src = m->parameters(), dst = fresh->parameters();
    for (size_t i = 0; i < src.size(); ++i) {
      src[i].add_(torch::randn_like(src[i]) * 0.2);  // an optimiser step
      dst[i].copy_(src[i]);
    }
  }
  EXPECT_EQ(loss_of(m).item<float>(), loss_of(fresh).item<float>());
}

// With model.diffusion.samples > 0 the loss adds the weighted diffusion loss, gradients reach
// the trunk through it, and the model samples structures of the batch's atom layout.
TEST(Model, DiffusionModuleJoinsLossAndSamples) {
  fresh_seed();
  const ModelConfig cfg = tiny_diffusion_config();
  MegaFold m(cfg);
  ASSERT_TRUE(m->has_diffusion());
  randomise_parameters(*m, 0.2);
  const data::Batch b = batch_of(ubiquitin(), 12, 14);
  const TrunkOutput out = m->forward(b, 1);
  const Losses l = m->loss(b, out, 9);
  ASSERT_TRUE(l.diffusion_mse.defined());
  // The diffusion term: at least the smooth-lDDT floor (0.196) times the weight; same seed,
  // same loss.
  EXPECT_GT((l.total - l.distogram).item<double>(), 4.0 * 0.19);
  EXPECT_EQ(m->loss(b, out, 9).total.item<double>(), l.total.item<double>());
  EXPECT_NE(m->loss(b, out, 10).total.item<double>(), l.total.item<double>());
  l.total.backward();
  // The last block's single track reaches no distogram, only the diffusion module.
  auto p = m->named_parameters();
  EXPECT_GT(p["pairformer.block_1.single_transition.w_in"].grad().abs().sum().item<double>(), 0.0);
  const at::Tensor x = m->sample(b, out, 2, 4);
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{2, 14 * data::kMaxAtomsPerToken, 3}));
  EXPECT_TRUE(x.isfinite().all().item<bool>());
  MegaFold trunk_only(tiny_config());
  EXPECT_FALSE(trunk_only->has_diffusion());
  EXPECT_FALSE(trunk_only->loss(b, trunk_only->forward(b, 1), 9).diffusion_mse.defined());
}

// Recycling: each pass adds the previous pass's z and s, so more passes change the output; the
// pass count is bounded by model.recycles; passes are deterministic.
TEST(Model, RecyclingFeedsThePreviousPass) {
  fresh_seed();
  ModelConfig cfg = tiny_config();
  cfg.recycles = 3;
  MegaFold m(cfg);
  randomise_parameters(*m);  // nonzero recycling projections
  m->eval();
  const data::Batch b = batch_of(ubiquitin(), 15, 17);
  const TrunkOutput one = m->forward(b, 0, 1), three = m->forward(b, 0, 3);
  EXPECT_GT((one.z - three.z).abs().max().item<double>(), 1e-3);
  EXPECT_TRUE(at::equal(m->forward(b, 0, 3).z, three.z));
  EXPECT_TRUE(at::equal(m->forward(b, 0).z, three.z));  // 0 = the configured count
  EXPECT_THROW(m->forward(b, 0, 4), std::exception);
  // Training: gradients reach the recycling projections through the last pass only.
  m->train();
  const TrunkOutput out = m->forward(b, 5, 2);
  out.z.sum().backward();
  EXPECT_GT(m->named_parameters()["w_z_prev"].grad().abs().sum().item<double>(), 0.0);
}

// The confidence head trains on a rollout of the model's own structure and adds only its own
// gradients: the trunk's are those of the loss without the head on the ground truth matched to
// that rollout (its symmetric side-chain atoms renamed; AF3 SI Sec. 4.2), and predict() reports
// pLDDT.
TEST(Model, ConfidenceHeadTrainsOnItsRolloutAndScoresPredictions) {
  fresh_seed();
  ModelConfig cfg = tiny_diffusion_config();
  cfg.confidence.n_blocks = 1;
  cfg.confidence.rollout_steps = cfg.diffusion.sampler_steps = 2;  // so sample() replays the rollout
  MegaFold m(cfg);
  ASSERT_TRUE(m->has_confidence());
  randomise_parameters(*m, 0.2);
  const data::Batch b = batch_of(ubiquitin(), 12, 14);
  const uint64_t noise_seed = 9;
  at::Tensor rollout;
  {
    at::NoGradGuard no_grad;
    rollout = m->sample(b, m->forward(b, 1), 1, mix_seed(noise_seed, 1));
  }
  const data::Batch matched = permute_ground_truth(rollout, b);
  auto grads = [&](const data::Batch& gt, bool confidence) {
    m->zero_grad();
    const Losses l = m->loss(gt, m->forward(gt, 1), noise_seed, confidence);
    l.total.backward();
    std::map<std::string, at::Tensor> g;
    for (const auto& p : m->named_parameters())
      g[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : at::zeros_like(p.value());
    return std::make_pair(l, g);
  };
  const auto [without, g0] = grads(matched, false);
  const auto [with, g1] = grads(b, true);
  EXPECT_FALSE(without.plddt.defined());
  ASSERT_TRUE(with.plddt.defined());
  EXPECT_GT(with.plddt.item<double>(), 0.0);
  EXPECT_GE(with.plddt_target.item<double>(), 0.0);
  EXPECT_LE(with.plddt_target.item<double>(), 1.0);
  for (const auto& [name, g] : g1) {
    if (name.rfind("confidence.", 0) == 0)
      EXPECT_GT(g.abs().sum().item<double>(), 0.0) << name;
    else
      EXPECT_TRUE(at::equal(g, g0.at(name))) << name;
  }
  m->eval();
  const Prediction p = m->predict(b, m->forward(b, 0), 3, 4);
  EXPECT_EQ(p.coords.sizes(), (std::vector<int64_t>{3, 14 * data::kMaxAtomsPerToken, 3}));
  ASSERT_TRUE(p.plddt.defined());
  EXPECT_EQ(p.plddt.sizes(), (std::vector<int64_t>{3, 14 * data::kMaxAtomsPerToken}));
  EXPECT_GE(p.plddt.min().item<double>(), 0.0);
  EXPECT_LE(p.plddt.max().item<double>(), 100.0);
  // The ranking score of each sample with its disorder term (AF3 SI Sec. 5.9.3).
  ASSERT_EQ(p.fraction_disordered.sizes(), (std::vector<int64_t>{3}));
  const ProteinResidues residues = protein_residues(b, 0);
  for (int64_t k = 0; k < 3; ++k) {
    const double f = p.fraction_disordered[k].item<double>();
    EXPECT_EQ(f, fraction_disordered(p.coords[k], residues));
    const double iptm = std::isnan(p.iptm[k].item<double>()) ? p.ptm[k].item<double>() : p.iptm[k].item<double>();
    EXPECT_NEAR(p.ranking_score[k].item<double>(),
                0.8 * iptm + 0.2 * p.ptm[k].item<double>() + 0.5 * f - (p.has_clash[k].item<bool>() ? 100 : 0), 1e-12);
  }
}

// AF3 SI Sec. 4.2: every loss of a step with a rollout (distogram, diffusion, confidence) sees
// the ground truth matched to that rollout, for either labelling of a homodimer's copies: its
// losses and gradients are those of the step without a rollout on the matched ground truth.
// The diffusion loss runs in chunks, so its backward also checks that the matched ground truth
// outlives loss().
TEST(Model, EveryLossSeesTheGroundTruthMatchedToTheRollout) {
  fresh_seed();
  ModelConfig cfg = tiny_diffusion_config();
  cfg.n_blocks = 1, cfg.msa.n_blocks = 0;
  cfg.confidence.n_blocks = 1;
  cfg.confidence.rollout_steps = cfg.diffusion.sampler_steps = 2;  // so sample() replays the rollout
  cfg.diffusion.sample_chunk = 1;
  // A random model's rollout has stereocentres of either hand at random; reflecting it (tested
  // in chirality_test.cpp) can leave it matched to both labellings as given, which this test
  // needs to differ.
  cfg.diffusion.reflect_mirror_images = false;
  MegaFold m(cfg);
  randomise_parameters(*m, 0.2);
  // 3u8v: two copies of one chain; the same 24 residues of each.
  const data::Entry e = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/3u8v.cif.gz");
  std::vector<int32_t> sel;
  for (int32_t asym : {0, 1}) {
    int32_t taken = 0;
    for (int32_t i = 0; i < e.n_tokens() && taken < 24; ++i)
      if (e.asym_id[i] == asym) sel.push_back(i), ++taken;
  }
  const data::Batch b = data::make_batch({&e}, {sel}, 0);
  ASSERT_EQ(b.entity_id[0][0].item<int64_t>(), b.entity_id[0][24].item<int64_t>());
  // The other labelling: the copies' ground-truth rows exchanged.
  std::vector<int64_t> order(48);
  for (int64_t i = 0; i < 48; ++i) order[i] = (i + 24) % 48;
  const at::Tensor idx = at::tensor(order, at::kLong);
  data::Batch swapped = b;
  for (at::Tensor* t : {&swapped.atom_coords, &swapped.atom_mask, &swapped.rep_coords, &swapped.rep_mask,
                        &swapped.centre_mask})
    *t = t->index_select(1, idx);
  const uint64_t noise_seed = 5;
  at::Tensor rollout;
  {
    at::NoGradGuard no_grad;
    rollout = m->sample(b, m->forward(b, 1), 1, mix_seed(noise_seed, 1));
  }
  auto run = [&](const data::Batch& gt, bool with_rollout) {
    m->zero_grad();
    const Losses l = m->loss(gt, m->forward(gt, 1), noise_seed, with_rollout);
    l.total.backward();
    std::map<std::string, at::Tensor> g;
    for (const auto& p : m->named_parameters())
      if (p.value().grad().defined() && p.key().rfind("confidence.", 0) != 0) g[p.key()] = p.value().grad().clone();
    return std::make_pair(l, g);
  };
  bool moved = false;
  for (const data::Batch* labelling : std::vector<const data::Batch*>{&b, &swapped}) {
    const data::Batch matched = permute_ground_truth(rollout, *labelling);
    moved = moved || !at::equal(matched.atom_coords, labelling->atom_coords);
    const auto [l1, g1] = run(*labelling, true);
    const auto [l0, g0] = run(matched, false);
    EXPECT_EQ(l1.distogram.item<double>(), l0.distogram.item<double>());
    EXPECT_EQ(l1.diffusion_mse.item<double>(), l0.diffusion_mse.item<double>());
    EXPECT_EQ(l1.smooth_lddt.item<double>(), l0.smooth_lddt.item<double>());
    ASSERT_EQ(g1.size(), g0.size());
    for (const auto& [name, g] : g1) EXPECT_TRUE(at::equal(g, g0.at(name))) << name;
  }
  EXPECT_TRUE(moved);  // the rollout renamed or swapped something: the test compares two ground truths
  // The two labellings are different ground truths to a step without a rollout.
  EXPECT_NE(run(b, false).first.diffusion_mse.item<double>(), run(swapped, false).first.diffusion_mse.item<double>());
}

TEST(Distogram, BinsMatchHandComputedDistances) {
  // 64 equal bins over 2..22 A: edges at 2 + 0.3125 k for k = 1..63 (2.3125 .. 21.6875).
  const at::Tensor x = at::tensor({0.0f, 2.3f, 2.4f, 30.0f, 12.1f, 21.7f});
  const at::Tensor coords = at::stack({x, at::zeros_like(x), at::zeros_like(x)}, -1).unsqueeze(0);
  const at::Tensor bins = distogram_bins(coords, 64, 2.0, 22.0);
  EXPECT_EQ(bins[0][0][0].item<int64_t>(), 0);   // 0 A
  EXPECT_EQ(bins[0][0][1].item<int64_t>(), 0);   // 2.3 A: below the first edge
  EXPECT_EQ(bins[0][0][2].item<int64_t>(), 1);   // 2.4 A
  EXPECT_EQ(bins[0][0][3].item<int64_t>(), 63);  // 30 A: last, open-ended bin
  EXPECT_EQ(bins[0][0][4].item<int64_t>(), 32);  // 12.1 A: past edge 32 (12.0), below 33
  EXPECT_EQ(bins[0][0][5].item<int64_t>(), 63);  // 21.7 A: past the last edge
  EXPECT_EQ(bins[0][2][1].item<int64_t>(), 0);   // |2.4 - 2.3| = 0.1 A
}

TEST(Distogram, LossAveragesPerExample) {
  // Two examples with very different pair counts weigh the same.
  const at::Tensor coords = at::randn({2, 8, 3}) * 10;
  at::Tensor mask = at::ones({2, 8});
  mask[1].narrow(0, 2, 6).fill_(0);  // the second example has 2 valid tokens
  const at::Tensor logits = at::randn({2, 8, 8, 64});
  const DistogramMetrics both = distogram_loss(logits, coords, mask, 2.0, 22.0);
  const DistogramMetrics a = distogram_loss(logits.narrow(0, 0, 1), coords.narrow(0, 0, 1), mask.narrow(0, 0, 1), 2.0, 22.0);
  const DistogramMetrics b = distogram_loss(logits.narrow(0, 1, 1), coords.narrow(0, 1, 1), mask.narrow(0, 1, 1), 2.0, 22.0);
  EXPECT_NEAR(both.loss.item<double>(), (a.loss.item<double>() + b.loss.item<double>()) / 2, 1e-5);
}

TEST(Distogram, LossIsUniformEntropyForZeroLogitsAndIgnoresMaskedPairs) {
  const at::Tensor coords = at::randn({1, 6, 3}) * 10;
  const at::Tensor mask = at::tensor({1.f, 1.f, 1.f, 0.f, 1.f, 0.f}).view({1, 6});
  const DistogramMetrics m = distogram_loss(at::zeros({1, 6, 6, 64}), coords, mask, 2.0, 22.0);
  EXPECT_NEAR(m.loss.item<double>(), std::log(64.0), 1e-5);
  EXPECT_EQ(m.pairs.item<double>(), 16.0);
}

}  // namespace
}  // namespace megafold::model
