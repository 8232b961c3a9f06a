// `megafold dev shard-check`: verifies on this job's ranks that the row-sharded pair stack
// (dist/shard.h) reproduces the unsharded one: every rank computes the whole stack forward and
// backward on the same random inputs, then its own rows through the sharded path, and compares
// its rows of the output and of the input gradient, and the parameter gradients summed over
// the ranks. float64 on CPU, dropout on. Also reports what each forward leaves allocated for
// backward (heap bytes; the sharded one as a fraction of the unsharded, worst rank). Then the
// same for a whole Pairformer block as the trainer shards it (single track replicated, z in
// through dist::split_rows and out through dist::join_rows): outputs, input gradients, and the
// parameter gradients under the trainer's rule (row_parameters() summed over the ranks, the
// rest as they are). Prints one JSON line (rank 0) and fails above --tol.
// Under torchrun or Slurm the launcher's ranks are used; --nproc N starts N local ones.
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randn_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "cli/local_ranks.h"
#include "core/check.h"
#include "dist/process_group.h"
#include "dist/shard.h"
#include "model/pairformer.h"

namespace megafold::cli {
namespace {

double max_abs(const at::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

// Bytes this process has allocated from the heap (all arenas and mmapped blocks): the
// difference across a forward is what autograd keeps for backward, plus the output.
double heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

// float64, training mode (dropout on), random parameters: fresh modules are the identity (zero
// output projections), so every path acts only once they are randomised.
void randomised_float64(torch::nn::Module& m) {
  m.to(at::kDouble);
  m.train();
  c10::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.copy_(at::randn_like(p) * 0.3);
}

}  // namespace

int shard_check_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"nproc", "P", "local ranks to start (default: the launcher's ranks, or 1)"},
      {"n", "N", "tokens, a multiple of the ranks (default 12 per rank)"},
      {"c-z", "C", "pair channels (default 16)"},
      {"seed", "S", "inputs and parameters (default 0)"},
      {"tol", "T", "largest relative error accepted (default 1e-10)"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("dev shard-check",
                       "Check that the row-sharded pair stack (triangle updates, triangle attention, "
                       "transition) equals the unsharded one on this job's ranks, forward and backward, in "
                       "float64; then a whole Pairformer block as `train --pair-shards` runs it. Prints the "
                       "largest errors as JSON.",
                       specs);
    return 0;
  }
  if (args.has("nproc")) {
    const int64_t n = args.get_int("nproc", 1);
    MF_CHECK(n >= 1 && n <= 64, "--nproc must lie in [1, 64], got ", n);
    return run_local_ranks("dev shard-check", static_cast<int>(n), without_nproc(argv));
  }
  const dist::DistEnv env = dist::dist_env();
  dist::ProcessGroup group(env);
  const int64_t N = args.get_int("n", 12 * env.world), c_z = args.get_int("c-z", 16);
  const double tol = std::stod(args.get("tol").value_or("1e-10"));
  MF_CHECK(N > 0 && c_z > 0, "--n and --c-z must be > 0");
  at::manual_seed(static_cast<uint64_t>(args.get_int("seed", 0)));

  model::ModelConfig cfg;
  cfg.c_z = c_z;
  cfg.tri_mul_hidden = c_z;
  cfg.tri_attn_heads = 2;
  cfg.tri_attn_head_dim = 8;
  cfg.transition_factor = 2;
  cfg.dropout = 0.25;
  model::PairStack stack(cfg);
  randomised_float64(*stack);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor z = at::randn({1, N, N, c_z}, f64);
  at::Tensor mask = (at::rand({1, N, N}, f64) > 0.1).to(at::kDouble);
  mask.narrow(1, N - 1, 1).zero_();  // a padded token
  mask.narrow(2, N - 1, 1).zero_();
  const at::Tensor dz = at::randn({1, N, N, c_z}, f64);
  const uint64_t seed = 7;

  // Unsharded, on every rank.
  const at::Tensor z_full = z.clone().requires_grad_();
  // A first, discarded pass of each path, so one-time allocations (thread pools, generators,
  // communication buffers) are not counted as activations.
  stack->forward(z_full, mask, seed);
  double before = heap_bytes();
  const at::Tensor out_full = stack->forward(z_full, mask, seed);
  const double held_full = heap_bytes() - before;
  torch::autograd::backward({out_full}, {dz});
  std::vector<at::Tensor> param_grads;
  for (auto& p : stack->parameters()) {
    param_grads.push_back(p.grad().clone());
    p.mutable_grad().reset();
  }

  // Sharded: this rank's rows.
  const dist::PairShard shard = dist::make_pair_shard(group, N);
  const at::Tensor z_rows = dist::local_rows(z, shard).clone().requires_grad_();
  stack->forward_rows(z_rows, mask, seed, shard);
  before = heap_bytes();
  const at::Tensor out_rows = stack->forward_rows(z_rows, mask, seed, shard);
  const double held_rows = heap_bytes() - before;
  torch::autograd::backward({out_rows}, {dist::local_rows(dz, shard)});

  auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return max_abs(a - b) / std::max(max_abs(b), 1e-300);
  };
  double err_out = rel(out_rows, dist::local_rows(out_full, shard));
  double err_dz = rel(z_rows.grad(), dist::local_rows(z_full.grad(), shard));
  double err_params = 0;
  size_t i = 0;
  for (auto& p : stack->parameters()) {
    at::Tensor g = p.grad().defined() ? p.grad().clone() : at::zeros_like(p);
    group.all_reduce_sum(g);
    err_params = std::max(err_params, rel(g, param_grads[i++]));
  }
  // A whole Pairformer block as the trainer runs it: z enters the sharded region through
  // split_rows and leaves through join_rows, the single track is replicated with its pair bias
  // joined from the rows; the block's row parameters' gradients are summed over the ranks and
  // every other gradient is compared as it is (it must be the same on every rank).
  cfg.c_s = 24;
  cfg.single_attn_heads = 2;
  cfg.single_attn_head_dim = 8;
  model::PairformerBlock block(cfg);
  randomised_float64(*block);
  const at::Tensor s = at::randn({1, N, cfg.c_s}, f64), ds = at::randn({1, N, cfg.c_s}, f64);
  const at::Tensor token_mask = mask.select(2, 0).clone();  // [1, N]
  const at::Tensor s_full = s.clone().requires_grad_(), z_full2 = z.clone().requires_grad_();
  const model::PairformerState full = block->forward({s_full, z_full2}, token_mask, mask, seed);
  torch::autograd::backward({full.s, full.z}, {ds, dz});
  std::vector<at::Tensor> block_grads;
  for (auto& p : block->parameters()) {
    block_grads.push_back(p.grad().clone());
    p.mutable_grad().reset();
  }
  const at::Tensor s_rep = s.clone().requires_grad_(), z_rep = z.clone().requires_grad_();
  model::PairformerState rows = block->forward({s_rep, dist::split_rows(z_rep, shard)}, token_mask, mask, seed, &shard);
  rows.z = dist::join_rows(rows.z, shard);
  torch::autograd::backward({rows.s, rows.z}, {ds, dz});
  const double err_block_out = std::max(rel(rows.s, full.s), rel(rows.z, full.z));
  const double err_block_inputs = std::max(rel(s_rep.grad(), s_full.grad()), rel(z_rep.grad(), z_full2.grad()));
  std::vector<const void*> row_params;
  for (const at::Tensor& p : block->row_parameters()) row_params.push_back(p.unsafeGetTensorImpl());
  // Each gradient relative to the larger of its own scale and 1e-6 of the block's largest: the
  // pair-bias LayerNorm shift's gradient is zero in exact arithmetic (softmax ignores a constant
  // added to a head's every bias), so its float64 value is rounding noise of ~1e-15.
  double block_scale = 0;
  for (const at::Tensor& g : block_grads) block_scale = std::max(block_scale, max_abs(g));
  double err_block_params = 0;
  i = 0;
  for (auto& p : block->parameters()) {
    at::Tensor g = p.grad().defined() ? p.grad().clone() : at::zeros_like(p);
    if (std::find(row_params.begin(), row_params.end(), p.unsafeGetTensorImpl()) != row_params.end())
      group.all_reduce_sum(g);
    const at::Tensor& ref = block_grads[i++];
    err_block_params = std::max(err_block_params, max_abs(g - ref) / std::max(max_abs(ref), 1e-6 * block_scale));
  }

  // The worst rank decides.
  at::Tensor errs = at::tensor({err_out, err_dz, err_params, held_rows / held_full, err_block_out, err_block_inputs,
                                err_block_params}, f64);
  const std::vector<at::Tensor> all = group.all_gather(errs);
  const at::Tensor worst = at::stack(all).amax(0);
  const bool ok = std::max(worst.narrow(0, 0, 3).max().item<double>(), worst.narrow(0, 4, 3).max().item<double>()) <= tol;
  if (env.rank == 0)
    std::printf("{\"ranks\": %d, \"n\": %lld, \"rows_per_rank\": %lld, \"c_z\": %lld, \"err_out\": %.3e, "
                "\"err_dz\": %.3e, \"err_param_grads\": %.3e, \"held_full_mb\": %.2f, \"held_rows_ratio\": %.3f, "
                "\"err_block_out\": %.3e, \"err_block_input_grads\": %.3e, \"err_block_param_grads\": %.3e, "
                "\"tol\": %.1e, \"ok\": %s}\n",
                env.world, static_cast<long long>(N), static_cast<long long>(shard.rows),
                static_cast<long long>(c_z), worst[0].item<double>(), worst[1].item<double>(),
                worst[2].item<double>(), held_full / 1e6, worst[3].item<double>(), worst[4].item<double>(),
                worst[5].item<double>(), worst[6].item<double>(), tol, ok ? "true" : "false");
  group.barrier();
  return ok ? 0 : 3;
}

}  // namespace megafold::cli
