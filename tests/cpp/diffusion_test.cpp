// Token-level diffusion pieces: Fourier embedding, adaptive LayerNorm against its formula,
// a fresh transformer is the identity, padding and locality masks cut the right dependencies,
// samples share their example's pair bias, conditioning follows the noise level, gradients
// match finite differences.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/diffusion.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

class Diffusion : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(static_cast<uint64_t>(fresh_seed())); }
};

TEST_F(Diffusion, FourierEmbeddingIsACosineOfFixedFeatures) {
  FourierEmbedding f(256);
  const at::Tensor t = torch::tensor({-1.0f, 0.0f, 0.37f});
  const at::Tensor e = f(t);
  EXPECT_EQ(e.sizes(), (std::vector<int64_t>{3, 256}));
  EXPECT_LE(e.abs().max().item<float>(), 1.0f);
  EXPECT_TRUE(at::equal(f(t), e));
  EXPECT_GT((e[0] - e[2]).abs().max().item<float>(), 0.1f);
  EXPECT_EQ(f->buffers().size(), 2u);  // saved with the model, not re-drawn
  EXPECT_TRUE(f->parameters().empty());
}

TEST_F(Diffusion, AdaptiveLayerNormFollowsAlgorithm26) {
  AdaptiveLayerNorm ada(12, 7);
  randomise_parameters(*ada);
  const at::Tensor a = torch::randn({2, 5, 12}), s = torch::randn({2, 5, 7});
  const auto p = ada->named_parameters();
  const at::Tensor s_n = at::layer_norm(s, {7}) * p["ln_s_weight"];
  const at::Tensor want = torch::sigmoid(at::linear(s_n, p["w_gain"], p["b_gain"])) * at::layer_norm(a, {12}) +
                          at::linear(s_n, p["w_shift"]);
  EXPECT_TRUE(at::allclose(ada(a, s), want, 1e-5, 1e-6));
}

TEST_F(Diffusion, FreshTransformerIsTheIdentityAndMasksCutDependencies) {
  const int64_t B = 2, N = 9, c_a = 16, c_s = 8, c_z = 4;
  DiffusionTransformer tr(c_a, c_s, c_z, 2, 4, 2);
  const at::Tensor a = torch::randn({B, N, c_a}), s = torch::randn({B, N, c_s}), z = torch::randn({B, N, N, c_z});
  at::Tensor mask = torch::ones({B, N});
  mask.narrow(1, N - 3, 3).zero_();  // three padding tokens
  EXPECT_TRUE(at::equal(tr(a, s, tr->pair_biases(z), mask), a));  // zero-initialised output projections

  randomise_parameters(*tr);
  const std::vector<at::Tensor> biases = tr->pair_biases(z);
  ASSERT_EQ(biases.size(), 2u);
  EXPECT_EQ(biases[0].sizes(), (std::vector<int64_t>{B, 4, N, N}));
  const at::Tensor out = tr(a, s, biases, mask);
  EXPECT_GT((out - a).abs().max().item<float>(), 1e-2f);
  // Padding tokens' inputs do not reach the real tokens.
  at::Tensor a2 = a.clone(), z2 = z.clone();
  a2.narrow(1, N - 3, 3).normal_();
  z2.narrow(2, N - 3, 3).normal_();
  EXPECT_TRUE(at::allclose(tr(a2, s, tr->pair_biases(z2), mask).narrow(1, 0, N - 3), out.narrow(1, 0, N - 3), 1e-5,
                           1e-6));
  // A locality bias added to the pair biases lets every token see only itself: token 0
  // ignores all others.
  const at::Tensor beta = (1 - torch::eye(N)) * -1e9;
  std::vector<at::Tensor> local_biases;
  for (const at::Tensor& b : biases) local_biases.push_back(b + beta);
  const at::Tensor local = tr(a, s, local_biases, mask);
  at::Tensor a3 = a.clone();
  a3.narrow(1, 1, N - 1).normal_();
  EXPECT_TRUE(at::allclose(tr(a3, s, local_biases, mask).select(1, 0), local.select(1, 0), 1e-5, 1e-6));
}

// Samples of one example share its pair biases (the attention core's rows): running three
// samples at once gives each sample's result alone, and examples do not mix.
TEST_F(Diffusion, SamplesShareTheirExamplesPairBias) {
  const int64_t B = 2, S = 3, N = 7, c_a = 16, c_s = 8, c_z = 4;
  DiffusionTransformer tr(c_a, c_s, c_z, 2, 4, 2);
  randomise_parameters(*tr);
  const at::Tensor z = torch::randn({B, N, N, c_z});
  at::Tensor mask = torch::ones({B, N});
  mask[1][N - 1] = 0;
  const at::Tensor a = torch::randn({B * S, N, c_a}), s = torch::randn({B * S, N, c_s});
  const std::vector<at::Tensor> biases = tr->pair_biases(z);
  const at::Tensor all = tr(a, s, biases, mask);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<at::Tensor> mine;
    for (const at::Tensor& x : biases) mine.push_back(x.narrow(0, b, 1));
    for (int64_t k = 0; k < S; ++k) {
      const int64_t row = b * S + k;
      const at::Tensor one = tr(a.narrow(0, row, 1), s.narrow(0, row, 1), mine, mask.narrow(0, b, 1));
      EXPECT_TRUE(at::allclose(all.narrow(0, row, 1), one, 1e-5, 1e-6)) << "example " << b << " sample " << k;
    }
  }
}

// Blocks that keep only their inputs (recomputed in backward) give the same output and
// gradients, bitwise: the recomputation repeats the forward's arithmetic.
TEST_F(Diffusion, RecomputedBlocksGiveTheSameResults) {
  const int64_t B = 1, S = 2, N = 6, c_a = 16, c_s = 8, c_z = 4;
  DiffusionTransformer plain(c_a, c_s, c_z, 2, 4, 2), recomputed(c_a, c_s, c_z, 2, 4, 2, /*recompute_blocks=*/true);
  randomise_parameters(*plain);
  {
    torch::NoGradGuard g;
    for (const auto& p : plain->named_parameters()) recomputed->named_parameters()[p.key()].copy_(p.value());
  }
  const at::Tensor z = torch::randn({B, N, N, c_z}), w = torch::randn({B * S, N, c_a});
  const at::Tensor a_in = torch::randn({B * S, N, c_a}), s = torch::randn({B * S, N, c_s});
  at::Tensor mask = torch::ones({B, N});
  mask[0][N - 1] = 0;
  auto run = [&](DiffusionTransformer& tr) {
    const at::Tensor a0 = a_in.clone().requires_grad_();
    const at::Tensor out = tr(a0, s, tr->pair_biases(z), mask);
    (out * w).sum().backward();
    std::vector<at::Tensor> r{out.detach(), a0.grad()};
    for (const auto& p : tr->parameters()) r.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
    return r;
  };
  const auto want = run(plain), got = run(recomputed);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "tensor " << i;
}

TEST_F(Diffusion, ConditioningFollowsTheNoiseLevel) {
  DiffusionConfig cfg;
  cfg.fourier_dim = 32;
  const int64_t B = 2, N = 6, c_s = 16, c_si = 10, c_z = 8;
  DiffusionConditioning cond(cfg, c_s, c_si, c_z);
  randomise_parameters(*cond);
  const at::Tensor s_in = torch::randn({B, N, c_si}), s_tr = torch::randn({B, N, c_s}),
                   z_tr = torch::randn({B, N, N, c_z}), rel = torch::randn({B, N, N, c_z});
  const Conditioning lo = cond(torch::tensor({1.0f, 1.0f}), s_in, s_tr, z_tr, rel);
  const Conditioning hi = cond(torch::tensor({1.0f, 80.0f}), s_in, s_tr, z_tr, rel);
  EXPECT_EQ(lo.s.sizes(), (std::vector<int64_t>{B, N, c_s}));
  EXPECT_EQ(lo.z.sizes(), (std::vector<int64_t>{B, N, N, c_z}));
  EXPECT_TRUE(at::equal(lo.z, hi.z));                       // the pair does not see t
  EXPECT_TRUE(at::allclose(lo.s[0], hi.s[0]));               // same t, same s
  EXPECT_GT((lo.s[1] - hi.s[1]).abs().max().item<float>(), 1e-3f);
}

TEST_F(Diffusion, GradientsMatchFiniteDifferences) {
  const int64_t B = 1, N = 5, c_a = 8, c_s = 4, c_z = 3;
  DiffusionTransformer tr(c_a, c_s, c_z, 1, 2, 2);
  randomise_parameters(*tr);
  tr->to(torch::kDouble);
  const at::Tensor z = torch::randn({B, N, N, c_z}, torch::kDouble);
  at::Tensor mask = torch::ones({B, N}, torch::kDouble);
  mask[0][N - 1] = 0;
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) { return tr(x[0], x[1], tr->pair_biases(z), mask); },
      {torch::randn({B, N, c_a}, torch::kDouble).requires_grad_(true),
       torch::randn({B, N, c_s}, torch::kDouble).requires_grad_(true)});
}

}  // namespace
}  // namespace megafold::model
