// Atom level of the diffusion module: window bookkeeping, locality and masking of the atom
// transformer, encoder/decoder shapes and identity-at-init, finite-difference gradients.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "data/features.h"
#include "data/residue_constants.h"
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
  EXPECT_EQ(k[0][0][47].abs().sum().item<float>(), 0.f);             // key -1: a zero row
}

// keys_of's backward (each atom's key gradients summed over the blocks holding it, in order)
// against index_select's on every awkward atom count: fewer atoms than a window, one block,
// partial last blocks.
TEST_F(AtomAttention, WindowKeyGradientsSumOverEveryBlockHoldingTheAtom) {
  for (int64_t A : {1, 5, 32, 33, 80, 127, 129, 300}) {
    const AtomWindows w(A, at::kCPU);
    const at::Tensor x = torch::randn({2, A, 3}, torch::kDouble).requires_grad_(true);
    const at::Tensor up = torch::randn({2, w.blocks, AtomWindows::kKeys, 3}, torch::kDouble);
    (w.keys_of(x) * up).sum().backward();
    const at::Tensor ref = x.detach().clone().requires_grad_(true);
    const at::Tensor padded = at::cat({ref, at::zeros({2, 1, 3}, ref.options())}, 1);
    (padded.index_select(1, w.keys.reshape({-1})).view(up.sizes()) * up).sum().backward();
    EXPECT_LT(rel_error(x.grad(), ref.grad()), 1e-14) << A << " atoms";
    // Every atom is held by min(4, blocks) blocks at most, and by at least one.
    const at::Tensor held = (w.holders < w.blocks * AtomWindows::kKeys).sum(1);
    EXPECT_GE(held.min().item<int64_t>(), 1) << A;
    EXPECT_LE(held.max().item<int64_t>(), std::min<int64_t>(4, w.blocks)) << A;
    EXPECT_EQ(held.sum().item<int64_t>(), w.valid.sum().item<int64_t>()) << A;
  }
}

// A batch's token types and compact atom list (as data::make_batch lays it out): every slot
// each token's type has, token by token; the shorter examples padded at the end.
data::Batch layout_batch(const at::Tensor& restype) {
  const int64_t B = restype.size(0), N = restype.size(1);
  std::vector<std::vector<int64_t>> index(B), token(B);
  int64_t A = 1;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < N; ++i) {
      const int t = static_cast<int>(restype[b][i].item<int64_t>());
      for (int slot = 0; slot < data::atom_count(t); ++slot) index[b].push_back(i * kMaxAtomsPerToken + slot), token[b].push_back(i);
    }
    A = std::max<int64_t>(A, static_cast<int64_t>(index[b].size()));
  }
  data::Batch batch;
  batch.restype = restype;
  batch.atom_index = at::zeros({B, A}, at::kLong);
  batch.atom_token = at::zeros({B, A}, at::kLong);
  batch.atom_exists = at::zeros({B, A});
  for (int64_t b = 0; b < B; ++b)
    for (size_t k = 0; k < index[b].size(); ++k) {
      batch.atom_index[b][k] = index[b][k];
      batch.atom_token[b][k] = token[b][k];
      batch.atom_exists[b][k] = 1.f;
    }
  return batch;
}

struct Inputs {
  data::ReferenceFeatures ref;
  data::Batch batch;
  at::Tensor mask, r, s, z;  // mask [B, A] the atoms that exist, r [B, A, 3]
};

// Random amino-acid tokens (the second example's last three are gap tokens: fewer atoms, so its
// list is padded).
Inputs inputs(int64_t B, int64_t N, int64_t c_s, int64_t c_z, at::ScalarType dtype) {
  Inputs in;
  at::Tensor restype = torch::randint(0, 21, {B, N}, torch::kLong);
  if (B > 1) restype[1].narrow(0, N - 3, 3).fill_(data::kGapToken);
  in.ref = data::reference_features(restype);
  in.batch = layout_batch(restype);
  in.mask = in.batch.atom_exists.to(dtype);
  in.r = torch::randn({B, in.mask.size(1), 3}, dtype);
  in.s = torch::randn({B, N, c_s}, dtype);
  in.z = torch::randn({B, N, N, c_z}, dtype);
  return in;
}

TEST_F(AtomAttention, LayoutMovesBetweenDenseAtomsAndTokens) {
  const Inputs in = inputs(2, 9, 4, 3, torch::kDouble);
  const AtomLayout layout(in.batch);
  const int64_t B = 2, N = 9, D = N * kMaxAtomsPerToken, A = layout.atoms();
  const at::Tensor dense = torch::randn({B, D, 5}, torch::kDouble) * in.ref.mask.view({B, D, 1}).to(torch::kDouble);
  // Dense -> list -> dense is the identity on the slots that exist (zeros elsewhere).
  EXPECT_TRUE(at::equal(layout.to_dense(layout.from_dense(dense)), dense));
  // Token rows to atoms and the mean back.
  const at::Tensor x = torch::randn({B, N, 5}, torch::kDouble);
  const at::Tensor per_atom = layout.from_tokens(x);
  EXPECT_EQ(per_atom.sizes(), (std::vector<int64_t>{B, A, 5}));
  const at::Tensor back = layout.token_mean(per_atom, in.mask);
  const at::Tensor has = (in.ref.mask.sum(2) > 0).unsqueeze(-1).to(torch::kDouble);
  EXPECT_TRUE(at::allclose(back * has, x * has, 1e-12, 1e-12));
  // Samples of each example (rows example-major) follow the example's list.
  const at::Tensor two = at::cat({x[0].unsqueeze(0), x[0].unsqueeze(0), x[1].unsqueeze(0), x[1].unsqueeze(0)});
  EXPECT_TRUE(at::equal(layout.from_tokens(two)[3], per_atom[1]));
}

// Moves and their gradients are bitwise repeatable at sizes where parallel accumulation would
// reorder sums (CPU index_put goes atomic past 32768 elements with several threads).
TEST_F(AtomAttention, LayoutMovesAreBitwiseRepeatable) {
  const Inputs in = inputs(3, 300, 4, 3, torch::kFloat);
  const AtomLayout layout(in.batch);
  const int64_t R = 6, c = 48;  // two samples per example
  const at::Tensor x = torch::randn({R, 300, c}), w = torch::randn({R, layout.atoms(), c}), v = torch::randn({R, 300, c});
  const at::Tensor mask = in.mask.repeat_interleave(2, 0);
  auto grad = [&] {
    const at::Tensor xg = x.clone().requires_grad_(true);
    (layout.token_mean(layout.from_tokens(xg) * w, mask) * v).sum().backward();
    return xg.grad();
  };
  ASSERT_GT(R * layout.atoms() * c, 32768);
  const at::Tensor a = grad(), b = grad();
  EXPECT_TRUE(at::equal(a, b));
}

TEST_F(AtomAttention, EncoderIsLocalAndIgnoresMissingAtoms) {
  const DiffusionConfig cfg = small_config();
  const int64_t B = 2, N = 48, c_s = 6, c_z = 5;
  AtomAttentionEncoder enc(cfg, c_s, c_z);
  randomise_parameters(*enc);
  const Inputs in = inputs(B, N, c_s, c_z, torch::kFloat);
  const AtomLayout layout(in.batch);
  const int64_t A = layout.atoms();
  ASSERT_GT(A, 260);
  const AtomWindows w(A, at::kCPU);
  const AtomConditioning cond = enc->condition(in.ref, in.s, in.z, layout, w);
  EXPECT_EQ(cond.p.sizes(), (std::vector<int64_t>{B, w.blocks, 32, 128, cfg.c_atompair}));
  const std::vector<at::Tensor> biases = enc->pair_biases(cond.p);
  ASSERT_EQ(biases.size(), static_cast<size_t>(cfg.atom_blocks));
  EXPECT_EQ(biases[0].sizes(), (std::vector<int64_t>{B, w.blocks, 32, 128, cfg.atom_heads}));
  const AtomEncoding e = enc(cond.c, biases, in.mask, in.r, layout, w);
  EXPECT_EQ(e.a.sizes(), (std::vector<int64_t>{B, N, cfg.c_token}));
  EXPECT_EQ(e.q_skip.sizes(), (std::vector<int64_t>{B, A, cfg.c_atom}));
  // Three blocks of 128-key windows: atoms of block 0 see at most atoms < 208.
  at::Tensor r2 = in.r.clone();
  r2.narrow(1, 224, A - 224).normal_();
  const AtomEncoding far = enc(cond.c, biases, in.mask, r2, layout, w);
  EXPECT_TRUE(at::allclose(far.q_skip.narrow(1, 0, 32), e.q_skip.narrow(1, 0, 32), 1e-5, 1e-6));
  EXPECT_GT((far.q_skip - e.q_skip).abs().max().item<float>(), 1e-3f);
  // Padding atoms' positions never reach real atoms.
  const at::Tensor r3 = torch::where(in.mask.unsqueeze(-1) > 0, in.r, torch::randn_like(in.r));
  const AtomEncoding empty = enc(cond.c, biases, in.mask, r3, layout, w);
  const at::Tensor real = in.mask.view({B, A, 1});
  EXPECT_TRUE(at::allclose(empty.q_skip * real, e.q_skip * real, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(empty.a, e.a, 1e-5, 1e-6));
}

TEST_F(AtomAttention, FreshDecoderPredictsNoUpdateAndGradientsFlow) {
  const DiffusionConfig cfg = small_config();
  const int64_t B = 1, N = 4, c_s = 6, c_z = 5;
  AtomAttentionEncoder enc(cfg, c_s, c_z);
  AtomAttentionDecoder dec(cfg);
  const Inputs in = inputs(B, N, c_s, c_z, torch::kFloat);
  const AtomLayout layout(in.batch);
  const int64_t A = layout.atoms();
  const AtomWindows w(A, at::kCPU);
  const AtomConditioning cond = enc->condition(in.ref, in.s, in.z, layout, w);
  const AtomEncoding e = enc(cond.c, enc->pair_biases(cond.p), in.mask, in.r, layout, w);
  const at::Tensor a = torch::randn({B, N, cfg.c_token}, torch::requires_grad());
  EXPECT_EQ(dec(a, e, dec->pair_biases(cond.p), in.mask, layout, w).abs().max().item<float>(), 0.f);  // zero output projection
  randomise_parameters(*dec);
  const at::Tensor out = dec(a, e, dec->pair_biases(cond.p), in.mask, layout, w);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{B, A, 3}));
  out.sum().backward();
  EXPECT_GT(a.grad().abs().sum().item<float>(), 0.f);
}

TEST_F(AtomAttention, GradientsMatchFiniteDifferences) {
  DiffusionConfig cfg = small_config();
  cfg.atom_blocks = 1;
  const int64_t B = 2, N = 3, c_s = 4, c_z = 3;
  AtomAttentionEncoder enc(cfg, c_s, c_z);
  AtomAttentionDecoder dec(cfg);
  randomise_parameters(*enc);
  randomise_parameters(*dec);
  enc->to(torch::kDouble);
  dec->to(torch::kDouble);
  const Inputs in = inputs(B, N, c_s, c_z, torch::kDouble);
  const AtomLayout layout(in.batch);
  const int64_t A = layout.atoms();
  const AtomWindows w(A, at::kCPU);
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) {
        const AtomConditioning cond = enc->condition(in.ref, x[1], in.z, layout, w);
        const AtomEncoding e = enc(cond.c, enc->pair_biases(cond.p), in.mask, x[0], layout, w);
        return dec(e.a, e, dec->pair_biases(cond.p), in.mask, layout, w) * in.mask.view({B, A, 1});
      },
      {in.r.clone().requires_grad_(true), in.s.clone().requires_grad_(true)});
}

}  // namespace
}  // namespace megafold::model
