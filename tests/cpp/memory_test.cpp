// Memory modes: the plan each mode names, host offload round trips, the row-chunked
// checkpoint against the whole function, checkpointed blocks against direct ones (bitwise), the
// chunked pair stack against the plain one, the modes' losses and gradients against each
// other, and what each mode keeps for backward (CPU tensor bytes, core/memory.h).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/check.h"
#include "core/memory.h"
#include "data/features.h"
#include "data/structure.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/offload.h"
#include "model/recompute.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

const c10::Device kCpu(c10::kCPU);

ModelConfig small_trunk(const std::string& memory) {
  ModelConfig c;
  c.c_s = 12, c.c_z = 8, c.n_blocks = 2;
  c.tri_attn_heads = 2, c.tri_attn_head_dim = 4, c.tri_mul_hidden = 6;
  c.single_attn_heads = 2, c.single_attn_head_dim = 6;
  c.dropout = 0.25;
  c.msa.n_blocks = 1, c.msa.c_m = 8, c.msa.opm_hidden = 3, c.msa.heads = 2, c.msa.head_dim = 4;
  c.memory = memory;
  c.memory_chunk_pairs = 40;  // a few rows per chunk at these crops, not dividing them
  return c;
}


TEST(MemoryPlan, EachModeTurnsOnItsParts) {
  ModelConfig cfg;
  cfg.memory = "fast";
  MemoryPlan p = memory_plan(cfg);
  EXPECT_FALSE(p.checkpoint_blocks || p.bf16_boundary || p.offload || p.recompute_ops);
  EXPECT_EQ(p.chunk_pairs, 0);
  EXPECT_EQ(p.chunk_rows(1536), 1536);
  cfg.checkpoint_blocks = true;  // fast keeps what the config says
  EXPECT_TRUE(memory_plan(cfg).checkpoint_blocks);
  cfg.checkpoint_blocks = false;
  cfg.memory = "balanced";
  p = memory_plan(cfg);
  EXPECT_TRUE(p.checkpoint_blocks && p.bf16_boundary && p.offload);
  EXPECT_FALSE(p.recompute_ops);
  EXPECT_EQ(p.chunk_rows(1024), 1024);  // 2^21 pairs: one chunk at 1024 tokens
  EXPECT_EQ(p.chunk_rows(3072), 682);
  cfg.memory = "frontier";
  cfg.memory_offload = false;
  cfg.memory_chunk_pairs = 1000;
  p = memory_plan(cfg);
  EXPECT_TRUE(p.recompute_ops && !p.offload);
  EXPECT_EQ(p.chunk_rows(37), 27);
  EXPECT_EQ(p.chunk_rows(5000), 1);
  EXPECT_NE(p.describe().find("frontier"), std::string::npos);
  cfg.memory = "fastest";
  try {
    memory_plan(cfg);
    FAIL() << "an unknown mode was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fastest'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fast, balanced or frontier"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, DiffusionChunkFollowsTheCropOutsideFastMode) {
  ModelConfig cfg;
  cfg.diffusion.samples = 48;
  cfg.diffusion.sample_chunk = 8;
  EXPECT_EQ(diffusion_sample_chunk(cfg, 1536), 8);  // fast: as configured
  cfg.memory = "balanced";
  EXPECT_EQ(diffusion_sample_chunk(cfg, 768), 16);
  EXPECT_EQ(diffusion_sample_chunk(cfg, 1536), 8);
  EXPECT_EQ(diffusion_sample_chunk(cfg, 64), 48);  // never more than the samples
  EXPECT_EQ(diffusion_sample_chunk(cfg, 100000), 1);
}

TEST(HostStash, RoundTripsBitwiseOutsideTheTensorAllocator) {
  fresh_seed();
  track_cpu_allocations();
  HostStash stash;
  at::Tensor t = at::randn({37, 5, 3}).to(at::kBFloat16);
  const at::Tensor want = t.clone();
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  auto h = stash.put(0, t);
  ASSERT_TRUE(h->on_host());
  EXPECT_EQ(stash.host_bytes(), bytes);
  EXPECT_EQ(stash.offloaded(), 1);
  const int64_t before = memory_stats(kCpu).allocated;
  t = at::Tensor();  // the stash holds the only copy now, outside the tensor allocator
  EXPECT_EQ(memory_stats(kCpu).allocated, before - bytes);
  const at::Tensor back = h->get();
  EXPECT_TRUE(at::equal(back, want));
  EXPECT_EQ(back.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(h->get(), want));  // a second backward finds it again
  // The next step reuses the slot's buffer; a tensor still waiting for its backward (a second
  // graph alive) keeps its own.
  h.reset();
  const at::Tensor second = at::randn({37, 5, 3}).to(at::kBFloat16), third = at::randn({37, 5, 3}).to(at::kBFloat16);
  auto h2 = stash.put(0, second);
  EXPECT_EQ(stash.host_bytes(), bytes);
  auto h3 = stash.put(0, third);
  EXPECT_TRUE(at::equal(h2->get(), second));
  EXPECT_TRUE(at::equal(h3->get(), third));
  EXPECT_THROW(stash.put(1, at::randn({4, 6}).t()), Error);  // not contiguous
}

// A row-local function of two chunked inputs, a shared one and a captured parameter, with a
// second output: chunks of 5 rows out of 37 give the whole function's outputs and gradients,
// and keep only the inputs for backward.
TEST(ChunkedCheckpoint, MatchesTheWholeFunctionAndKeepsOnlyItsInputs) {
  fresh_seed();
  track_cpu_allocations();
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor p = at::randn({4}, f64).requires_grad_();
  const at::Tensor row_id = at::arange(37, f64).view({1, 37, 1, 1});
  auto fn = [&](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>& shared, int64_t start) {
    const int64_t n = x[0].size(1);
    const at::Tensor h = at::tanh(at::matmul(x[0], shared[0])) * x[1] + p * row_id.narrow(1, start, n);
    return std::vector<at::Tensor>{h, h.square().sum(-1) + x[0].sum(-1)};
  };
  const at::Tensor x = at::randn({2, 37, 11, 6}, f64).requires_grad_(), y = at::randn({2, 37, 11, 4}, f64).requires_grad_();
  const at::Tensor w = at::randn({6, 4}, f64).requires_grad_();
  const at::Tensor g0 = at::randn({2, 37, 11, 4}, f64), g1 = at::randn({2, 37, 11}, f64);
  auto grads = [&](const std::vector<at::Tensor>& out) {
    for (const at::Tensor& t : {x, y, w, p}) t.mutable_grad() = at::Tensor();
    torch::autograd::backward({out[0], out[1]}, {g0, g1});
    return std::vector<at::Tensor>{x.grad().clone(), y.grad().clone(), w.grad().clone(), p.grad().clone()};
  };
  const int64_t base = memory_stats(kCpu).allocated;
  const std::vector<at::Tensor> whole = fn({x, y}, {w}, 0);
  const int64_t whole_held = memory_stats(kCpu).allocated - base;
  const std::vector<at::Tensor> want = grads(whole);
  const int64_t base2 = memory_stats(kCpu).allocated;
  const std::vector<at::Tensor> chunked = chunked_checkpoint(fn, {x, y}, {w}, 1, 5);
  const int64_t chunked_held = memory_stats(kCpu).allocated - base2;
  ASSERT_EQ(chunked.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_LT(rel_error(chunked[k], whole[k]), 1e-14) << "output " << k;
  const std::vector<at::Tensor> got = grads(chunked);
  for (size_t k = 0; k < got.size(); ++k) EXPECT_LT(rel_error(got[k], want[k]), 1e-12) << "gradient " << k;
  // The whole function keeps an activation for backward (tanh's output) beside its outputs;
  // the chunked one its outputs only (its inputs were allocated before).
  const int64_t outputs = static_cast<int64_t>(whole[0].nbytes() + whole[1].nbytes());
  EXPECT_LE(chunked_held, outputs);
  EXPECT_GE(whole_held, outputs + static_cast<int64_t>(whole[0].nbytes()));
  EXPECT_THROW(chunked_checkpoint(fn, {x, y.narrow(1, 0, 36)}, {w}, 1, 5), Error);
}

struct BlockRun {
  at::Tensor s, z;                 // outputs
  std::vector<at::Tensor> grads;   // of s_in, z_in and every parameter
};

// A checkpointed block (recomputed in backward, its bf16 input saved or held on the host)
// gives the direct block's outputs and gradients bitwise: the recomputation repeats the
// forward exactly (same dropout masks, same input bits).
TEST(MemoryModes, CheckpointedBlockReproducesTheForwardBitwise) {
  fresh_seed();
  ModelConfig cfg = small_trunk("balanced");
  PairformerBlock block(cfg);
  randomise_parameters(*block);
  block->train();
  const int64_t N = 13;
  const at::Tensor s0 = at::randn({1, N, cfg.c_s}), z0 = at::randn({1, N, N, cfg.c_z}).to(at::kBFloat16);
  at::Tensor token_mask = at::ones({1, N});
  token_mask.narrow(1, N - 2, 2).zero_();
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);
  const at::Tensor ws = at::randn({1, N, cfg.c_s}), wz = at::randn({1, N, N, cfg.c_z});
  HostStash stash;
  auto run = [&](int how) {
    const at::Tensor s = s0.clone().requires_grad_(), z = z0.clone().requires_grad_();
    block->zero_grad(true);
    PairformerState out;
    if (how == 0) {
      out = block->forward({s, z}, token_mask, pair_mask, 7);
    } else {
      SavedInputs saved;
      if (how == 2) saved.offloaded = {nullptr, stash.put(0, z.detach())};
      out = checkpointed_block(*block, {s, z}, token_mask, pair_mask, 7, nullptr, saved);
    }
    ((out.s * ws).sum() + (out.z * wz).sum()).backward();
    BlockRun r{out.s.detach(), out.z.detach(), {s.grad(), z.grad()}};
    for (const at::Tensor& p : block->parameters()) r.grads.push_back(grad_or_zeros(p).clone());
    return r;
  };
  const BlockRun direct = run(0), saved = run(1), offloaded = run(2);
  for (const BlockRun* r : {&saved, &offloaded}) {
    EXPECT_TRUE(at::equal(r->s, direct.s));
    EXPECT_TRUE(at::equal(r->z, direct.z));
    ASSERT_EQ(r->grads.size(), direct.grads.size());
    for (size_t i = 0; i < direct.grads.size(); ++i) EXPECT_TRUE(at::equal(r->grads[i], direct.grads[i])) << i;
  }
  EXPECT_EQ(direct.grads[1].scalar_type(), at::kBFloat16);  // the boundary's gradient, in its dtype
}

// The frontier pair stack (each op recomputed on chunks of 3 rows, 13 tokens, two of them
// padding) and the balanced one (chunked transition) against the plain one, in float64 with
// dropout: only the order of some sums differs.
TEST(MemoryModes, ChunkedPairStacksMatchThePlainOne) {
  fresh_seed();
  const int64_t N = 13;
  PairStack plain(small_trunk("fast"));
  randomise_parameters(*plain);
  plain->to(at::kDouble);
  at::Tensor token_mask = at::ones({1, N}, at::kDouble);
  token_mask.narrow(1, N - 2, 2).zero_();
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);
  const at::Tensor z0 = at::randn({1, N, N, 8}, at::kDouble), w = at::randn({1, N, N, 8}, at::kDouble);
  auto run = [&](PairStack& stack) {
    const at::Tensor z = z0.clone().requires_grad_();
    stack->zero_grad(true);
    const at::Tensor out = stack->forward(z, pair_mask, 3);
    (out * w).sum().backward();
    std::vector<at::Tensor> r{out.detach(), z.grad()};
    for (const at::Tensor& p : stack->parameters()) r.push_back(grad_or_zeros(p).clone());
    return r;
  };
  const auto want = run(plain);
  for (const char* mode : {"balanced", "frontier"}) {
    PairStack chunked(small_trunk(mode));
    chunked->to(at::kDouble);
    copy_state(*plain, *chunked);
    const auto got = run(chunked);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(rel_error(got[0], want[0]), 1e-13) << mode << " output";
    for (size_t i = 1; i < want.size(); ++i) EXPECT_LT(rel_error(got[i], want[i]), 1e-11) << mode << " gradient " << i;
  }
}

// Without masks (a crop without padding) every form of the pair stack computes what it computes
// with masks of ones, bit for bit: plain, chunked (balanced, frontier), and on its row path.
TEST(MemoryModes, PairStacksWithoutMasksEqualAllOnesMasks) {
  fresh_seed();
  const int64_t N = 11;
  const at::Tensor ones = at::ones({1, N, N}, at::kDouble);
  const at::Tensor z0 = at::randn({1, N, N, 8}, at::kDouble), w = at::randn({1, N, N, 8}, at::kDouble);
  for (const char* mode : {"fast", "balanced", "frontier"}) {
    PairStack stack(small_trunk(mode));
    randomise_parameters(*stack);
    stack->to(at::kDouble);
    auto run = [&](const at::Tensor& pair_mask, bool rows) {
      const at::Tensor z = z0.clone().requires_grad_();
      stack->zero_grad(true);
      const at::Tensor out =
          rows ? stack->forward_rows(z, pair_mask, 5, dist::PairShard{}) : stack->forward(z, pair_mask, 5);
      (out * w).sum().backward();
      std::vector<at::Tensor> r{out.detach(), z.grad()};
      for (const at::Tensor& p : stack->parameters()) r.push_back(grad_or_zeros(p).clone());
      return r;
    };
    for (bool rows : {false, true}) {
      const auto want = run(ones, rows), got = run(at::Tensor(), rows);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(at::equal(got[i], want[i])) << mode << (rows ? " rows" : " plain") << ", output / gradient " << i;
    }
  }
}

// 21 tokens of ubiquitin padded to 24, its float features in float64 for a float64 model.
data::Batch small_batch() {
  const data::Entry e = data::load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1ubi.pdb.gz");
  std::vector<int32_t> sel(21);
  std::iota(sel.begin(), sel.end(), 0);
  data::Batch b = data::make_batch({&e}, {sel}, 24);
  for (at::Tensor* t : b.tensors())
    if (t->is_floating_point()) *t = t->to(at::kDouble);
  return b;
}

struct StepRun {
  double loss = 0;
  std::vector<at::Tensor> grads;
  int64_t held = 0;  // CPU tensor bytes left by the forward (kept for backward)
};

StepRun whole_model_step(MegaFold& m, const data::Batch& b) {
  StepRun r;
  m->zero_grad(true);
  const int64_t base = memory_stats(kCpu).allocated;
  const at::Tensor loss = m->loss(b, m->forward(b, 9), 4, /*confidence=*/true).total;
  r.held = memory_stats(kCpu).allocated - base;
  r.loss = loss.item<double>();
  loss.backward();
  for (const at::Tensor& p : m->parameters()) r.grads.push_back(grad_or_zeros(p).clone());
  return r;
}

// The whole model (MSA module, two recycled trunk blocks, distogram, diffusion module, pLDDT
// head) under each mode, in
// float64 so that rounding of the chunked sums is far below what is compared:
// - balanced with host offload equals balanced without it bitwise (same arithmetic, the
//   inputs only travel);
// - frontier equals balanced to float64 rounding (chunked sums);
// - fast differs from balanced by the bf16 rounding of z at the block boundaries: less than
//   one bf16 unit (2^-8) of the loss.
// And the forward keeps less for backward from fast to balanced to frontier.
TEST(MemoryModes, WholeModelLossAndGradientsFollowTheMode) {
  fresh_seed();
  track_cpu_allocations();
  const data::Batch b = small_batch();
  ModelConfig base = small_trunk("fast");
  base.recycles = 2;
  DiffusionConfig& d = base.diffusion;  // and the diffusion module and pLDDT head, tiny
  d.c_token = 12, d.n_blocks = 2, d.heads = 2, d.fourier_dim = 8, d.c_atom = 8, d.c_atompair = 4;
  d.atom_blocks = 1, d.atom_heads = 2, d.samples = 3, d.sample_chunk = 2, d.sampler_steps = 3;
  base.confidence.n_blocks = 1;
  base.confidence.rollout_steps = 2;
  MegaFold fast(base);
  randomise_parameters(*fast);
  fast->to(at::kDouble);
  std::map<std::string, StepRun> runs;
  for (const char* mode : {"fast", "balanced", "balanced-no-offload", "frontier"}) {
    ModelConfig cfg = base;
    cfg.memory = std::string(mode).substr(0, std::string(mode).find('-'));
    cfg.memory_offload = std::string(mode) != "balanced-no-offload";
    MegaFold m(cfg);
    m->to(at::kDouble);
    copy_state(*fast, *m);
    runs[mode] = whole_model_step(m, b);
  }
  const StepRun &f = runs["fast"], &bal = runs["balanced"], &kept = runs["balanced-no-offload"], &fr = runs["frontier"];
  EXPECT_EQ(bal.loss, kept.loss);
  for (size_t i = 0; i < bal.grads.size(); ++i) EXPECT_TRUE(at::equal(bal.grads[i], kept.grads[i])) << i;
  EXPECT_NEAR(fr.loss, bal.loss, 1e-13 * std::abs(bal.loss));
  // Some gradients are zero in exact arithmetic (a LayerNorm bias seen only through a shift of
  // softmax logits, as in the single attention's pair bias): float64 noise of ~1e-18 there,
  // compared against the largest gradient of the model instead of against themselves.
  double largest = 0.0;
  for (const at::Tensor& g : bal.grads) largest = std::max(largest, g.abs().max().item<double>());
  for (size_t i = 0; i < bal.grads.size(); ++i) {
    const double diff = (fr.grads[i] - bal.grads[i]).abs().max().item<double>();
    if (diff > 1e-12 * largest) {
      EXPECT_LT(rel_error(fr.grads[i], bal.grads[i]), 1e-9) << i;
    }
  }
  EXPECT_NE(f.loss, bal.loss);
  EXPECT_LT(std::abs(f.loss - bal.loss), std::ldexp(std::abs(f.loss), -8));
  EXPECT_LT(bal.held, f.held);
  EXPECT_LT(kept.held, f.held);
  EXPECT_LT(bal.held, kept.held);  // the block inputs went to the host
}

}  // namespace
}  // namespace megafold::model
