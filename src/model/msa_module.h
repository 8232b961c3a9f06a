#pragma once
// MSA module (AF3 SI Alg. 8-10): embeds the MSA rows the loader drew (data/msa_features.h) and
// the per-token inputs, then in each block updates the pair representation with the MSA's
// outer product mean, the MSA with pair-weighted averaging and a transition, and the pair
// representation with the Pairformer's pair stack. The last block skips the MSA updates (its
// MSA would not be read again). The MSA itself is not returned: only z leaves the module.
// With model.checkpoint_blocks each block is recomputed in backward, as the Pairformer's are.
#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

#include "data/features.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/memory_plan.h"
#include "model/pairformer.h"

namespace megafold::model {

// AF3 Alg. 9: z_ij update = Linear(flatten(mean over rows s of a_si (x) b_sj)), the mean over
// rows present at both i and j (msa_mask).
// The outer products are [B, N, N, c^2] (at N = 768 and c = 32 ~1.2 GB in bf16, twice that
// kept for the output projection's backward); with row_chunk < N they exist for row_chunk rows
// i at a time, in forward and again in backward (which recomputes them), and only m is kept.
class OuterProductMeanImpl : public torch::nn::Module {
 public:
  OuterProductMeanImpl(int64_t c_m, int64_t c, int64_t c_z);
  // m [B, S, N, c_m], msa_mask [B, S, N] -> [B, N, N, c_z]; row_chunk: rows i per chunk
  // (0 or >= N: all at once, everything kept for backward).
  at::Tensor forward(const at::Tensor& m, const at::Tensor& msa_mask, int64_t row_chunk = 0);

 private:
  // Rows i of the update from a (those rows, [B, S, n, c]) and b (every row, [B, S, N, c]).
  at::Tensor project(const at::Tensor& a, const at::Tensor& b, const at::Tensor& rows);
  int64_t c_;
  at::Tensor ln_w_, ln_b_, w_ab_, w_o_, b_o_;
};
TORCH_MODULE(OuterProductMean);

// AF3 Alg. 10: every MSA row s at token i averages the values of row s over tokens j, with
// weights softmax_j of a per-head bias from z_ij (keys j restricted to real tokens), gated.
class MsaPairWeightedAveragingImpl : public torch::nn::Module {
 public:
  MsaPairWeightedAveragingImpl(int64_t c_m, int64_t c_z, int64_t heads, int64_t head_dim);
  // m [B, S, N, c_m], z [B, N, N, c_z], token_mask [B, N] -> [B, S, N, c_m]
  at::Tensor forward(const at::Tensor& m, const at::Tensor& z, const at::Tensor& token_mask);

 private:
  int64_t heads_, head_dim_;
  at::Tensor ln_m_w_, ln_m_b_, w_vg_, ln_z_w_, ln_z_b_, w_b_, w_o_;
};
TORCH_MODULE(MsaPairWeightedAveraging);

class MsaBlockImpl : public torch::nn::Module {
 public:
  MsaBlockImpl(const ModelConfig& cfg, bool last);
  // Updates z and (unless last) m in place of the caller's tensors.
  void forward(at::Tensor& m, at::Tensor& z, const at::Tensor& msa_mask, const at::Tensor& token_mask,
               const at::Tensor& pair_mask, uint64_t dropout_seed);

 private:
  double dropout_;
  MemoryPlan plan_;
  OuterProductMean opm_{nullptr};
  MsaPairWeightedAveraging pwa_{nullptr};
  Transition transition_{nullptr};
  PairStack pair_{nullptr};
};
TORCH_MODULE(MsaBlock);

class MsaModuleImpl : public torch::nn::Module {
 public:
  explicit MsaModuleImpl(const ModelConfig& cfg);
  // The batch's MSA (msa, msa_deletion, msa_mask), s_inputs [B, N, s_inputs_width], z [B, N, N, c_z]
  // -> the updated z (in z's dtype). Under the memory plan: blocks recomputed in backward, z rounded to
  // bf16 between blocks, outer product means on row chunks.
  at::Tensor forward(const data::Batch& batch, const at::Tensor& s_inputs, const at::Tensor& z,
                     const at::Tensor& pair_mask, uint64_t dropout_seed);

 private:
  MemoryPlan plan_;
  at::Tensor w_m_, w_s_;
  std::vector<MsaBlock> blocks_;
};
TORCH_MODULE(MsaModule);

}  // namespace megafold::model
