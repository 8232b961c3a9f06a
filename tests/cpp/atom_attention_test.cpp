// Atom level of the diffusion module: window bookkeeping, locality and masking of the atom
// transformer, encoder/decoder shapes and identity-at-init, finite-difference gradients.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/features.h"
#include "model/atom_attention.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;
using data::kMaxAtomsPerToken;

DiffusionConfig small_config() {
  DiffusionConfig c;
  c.c_token = 16;
  c.c_atom = 8;
  c.c_atompair = 4;
  c.atom_blocks = 3;
  c.atom_heads = 2;
  return c;
}

class AtomAttention : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(static_cast<uint64_t>(fresh_seed())); }
};

TEST_F(AtomAttention, WindowsCentreOnTheirBlocks) {
  const AtomWindows w(70, at::kCPU);
  EXPECT_EQ(w.blocks, 3);
  EXPECT_EQ(w.keys.sizes(), (std::vector<int64_t>{3, 128}));
  EXPECT_EQ(w.valid[0].sum().item<int64_t>(), 70);  // [-48, 80) within [0, 70)
  EXPECT_EQ(w.valid[2].sum().item<int64_t>(), 70 - 16);  // [16, 144)
  EXPECT_EQ(w.keys[2][0].item<int64_t>(), 16);
  const at::Tensor x = torch::randn({2, 70, 5});
  const at::Tensor k = w.keys_of(x);
  EXPECT_TRUE(at::equal(k[1][2][10], x[1][16 + 10]));
  EXPECT_TRUE(at::equal(w.unblock(w.queries(x)), x));
  EXPECT_EQ(w.queries(x)[0][2][31].abs().sum().item<float>(), 0.f);  // padding query rows
}

struct Inputs {
  data::ReferenceFeatures ref;
  at::Tensor mask, r, s, z;
};

Inputs inputs(int64_t B, int64_t N, int64_t c_s, int64_t c_z, at::ScalarType dtype) {
  Inputs in;
  in.ref = data::reference_features(torch::randint(0, 21, {B, N}, torch::kLong));
  in.mask = in.ref.mask.to(dtype).view({B, N * kMaxAtomsPerToken});
  in.r = torch::randn({B, N * kMaxAtomsPerToken, 3}, dtype);
  in.s = torch::randn({B, N, c_s}, dtype);
  in.z = torch::randn({B, N, N, c_z}, dtype);
  return in;
}

TEST_F(AtomAttention, EncoderIsLocalAndIgnoresMissingAtoms) {
  const DiffusionConfig cfg = small_config();
  const int64_t B = 2, N = 20, A = N * kMaxAtomsPerToken, c_s = 6, c_z = 5;
  AtomAttentionEncoder enc(cfg, c_s, c_z);
  randomise_parameters(*enc);
  const Inputs in = inputs(B, N, c_s, c_z, torch::kFloat);
  const AtomWindows w(A, at::kCPU);
  const AtomConditioning cond = enc->condition(in.ref, in.s, in.z, w);
  EXPECT_EQ(cond.p.sizes(), (std::vector<int64_t>{B, w.blocks, 32, 128, cfg.c_atompair}));
  const std::vector<at::Tensor> biases = enc->pair_biases(cond.p);
  ASSERT_EQ(biases.size(), static_cast<size_t>(cfg.atom_blocks));
  EXPECT_EQ(biases[0].sizes(), (std::vector<int64_t>{B, w.blocks, 32, 128, cfg.atom_heads}));
  const AtomEncoding e = enc(cond.c, biases, in.mask, in.r, w);
  EXPECT_EQ(e.a.sizes(), (std::vector<int64_t>{B, N, cfg.c_token}));
  EXPECT_EQ(e.q_skip.sizes(), (std::vector<int64_t>{B, A, cfg.c_atom}));
  // Three blocks of 128-key windows: atoms of block 0 see at most atoms < 208.
  at::Tensor r2 = in.r.clone();
  r2.narrow(1, 224, A - 224).normal_();
  const AtomEncoding far = enc(cond.c, biases, in.mask, r2, w);
  EXPECT_TRUE(at::allclose(far.q_skip.narrow(1, 0, 32), e.q_skip.narrow(1, 0, 32), 1e-5, 1e-6));
  EXPECT_GT((far.q_skip - e.q_skip).abs().max().item<float>(), 1e-3f);
  // Empty slots' positions never reach real atoms.
  const at::Tensor r3 = torch::where(in.mask.unsqueeze(-1) > 0, in.r, torch::randn_like(in.r));
  const AtomEncoding empty = enc(cond.c, biases, in.mask, r3, w);
  const at::Tensor real = in.mask.view({B, A, 1});
  EXPECT_TRUE(at::allclose(empty.q_skip * real, e.q_skip * real, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(empty.a, e.a, 1e-5, 1e-6));
}

TEST_F(AtomAttention, FreshDecoderPredictsNoUpdateAndGradientsFlow) {
  const DiffusionConfig cfg = small_config();
  const int64_t B = 1, N = 4, A = N * kMaxAtomsPerToken, c_s = 6, c_z = 5;
  AtomAttentionEncoder enc(cfg, c_s, c_z);
  AtomAttentionDecoder dec(cfg);
  const Inputs in = inputs(B, N, c_s, c_z, torch::kFloat);
  const AtomWindows w(A, at::kCPU);
  const AtomConditioning cond = enc->condition(in.ref, in.s, in.z, w);
  const AtomEncoding e = enc(cond.c, enc->pair_biases(cond.p), in.mask, in.r, w);
  const at::Tensor a = torch::randn({B, N, cfg.c_token}, torch::requires_grad());
  EXPECT_EQ(dec(a, e, dec->pair_biases(cond.p), in.mask, w).abs().max().item<float>(), 0.f);  // zero output projection
  randomise_parameters(*dec);
  const at::Tensor out = dec(a, e, dec->pair_biases(cond.p), in.mask, w);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{B, A, 3}));
  out.sum().backward();
  EXPECT_GT(a.grad().abs().sum().item<float>(), 0.f);
}

TEST_F(AtomAttention, GradientsMatchFiniteDifferences) {
  DiffusionConfig cfg = small_config();
  cfg.atom_blocks = 1;
  const int64_t B = 1, N = 3, A = N * kMaxAtomsPerToken, c_s = 4, c_z = 3;
  AtomAttentionEncoder enc(cfg, c_s, c_z);
  AtomAttentionDecoder dec(cfg);
  randomise_parameters(*enc);
  randomise_parameters(*dec);
  enc->to(torch::kDouble);
  dec->to(torch::kDouble);
  const Inputs in = inputs(B, N, c_s, c_z, torch::kDouble);
  const AtomWindows w(A, at::kCPU);
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) {
        const AtomConditioning cond = enc->condition(in.ref, x[1], in.z, w);
        const AtomEncoding e = enc(cond.c, enc->pair_biases(cond.p), in.mask, x[0], w);
        return dec(e.a, e, dec->pair_biases(cond.p), in.mask, w) * in.mask.view({B, A, 1});
      },
      {in.r.clone().requires_grad_(true), in.s.clone().requires_grad_(true)});
}

}  // namespace
}  // namespace megafold::model
