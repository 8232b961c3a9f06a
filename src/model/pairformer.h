#pragma once
// Pairformer stack (AF3 SI Alg. 17).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <cstdint>

#include "model/config.h"
#include "model/layers.h"

namespace megafold::model {

struct PairformerState {
  at::Tensor s;  // [B, N, c_s]
  at::Tensor z;  // [B, N, N, c_z]
};

class PairformerBlockImpl : public torch::nn::Module {
 public:
  explicit PairformerBlockImpl(const ModelConfig& cfg);
  // token_mask [B, N], pair_mask [B, N, N]; dropout masks are drawn from dropout_seed.
  PairformerState forward(const PairformerState& in, const at::Tensor& token_mask,
                          const at::Tensor& pair_mask, uint64_t dropout_seed);

 private:
  double dropout_;
  TriangleMultiplication tri_mul_out_{nullptr}, tri_mul_in_{nullptr};
  TriangleAttention tri_attn_start_{nullptr}, tri_attn_end_{nullptr};
  Transition pair_transition_{nullptr}, single_transition_{nullptr};
  AttentionPairBias single_attention_{nullptr};
};
TORCH_MODULE(PairformerBlock);

class PairformerStackImpl : public torch::nn::Module {
 public:
  explicit PairformerStackImpl(const ModelConfig& cfg);
  PairformerState forward(PairformerState state, const at::Tensor& token_mask,
                          const at::Tensor& pair_mask, uint64_t dropout_seed);

 private:
  bool checkpoint_;
  std::vector<PairformerBlock> blocks_;
};
TORCH_MODULE(PairformerStack);

}  // namespace megafold::model
