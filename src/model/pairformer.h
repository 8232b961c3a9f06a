#pragma once
// Pairformer stack (AF3 SI Alg. 17) and its pair-update half, which the MSA module's blocks
// share (Alg. 8 lines 9-13).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <cstdint>
#include <memory>

#include "model/config.h"
#include "model/layers.h"
#include "model/memory_plan.h"
#include "model/offload.h"

namespace megafold::model {

struct PairformerState {
  at::Tensor s;  // [B, N, c_s]
  at::Tensor z;  // [B, N, N, c_z]
};

// Triangle updates, triangle attention and transition of the pair representation, each a
// residual branch with its AF3 dropout; masks are drawn from dropout_seed. The memory plan
// (model/memory_plan.h) decides what each step keeps for backward: under balanced the
// transition runs on row chunks (it keeps only its input anyway), under frontier every step
// keeps only its input and recomputes itself chunk by chunk in backward.
class PairStackImpl : public torch::nn::Module {
 public:
  explicit PairStackImpl(const ModelConfig& cfg);
  at::Tensor forward(const at::Tensor& z, const at::Tensor& pair_mask, uint64_t dropout_seed);  // [B,N,N,c_z]
  // The same result twice (ops::residual_update_forked), for a caller that reads it twice (the
  // Pairformer block: the single attention's pair bias, and the block's output).
  std::tuple<at::Tensor, at::Tensor> forward_forked(const at::Tensor& z, const at::Tensor& pair_mask,
                                                    uint64_t dropout_seed);
  // The same update on this rank's rows of z ([B, n, N, c_z], pair_mask the full [B, N, N]),
  // equal to the unsharded one's rows: row-local ops on the rows, the column-wise ones on the
  // rows of z^T (dist/shard.h). With an unsharded PairShard it runs the same code on all rows.
  at::Tensor forward_rows(const at::Tensor& z, const at::Tensor& pair_mask, uint64_t dropout_seed,
                          const dist::PairShard& shard);

 private:
  // The steps before the transition (forward's, up to its input).
  at::Tensor triangle_steps(const at::Tensor& z, const at::Tensor& pair_mask, uint64_t dropout_seed);
  // z + transition(z), on row chunks when the plan chunks; forked, the result twice.
  at::Tensor transition_step(const at::Tensor& z);
  std::tuple<at::Tensor, at::Tensor> transition_step_forked(const at::Tensor& z);
  // The transition's update on row chunks (it keeps only its input, so the chunks bound its
  // 4c-wide transients without recomputing anything).
  at::Tensor chunked_transition(const at::Tensor& z, int64_t rows);
  double dropout_;
  MemoryPlan plan_;
  TriangleMultiplication tri_mul_out_{nullptr}, tri_mul_in_{nullptr};
  TriangleAttention tri_attn_start_{nullptr}, tri_attn_end_{nullptr};
  Transition transition_{nullptr};
};
TORCH_MODULE(PairStack);

class PairformerBlockImpl : public torch::nn::Module {
 public:
  explicit PairformerBlockImpl(const ModelConfig& cfg);
  // token_mask [B, N], pair_mask [B, N, N], or both undefined when no token is padding (every
  // pair attends; the same result); dropout masks are drawn from dropout_seed.
  // in.z may be bf16 (a rounded block boundary); the block computes in in.s's dtype from it.
  // pair_rows (optional): in.z holds this rank's rows [B, n, N, c_z] and the pair stack runs its
  // row-sharded path (PairStack::forward_rows); the single track stays replicated, its pair bias
  // projected from the rows and joined (AttentionPairBias::forward_rows). On an unsharded
  // PairShard this is the path `megafold dev block --pair-path rows` times against the plain one.
  PairformerState forward(const PairformerState& in, const at::Tensor& token_mask,
                          const at::Tensor& pair_mask, uint64_t dropout_seed,
                          const dist::PairShard* pair_rows = nullptr);
  // The parameters applied to rows of z: under pair sharding each rank holds its share of
  // their gradient (the rest are the same on every rank).
  std::vector<at::Tensor> row_parameters() const;

 private:
  PairStack pair_{nullptr};
  Transition single_transition_{nullptr};
  AttentionPairBias single_attention_{nullptr};
};
TORCH_MODULE(PairformerBlock);

// The blocks in sequence under the model's memory plan: each block recomputed in backward from
// its input when the plan checkpoints, z rounded to bf16 at every block boundary (the stack's
// input and output included) when it says so, and the checkpointed inputs held in host memory
// when it offloads (offload_inputs; the trunk's stack, not the confidence head's four blocks).
// Kept for backward per checkpointed block: its input, N^2 c_z x 4 bytes (fp32) or x 2 (bf16),
// on the GPU or the host; otherwise every op's activations (model/layers.h).
class PairformerStackImpl : public torch::nn::Module {
 public:
  explicit PairformerStackImpl(const ModelConfig& cfg, bool offload_inputs = true);
  // pair_rows: as for PairformerBlock::forward (state.z this rank's rows). Returns z in the
  // dtype it came in.
  PairformerState forward(PairformerState state, const at::Tensor& token_mask,
                          const at::Tensor& pair_mask, uint64_t dropout_seed,
                          const dist::PairShard* pair_rows = nullptr);
  std::vector<at::Tensor> row_parameters() const;
  const MemoryPlan& plan() const { return plan_; }
  // The host copies of block inputs (null when the plan does not offload).
  HostStash* stash() { return stash_.get(); }

 private:
  MemoryPlan plan_;
  std::shared_ptr<HostStash> stash_;
  std::vector<PairformerBlock> blocks_;
};
TORCH_MODULE(PairformerStack);

}  // namespace megafold::model
