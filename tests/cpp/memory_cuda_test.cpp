// Memory modes on a GPU (skipped elsewhere), with the CUDA kernels and bf16 autocast as the
// trainer runs them: pinned-host offload round trips while the allocator reuses the device
// memory, an offloaded trunk trains bitwise as one that keeps its block inputs, and the
// frontier pair stack stays within the derived tolerance of the plain one.
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "core/autocast.h"
#include "model/memory_plan.h"
#include "model/offload.h"
#include "model/pairformer.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;


TEST(MemoryCuda, OffloadSurvivesTheAllocatorReusingDeviceMemory) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  fresh_seed();
  HostStash stash;
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  std::vector<at::Tensor> want;
  std::vector<std::shared_ptr<OffloadedTensor>> held;
  for (int64_t slot = 0; slot < 4; ++slot) {
    at::Tensor t = at::randn({3, 257, 129}, opts);
    want.push_back(t.to(at::kCPU));
    held.push_back(stash.put(slot, t));
    // The copy out is queued on the side stream; new tensors of the same size may take t's
    // memory only after it, whatever is written to them now.
    t = at::Tensor();
    at::randn({3, 257, 129}, opts).fill_(7.0);
  }
  EXPECT_EQ(stash.offloaded(), 4);
  held[2]->prefetch();
  for (int64_t slot = 3; slot >= 0; --slot) {
    at::randn({3, 257, 129}, opts).fill_(-3.0);
    EXPECT_TRUE(at::equal(held[slot]->get().to(at::kCPU), want[slot])) << "slot " << slot;
  }
}

ModelConfig af3_trunk(const std::string& memory, int64_t blocks) {
  ModelConfig c;  // AF3 widths: every op takes its CUDA kernels
  c.n_blocks = blocks;
  c.memory = memory;
  c.dropout = 0.25;
  return c;
}

// Four checkpointed blocks with their inputs on the host (copied out and prefetched back on the
// side stream) give the losses and gradients of the same blocks keeping their inputs, bitwise.
TEST(MemoryCuda, OffloadedTrunkTrainsBitwiseAsOneThatKeepsItsInputs) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  fresh_seed();
  ModelConfig kept_cfg = af3_trunk("balanced", 4);
  kept_cfg.memory_offload = false;
  PairformerStack kept(kept_cfg), offloaded(af3_trunk("balanced", 4));
  randomise_parameters(*kept, 0.05);
  kept->to(at::kCUDA);
  offloaded->to(at::kCUDA);
  copy_state(*kept, *offloaded);
  const int64_t N = 67;
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor s0 = at::randn({1, N, 384}, f32), z0 = at::randn({1, N, N, 128}, f32);
  at::Tensor token_mask = at::ones({1, N}, f32);
  token_mask.narrow(1, N - 3, 3).zero_();
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);
  auto run = [&](PairformerStack& stack) {
    stack->zero_grad(true);
    const at::Tensor z = z0.clone().requires_grad_();
    at::Tensor loss;
    {
      const AutocastScope ac(at::kCUDA, true, at::kBFloat16);
      const PairformerState out = stack->forward({s0, z}, token_mask, pair_mask, 11);
      loss = out.z.square().mean() + out.s.square().mean();
    }
    loss.backward();
    std::vector<at::Tensor> r{loss.detach(), z.grad()};
    for (const at::Tensor& p : stack->parameters()) r.push_back(grad_or_zeros(p).clone());
    return r;
  };
  const auto want = run(kept), got = run(offloaded);
  EXPECT_EQ(offloaded->stash()->offloaded(), 3);  // every block input but the last one's
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "tensor " << i;
}

// The frontier pair stack (each op recomputed on row chunks) and the plain one on the GPU
// under autocast, against the plain stack in float64 on the CPU: output and input gradient
// within the derived tolerance (2x the plain bf16 stack's error). No dropout: the CPU and GPU
// generators would draw different masks.
TEST(MemoryCuda, FrontierPairStackWithinTheDerivedToleranceOfThePlainOne) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  fresh_seed();
  ModelConfig fast = af3_trunk("fast", 1), frontier = af3_trunk("frontier", 1);
  fast.dropout = frontier.dropout = 0;
  frontier.memory_chunk_pairs = 37 * 10;  // 10 rows per chunk of 37
  PairStack ref(fast);
  randomise_parameters(*ref, 0.05);
  PairStack plain(fast), chunked(frontier);
  copy_state(*ref, *plain);
  copy_state(*ref, *chunked);
  ref->to(at::kDouble);
  plain->to(at::kCUDA);
  chunked->to(at::kCUDA);
  const int64_t N = 37;
  const at::Tensor z0 = at::randn({1, N, N, 128}, at::kDouble), w = at::randn({1, N, N, 128}, at::kDouble);
  at::Tensor mask = at::ones({1, N}, at::kDouble);
  mask.narrow(1, N - 4, 4).zero_();
  const at::Tensor pair_mask = mask.unsqueeze(2) * mask.unsqueeze(1);
  auto run = [&](PairStack& stack, const at::Device& dev, bool autocast) {
    const at::Tensor z = z0.to(dev, autocast ? at::kFloat : at::kDouble).detach().requires_grad_();
    at::Tensor out;
    {
      const AutocastScope ac(at::kCUDA, autocast, at::kBFloat16);
      out = stack->forward(z, pair_mask.to(z.options()), 5);
    }
    (out * w.to(out.options())).sum().backward();
    return std::vector<at::Tensor>{out.detach().to(at::kCPU, at::kDouble), z.grad().to(at::kCPU, at::kDouble)};
  };
  const auto r64 = run(ref, at::kCPU, false), naive = run(plain, at::kCUDA, true), got = run(chunked, at::kCUDA, true);
  expect_within_derived_tolerance(got[0], naive[0], r64[0], 1e-5 * r64[0].abs().max().item<double>(), "output");
  expect_within_derived_tolerance(got[1], naive[1], r64[1], 1e-5 * r64[1].abs().max().item<double>(), "dz");
}

}  // namespace
}  // namespace megafold::model
