// The whole model on a GPU (skipped elsewhere), with the CUDA kernels and bf16 autocast as the
// trainer runs them: a training step on a protein-DNA complex with an ion repeats its gradients
// bit for bit. On a GPU every accumulation must be ordered for this (no floating-point atomics
// in any backward), including the atom layers' overlapping windows.
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <map>
#include <string>

#include "core/autocast.h"
#include "data/features.h"
#include "data/structure.h"
#include "model/model.h"
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
  return c;
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
  const data::Batch b = data::make_batch({&e}, {{}}, 0).to(at::kCUDA);
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

}  // namespace
}  // namespace megafold::model
