// The whole model on a GPU (skipped elsewhere), with the CUDA kernels and bf16 autocast as the
// trainer runs them: a training step on a protein-DNA complex with an ion (and templates)
// repeats its gradients bit for bit; the template embedder is within the derived tolerance of
// its float64 reference. On a GPU every accumulation must be ordered for this (no floating-point atomics
// in any backward), including the atom layers' overlapping windows.
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <map>
#include <string>

#include "core/autocast.h"
#include "data/features.h"
#include "data/residue_constants.h"
#include "data/structure.h"
#include "model/model.h"
#include "model/pairformer.h"
#include "model/template_embedder.h"
#include "ops/reference_mode.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

const std::string kData = MEGAFOLD_TEST_SOURCE_DIR "/data/pdb";

// AF3 widths, so that every op takes its CUDA kernels; a few blocks of each stack.
ModelConfig small_af3() {
  ModelConfig c;
  c.n_blocks = 2;
  c.dropout = 0.25;
  c.msa.n_blocks = 1;
  c.diffusion.n_blocks = 2;
  c.diffusion.atom_blocks = 2;
  c.diffusion.samples = 4;
  c.confidence.n_blocks = 1;
  c.confidence.rollout_steps = 3;
  c.templates.n_blocks = 1;
  return c;
}

// Two random templates over the batch's tokens (the bundled structures carry no template hits).
void add_random_templates(data::Batch& b) {
  const int64_t B = b.size(), N = b.n_tokens(), T = 2;
  b.template_coords = at::randn({B, T, N, 4, 3}) * 10;
  b.template_mask = (at::rand({B, T, N, 4}) < 0.8).to(at::kFloat);
  b.template_restype = at::randint(0, data::kNumTokenTypes, {B, T, N}, at::kLong);
}

TEST(ModelCuda, TrainingStepGradientsAreBitwiseRepeatable) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  fresh_seed();
  MegaFold m(small_af3());
  {
    // AF3's zero-initialised output layers pass no gradient upstream on a first step; small
    // values, as one optimiser step would give them, let this step reach every module.
    at::NoGradGuard no_grad;
    for (at::Tensor& p : m->parameters())
      if (p.abs().max().item<double>() == 0) p.copy_(at::randn_like(p) * 0.02);
  }
  m->to(at::kCUDA);
  m->train();
  // 1lcd: 51 residues of lac repressor, an 11-bp duplex and a sodium ion (~880 atoms, so
  // every atom sits in up to four overlapping key windows).
  const data::Entry e = data::load_entry(kData + "/1lcd.cif.gz");
  data::Batch cpu = data::make_batch({&e}, {{}}, 0);
  add_random_templates(cpu);
  const data::Batch b = cpu.to(at::kCUDA);
  auto step = [&] {
    m->zero_grad(true);
    torch::manual_seed(3);  // the confidence head's rollout draws from the global generators
    at::Tensor loss;
    {
      const AutocastScope ac(at::kCUDA, true, at::kBFloat16);
      loss = m->loss(b, m->forward(b, 5), 9, /*confidence=*/true).total;
    }
    loss.backward();
    std::map<std::string, at::Tensor> g{{"loss", loss.detach()}};
    for (const auto& p : m->named_parameters()) g[p.key()] = grad_or_zeros(p.value()).clone();
    return g;
  };
  const auto first = step(), second = step();
  int64_t nonzero = 0;
  for (const auto& [name, g] : first) {
    EXPECT_TRUE(at::equal(g, second.at(name))) << name;
    nonzero += g.abs().sum().item<double>() > 0;
  }
  // The step reaches every module: the atom encoder and decoder, the diffusion transformer,
  // the trunk and the confidence head all have gradients.
  EXPECT_GT(nonzero, static_cast<int64_t>(first.size()) * 3 / 4);
}

// A crop without padding runs the Pairformer block without masks: on the kernels (attention in
// its unmasked form, the TriMul projection without a mask row) the same bits as with masks of
// ones, output and every gradient, training mode with dropout under bf16 autocast.
TEST(ModelCuda, BlockWithoutMasksEqualsMasksOfOnesBitwise) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  fresh_seed();
  ModelConfig cfg = small_af3();
  PairformerBlock block(cfg);
  block->to(at::kCUDA);
  block->train();
  const int64_t N = 77;  // tiles past the end in every kernel
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor s0 = at::randn({1, N, cfg.c_s}, f32), z0 = at::randn({1, N, N, cfg.c_z}, f32);
  const at::Tensor ds = at::randn_like(s0), dz = at::randn_like(z0);
  auto run = [&](const at::Tensor& token_mask, const at::Tensor& pair_mask) {
    block->zero_grad(true);
    const at::Tensor s = s0.clone().requires_grad_(), z = z0.clone().requires_grad_();
    std::vector<at::Tensor> r;
    {
      const AutocastScope ac(at::kCUDA, true, at::kBFloat16);
      const PairformerState out = block->forward({s, z}, token_mask, pair_mask, 13);
      torch::autograd::backward({out.s, out.z}, {ds, dz});
      r = {out.s.detach(), out.z.detach()};
    }
    r.push_back(s.grad());
    r.push_back(z.grad());
    for (const at::Tensor& p : block->parameters()) r.push_back(grad_or_zeros(p).clone());
    return r;
  };
  const auto want = run(at::ones({1, N}, f32), at::ones({1, N, N}, f32)), got = run(at::Tensor(), at::Tensor());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "output / gradient " << i;
}

// The template embedder at AF3's widths (its triangle attention and multiplication on their
// CUDA kernels), under bf16 autocast on the GPU, against the same module in float64 on the
// CPU: output and z's gradient within the derived tolerance, the naive low-precision result
// being the GPU's under bf16 autocast with every op on its ATen reference. Templates far from
// the origin, as PDB coordinates are.
TEST(TemplateEmbedderCuda, MatchesItsFloat64ReferenceUnderAutocast) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  fresh_seed();
  ModelConfig cfg;
  cfg.dropout = 0;
  cfg.templates.n_blocks = 2;
  TemplateEmbedder gpu(cfg), ref(cfg), naive(cfg);
  randomise_parameters(*gpu, 0.1);
  copy_state(*gpu, *ref);
  copy_state(*gpu, *naive);
  for (TemplateEmbedder* m : {&gpu, &ref, &naive}) (*m)->eval();
  const data::Entry e = data::load_entry(kData + "/3u8v.cif.gz");
  data::Batch b = data::make_batch({&e}, {{}}, 0);
  add_random_templates(b);
  b.template_coords = b.template_coords + at::tensor({120.f, -80.f, 260.f});
  const int64_t N = b.n_tokens();
  const at::Tensor z = at::randn({1, N, N, cfg.c_z});
  const at::Tensor probe = at::randn({1, N, N, cfg.c_z});
  auto run = [&](TemplateEmbedder& m, const data::Batch& batch, at::Tensor zin, bool autocast, at::DeviceType dev) {
    zin = zin.clone().requires_grad_(true);
    const at::Tensor pm = batch.token_mask.unsqueeze(2) * batch.token_mask.unsqueeze(1);
    at::Tensor out;
    {
      const AutocastScope ac(dev, autocast, at::kBFloat16);
      out = m->forward(batch, zin, pm.to(zin.scalar_type()), 0);
    }
    (out.to(at::kDouble) * probe.to(out.device()).to(at::kDouble)).sum().backward();
    return std::make_pair(out.detach().to(at::kCPU).to(at::kDouble), zin.grad().to(at::kCPU).to(at::kDouble));
  };
  gpu->to(at::kCUDA);
  ref->to(at::kDouble);
  data::Batch b64 = b;
  b64.template_coords = b.template_coords.to(at::kDouble);
  const auto [out, dz] = run(gpu, b.to(at::kCUDA), z.to(at::kCUDA), true, at::kCUDA);
  const auto [out64, dz64] = run(ref, b64, z.to(at::kDouble), false, at::kCPU);
  naive->to(at::kCUDA);
  ops::set_reference_only(true);
  const auto [out_naive, dz_naive] = run(naive, b.to(at::kCUDA), z.to(at::kCUDA), true, at::kCUDA);
  ops::set_reference_only(false);
  expect_within_derived_tolerance(out - z.to(at::kDouble), out_naive - z.to(at::kDouble), out64 - z.to(at::kDouble),
                                  1e-5 * (out64 - z.to(at::kDouble)).abs().max().item<double>(), "template update");
  expect_within_derived_tolerance(dz, dz_naive, dz64, 1e-5 * dz64.abs().max().item<double>(), "dz");
}

}  // namespace
}  // namespace megafold::model
