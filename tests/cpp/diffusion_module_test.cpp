// Diffusion module assembly, training loss and sampler: EDM skip at initialisation, the noise
// schedule's ends, augmentation keeps shapes, the loss reaches the trunk and follows its seed,
// sampling is deterministic in its seed.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/features.h"
#include "data/structure.h"
#include "model/diffusion_module.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

struct Setup {
  ModelConfig trunk;
  DiffusionConfig cfg;
  data::Entry entry;
  data::Batch batch;
  TrunkContext ctx;
};

std::unique_ptr<Setup> setup() {
  auto s = std::make_unique<Setup>();
  s->trunk.c_s = 8;
  s->trunk.c_z = 4;
  s->cfg.c_token = 16;
  s->cfg.n_blocks = 1;
  s->cfg.heads = 2;
  s->cfg.fourier_dim = 16;
  s->cfg.c_atom = 8;
  s->cfg.c_atompair = 4;
  s->cfg.atom_blocks = 1;
  s->cfg.atom_heads = 2;
  s->entry = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1a28.pdb.gz");
  std::vector<int32_t> sel(9);
  for (int i = 0; i < 9; ++i) sel[i] = 245 + i;  // across the chain break
  s->batch = data::make_batch({&s->entry}, {sel}, 11);  // two padding tokens
  const int64_t N = 11;
  s->ctx.batch = &s->batch;
  s->ctx.s_inputs = torch::randn({1, N, 32});
  s->ctx.s_trunk = torch::randn({1, N, s->trunk.c_s});
  s->ctx.z_trunk = torch::randn({1, N, N, s->trunk.c_z});
  return s;
}

class DiffusionModuleTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(static_cast<uint64_t>(fresh_seed())); }
};

TEST_F(DiffusionModuleTest, FreshModuleIsTheEdmSkipConnection) {
  auto s = setup();
  DiffusionModule m(s->cfg, s->trunk, 32);
  const auto prep = m->prepare(s->ctx);
  const int64_t A = s->batch.atom_index.size(1);  // the atoms the 9 tokens have
  ASSERT_EQ(prep.layout->atoms(), A);
  const at::Tensor x = torch::randn({3, A, 3}) * 20, t = torch::tensor({0.5f, 16.f, 300.f});
  const at::Tensor out = m(x, t, prep);
  const at::Tensor skip = 256.f / (256.f + t * t);
  EXPECT_TRUE(at::allclose(out, skip.view({3, 1, 1}) * x, 1e-5, 1e-5));  // zero-initialised update
}

TEST_F(DiffusionModuleTest, NoiseScheduleRunsFromSMaxToSMin) {
  SamplerConfig cfg;
  const at::Tensor c = noise_schedule(cfg, 16.0);
  EXPECT_EQ(c.size(0), 201);
  EXPECT_NEAR(c[0].item<double>(), 16.0 * 160.0, 1e-9);
  EXPECT_NEAR(c[200].item<double>(), 16.0 * 4e-4, 1e-12);
  EXPECT_TRUE((c.narrow(0, 1, 200) < c.narrow(0, 0, 200)).all().item<bool>());
}

TEST_F(DiffusionModuleTest, AugmentationIsARigidMotionOfTheCentredRows) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor x = torch::randn({2, 30, 3}, torch::kDouble) * 5 + 40;
  at::Tensor mask = torch::ones({2, 30}, torch::kDouble);
  mask.narrow(1, 25, 5).zero_();
  const at::Tensor y = centre_random_augmentation(x, mask, gen, 0.0);
  auto dist = [](const at::Tensor& a) { return (a.unsqueeze(2) - a.unsqueeze(1)).pow(2).sum(-1).sqrt(); };
  EXPECT_TRUE(at::allclose(dist(y), dist(x), 1e-9, 1e-9));
  const at::Tensor centre = (y * mask.unsqueeze(-1)).sum(1) / 25;
  EXPECT_LT(centre.abs().max().item<double>(), 1e-9);
}

TEST_F(DiffusionModuleTest, LossReachesTheTrunkAndFollowsItsSeed) {
  auto s = setup();
  DiffusionModule m(s->cfg, s->trunk, 32);
  randomise_parameters(*m, 0.2);
  s->ctx.s_trunk.requires_grad_(true);
  s->ctx.z_trunk.requires_grad_(true);
  const DiffusionLoss l = diffusion_loss(m, s->ctx, 3, 0, 11);
  EXPECT_TRUE(std::isfinite(l.total.item<float>()));
  EXPECT_GT(l.mse.item<float>(), 0.f);
  EXPECT_GT(l.smooth_lddt.item<float>(), 0.19f);  // the sigmoid floor of a perfect structure is 0.196
  l.total.backward();
  EXPECT_GT(s->ctx.s_trunk.grad().abs().sum().item<float>(), 0.f);
  EXPECT_GT(s->ctx.z_trunk.grad().abs().sum().item<float>(), 0.f);
  EXPECT_EQ(diffusion_loss(m, s->ctx, 3, 0, 11).total.item<float>(), l.total.item<float>());
  EXPECT_NE(diffusion_loss(m, s->ctx, 3, 0, 12).total.item<float>(), l.total.item<float>());
}

// Chunks (recomputed in backward) change only the order of the sums: the loss and every
// gradient equal the unchunked ones to float32 rounding.
TEST_F(DiffusionModuleTest, ChunkedLossEqualsTheLossOfAllSamplesAtOnce) {
  auto s = setup();
  DiffusionModule m(s->cfg, s->trunk, 32);
  randomise_parameters(*m, 0.2);
  s->ctx.s_trunk.requires_grad_(true);
  s->ctx.z_trunk.requires_grad_(true);
  auto run = [&](int64_t chunk) {
    for (auto& p : m->parameters()) p.mutable_grad() = at::Tensor();
    s->ctx.s_trunk.mutable_grad() = at::Tensor();
    s->ctx.z_trunk.mutable_grad() = at::Tensor();
    const DiffusionLoss l = diffusion_loss(m, s->ctx, 5, chunk, 21);
    l.total.backward();
    std::vector<at::Tensor> out{l.total.detach(), l.mse, l.smooth_lddt, s->ctx.s_trunk.grad().clone(),
                                s->ctx.z_trunk.grad().clone()};
    for (auto& p : m->parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    return out;
  };
  const auto whole = run(0), chunked = run(2);
  ASSERT_EQ(whole.size(), chunked.size());
  // Some parameter gradients are analytically zero and hold only float32 cancellation noise (a
  // LayerNorm bias that shifts every logit of a softmax, or every atom of a translation-invariant
  // loss): an absolute floor of ~8 float32 epsilons of the largest gradient covers them.
  double scale = 0;
  for (size_t i = 5; i < whole.size(); ++i) scale = std::max(scale, whole[i].abs().max().item<double>());
  for (size_t i = 0; i < whole.size(); ++i) {
    const double err = (chunked[i] - whole[i]).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * whole[i].abs().max().item<double>() + (i >= 5 ? 1e-6 * scale : 0.0))
        << "output/gradient " << i << (i >= 5 ? " " + m->named_parameters().keys()[i - 5] : "");
  }
  EXPECT_GT(whole[4].abs().sum().item<float>(), 0.f);  // the trunk's pair gets a gradient
}

// AF3 SI Eq. 5: squared error of bonded distances, averaged over a row's resolved bonds; a
// rigid motion changes nothing; the gradient matches finite differences.
TEST(BondLoss, SquaredErrorOfBondLengths) {
  const at::Tensor gt = at::tensor({0., 0., 0., 1.5, 0., 0., 1.5, 1.4, 0., 9., 9., 9.}, at::kDouble).view({1, 4, 3});
  at::Tensor x = gt.clone();
  x[0][1][0] = 2.0;  // bond 0-1 stretched from 1.5 to 2.0 A
  const at::Tensor atoms = at::tensor({0, 1, 1, 2, 2, 3}, at::kLong).view({1, 3, 2});
  const at::Tensor mask = at::tensor({1., 1., 0.}, at::kDouble).view({1, 3});  // the bond to atom 3 unresolved
  const double d12 = std::sqrt(0.5 * 0.5 + 1.4 * 1.4);
  const double expected = (0.25 + std::pow(d12 - 1.4, 2)) / 2;
  EXPECT_NEAR(bond_loss(x, gt, atoms, mask).item<double>(), expected, 1e-12);
  const at::Tensor rot = std::get<0>(at::linalg_qr(at::randn({3, 3}, at::kDouble)));
  EXPECT_NEAR(bond_loss(at::matmul(x, rot) + 3.0, gt, atoms, mask).item<double>(), expected, 1e-12);
  EXPECT_EQ(bond_loss(x, gt, at::zeros({1, 0, 2}, at::kLong), at::zeros({1, 0}, at::kDouble)).item<double>(), 0.0);
  const at::Tensor xg = (x + 0.1 * at::randn_like(x)).requires_grad_(true);
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& v) { return bond_loss(v[0], gt, atoms, mask); }, {xg});
}

TEST_F(DiffusionModuleTest, SamplingIsDeterministicInItsSeed) {
  auto s = setup();
  DiffusionModule m(s->cfg, s->trunk, 32);
  randomise_parameters(*m, 0.2);
  SamplerConfig cfg;
  cfg.steps = 4;
  const at::Tensor a = sample_structures(m, s->ctx, 2, cfg, 5);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{2, 11 * data::kMaxAtomsPerToken, 3}));
  EXPECT_TRUE(a.isfinite().all().item<bool>());
  EXPECT_FALSE(a.requires_grad());
  EXPECT_TRUE(at::equal(sample_structures(m, s->ctx, 2, cfg, 5), a));
  EXPECT_FALSE(at::equal(sample_structures(m, s->ctx, 2, cfg, 6), a));
  EXPECT_FALSE(at::equal(a[0], a[1]));  // two samples differ
}

}  // namespace
}  // namespace megafold::model
