#include "model/pairformer.h"

#include <torch/nn/modules/container/any.h>

#include <string>

#include "core/check.h"
#include "core/seed.h"
#include "model/dropout.h"
#include "model/recompute.h"
#include "ops/residual_update/residual_update.h"

namespace megafold::model {

PairStackImpl::PairStackImpl(const ModelConfig& cfg) : dropout_(cfg.dropout), plan_(memory_plan(cfg)) {
  tri_mul_out_ = register_module("tri_mul_out", TriangleMultiplication(cfg.c_z, cfg.tri_mul_hidden, true));
  tri_mul_in_ = register_module("tri_mul_in", TriangleMultiplication(cfg.c_z, cfg.tri_mul_hidden, false));
  tri_attn_start_ = register_module(
      "tri_attn_start", TriangleAttention(cfg.c_z, cfg.tri_attn_heads, cfg.tri_attn_head_dim, true));
  tri_attn_end_ = register_module(
      "tri_attn_end", TriangleAttention(cfg.c_z, cfg.tri_attn_heads, cfg.tri_attn_head_dim, false));
  transition_ = register_module("transition", Transition(cfg.c_z, cfg.transition_factor));
}

at::Tensor PairStackImpl::forward(const at::Tensor& z_in, const at::Tensor& pair_mask, uint64_t dropout_seed) {
  return transition_step(triangle_steps(z_in, pair_mask, dropout_seed));
}

std::tuple<at::Tensor, at::Tensor> PairStackImpl::forward_forked(const at::Tensor& z_in, const at::Tensor& pair_mask,
                                                                 uint64_t dropout_seed) {
  return transition_step_forked(triangle_steps(z_in, pair_mask, dropout_seed));
}

at::Tensor PairStackImpl::triangle_steps(const at::Tensor& z_in, const at::Tensor& pair_mask, uint64_t dropout_seed) {
  const bool train = is_training();
  auto drop = [&](const at::Tensor& z, DropoutAxis axis, uint64_t site) {
    return dropout_scale(z, dropout_, axis, train, mix_seed(dropout_seed, site));
  };
  // AF3 SI Alg. 17 lines 2-6; each residual add applies its dropout in the same pass.
  at::Tensor z = z_in;
  if (plan_.recompute_ops && train && at::GradMode::is_enabled()) {
    // Each step keeps only its input (and the TriMul operands): recomputed per chunk in backward.
    const int64_t rows = plan_.chunk_rows(z.size(1));
    z = tri_mul_out_->forward_chunked(z, pair_mask, drop(z, DropoutAxis::kRowwise, 0), rows);
    z = tri_mul_in_->forward_chunked(z, pair_mask, drop(z, DropoutAxis::kRowwise, 1), rows);
    z = tri_attn_start_->forward_chunked(z, pair_mask, drop(z, DropoutAxis::kRowwise, 2), rows);
    return tri_attn_end_->forward_chunked(z, pair_mask, drop(z, DropoutAxis::kColumnwise, 3), rows);
  }
  z = tri_mul_out_->forward(z, pair_mask, drop(z, DropoutAxis::kRowwise, 0));
  // Each triangle attention reads z twice (its projection and its residual step): the step
  // before it returns z twice, and its backward adds the two gradients in its own pass.
  auto [z_op, z_res] = tri_mul_in_->forward_forked(z, pair_mask, drop(z, DropoutAxis::kRowwise, 1));
  std::tie(z_op, z_res) = ops::residual_update_forked(z_res, tri_attn_start_->forward(z_op, pair_mask), std::nullopt,
                                                      drop(z_op, DropoutAxis::kRowwise, 2));
  return ops::residual_update(z_res, tri_attn_end_->forward(z_op, pair_mask), std::nullopt,
                              drop(z_op, DropoutAxis::kColumnwise, 3));
}

at::Tensor PairStackImpl::transition_step(const at::Tensor& z) {
  const int64_t n = z.size(1), rows = plan_.chunk_rows(n);
  // The residual add as one pass each way (its backward hands the transition its gradient in
  // the transition's dtype directly, and z's two gradients meet in the transition's backward).
  if (rows >= n) return transition_->residual_step(z);
  return ops::residual_update(z, chunked_transition(z, rows), std::nullopt, std::nullopt);
}

std::tuple<at::Tensor, at::Tensor> PairStackImpl::transition_step_forked(const at::Tensor& z) {
  const int64_t n = z.size(1), rows = plan_.chunk_rows(n);
  if (rows >= n) return transition_->residual_step_forked(z);
  return ops::residual_update_forked(z, chunked_transition(z, rows), std::nullopt, std::nullopt);
}

at::Tensor PairStackImpl::chunked_transition(const at::Tensor& z, int64_t rows) {
  const int64_t n = z.size(1);
  std::vector<at::Tensor> updates;
  for (int64_t start = 0; start < n; start += rows)
    updates.push_back(transition_->forward(z.narrow(1, start, std::min(rows, n - start))));
  return at::cat(updates, 1);
}

at::Tensor PairStackImpl::forward_rows(const at::Tensor& z_in, const at::Tensor& pair_mask, uint64_t dropout_seed,
                                       const dist::PairShard& shard) {
  const bool train = is_training();
  const int64_t N = z_in.size(2);
  auto drop = [&](const at::Tensor& z, DropoutAxis axis, uint64_t site) {
    return dropout_scale(z, dropout_, axis, train, mix_seed(dropout_seed, site), N, shard.offset());
  };
  const at::Tensor rows_mask = dist::local_rows(pair_mask, shard);
  // AF3 SI Alg. 17 lines 2-6, as in forward()
  at::Tensor z = z_in;
  z = tri_mul_out_->forward_rows(z, pair_mask, shard, drop(z, DropoutAxis::kRowwise, 0));
  z = tri_mul_in_->forward_rows(z, pair_mask, shard, drop(z, DropoutAxis::kRowwise, 1));
  z = ops::residual_update(z, tri_attn_start_->forward_rows(z, rows_mask, shard), std::nullopt,
                           drop(z, DropoutAxis::kRowwise, 2));
  // Ending node: the starting-node form on the rows of z^T, transposed back.
  const at::Tensor end_t = tri_attn_end_->forward_rows(dist::transpose_shards(z, shard),
                                                       dist::local_rows_transposed(pair_mask, shard), shard);
  z = ops::residual_update(z, dist::transpose_shards(end_t, shard), std::nullopt, drop(z, DropoutAxis::kColumnwise, 3));
  return transition_step(z);
}

PairformerBlockImpl::PairformerBlockImpl(const ModelConfig& cfg) {
  pair_ = register_module("pair", PairStack(cfg));
  single_attention_ = register_module(
      "single_attention",
      AttentionPairBias(cfg.c_s, cfg.c_z, cfg.single_attn_heads, cfg.single_attn_head_dim));
  single_transition_ =
      register_module("single_transition", Transition(cfg.c_s, cfg.transition_factor));
}

PairformerState PairformerBlockImpl::forward(const PairformerState& in,
                                             const at::Tensor& token_mask,
                                             const at::Tensor& pair_mask, uint64_t dropout_seed,
                                             const dist::PairShard* pair_rows) {
  // AF3 SI Alg. 17, from a bf16 block boundary in the single track's (the model's) precision.
  const at::Tensor z_in = in.z.scalar_type() == at::kBFloat16 ? in.z.to(in.s.scalar_type()) : in.z;
  // Unsharded, the pair stack's result comes twice (the block's output, and a view of it that
  // the single attention's pair bias reads): their gradients meet in its last residual step's
  // pass. The output is the base tensor (a custom Function's view may never be modified in
  // place; the base may, as far as the pair bias's saved input allows).
  at::Tensor z, z_bias;
  if (pair_rows) z = z_bias = pair_->forward_rows(z_in, pair_mask, dropout_seed, *pair_rows);
  else std::tie(z, z_bias) = pair_->forward_forked(z_in, pair_mask, dropout_seed);
  at::Tensor s = in.s;
  s = s + (pair_rows != nullptr && pair_rows->sharded()
               ? single_attention_->forward_rows(s, z_bias, token_mask, *pair_rows)
               : single_attention_->forward(s, z_bias, token_mask));
  s = s + single_transition_->forward(s);
  return {s, z};
}

std::vector<at::Tensor> PairformerBlockImpl::row_parameters() const {
  std::vector<at::Tensor> p = pair_->parameters();
  for (const at::Tensor& t : single_attention_->pair_parameters()) p.push_back(t);
  return p;
}

PairformerStackImpl::PairformerStackImpl(const ModelConfig& cfg, bool offload_inputs) : plan_(memory_plan(cfg)) {
  if (plan_.offload && offload_inputs) stash_ = std::make_shared<HostStash>();
  for (int64_t i = 0; i < cfg.n_blocks; ++i)
    blocks_.push_back(register_module("block_" + std::to_string(i), PairformerBlock(cfg)));
}

PairformerState PairformerStackImpl::forward(PairformerState state, const at::Tensor& token_mask,
                                             const at::Tensor& pair_mask, uint64_t dropout_seed,
                                             const dist::PairShard* pair_rows) {
  // The block boundary: where z is rounded, identically in forward, recomputation and inference.
  auto boundary = [&](const at::Tensor& z) { return plan_.bf16_boundary ? z.to(at::kBFloat16) : z; };
  // Recomputation only pays when gradients are needed.
  const bool checkpoint = plan_.checkpoint_blocks && is_training() && at::GradMode::is_enabled();
  std::shared_ptr<OffloadedTensor> previous;  // the last block's input handle: the next backward's
  const at::ScalarType dtype = state.z.scalar_type();
  state.z = boundary(state.z);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const uint64_t seed = mix_seed(dropout_seed, i);
    if (checkpoint) {
      SavedInputs saved;
      // The last block's input is needed first in backward, where its copy back could not
      // overlap anything: it stays. Every other input goes to the host, and each backward
      // starts bringing back the input of the block before it.
      if (stash_) {
        saved.prefetch = previous;
        if (i + 1 < blocks_.size()) {
          saved.offloaded = {nullptr, stash_->put(static_cast<int64_t>(i), state.z.contiguous())};
          previous = saved.offloaded[1];
        }
      }
      state = checkpointed_block(*blocks_[i], state, token_mask, pair_mask, seed, pair_rows, saved);
    } else {
      state = blocks_[i]->forward(state, token_mask, pair_mask, seed, pair_rows);
    }
    state.z = boundary(state.z);
  }
  state.z = state.z.to(dtype);
  return state;
}

std::vector<at::Tensor> PairformerStackImpl::row_parameters() const {
  std::vector<at::Tensor> p;
  for (const auto& b : blocks_)
    for (const at::Tensor& t : b->row_parameters()) p.push_back(t);
  return p;
}

}  // namespace megafold::model
