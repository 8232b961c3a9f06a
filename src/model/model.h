#pragma once
// The trunk model: input embedding -> Pairformer stack -> distogram head.
// Diffusion, confidence and MSA modules attach to TrunkOutput (s, z) in later issues.
#include <torch/nn/module.h>

#include "data/features.h"
#include "model/config.h"
#include "model/embedder.h"
#include "model/heads.h"
#include "model/pairformer.h"

namespace megafold::model {

struct TrunkOutput {
  at::Tensor s;                  // [B, N, c_s]
  at::Tensor z;                  // [B, N, N, c_z]
  at::Tensor distogram_logits;   // [B, N, N, bins]
};

struct Losses {
  at::Tensor total;              // differentiable scalar
  at::Tensor distogram;          // scalar
  at::Tensor distogram_accuracy; // scalar, no grad
};

class MegaFoldImpl : public torch::nn::Module {
 public:
  explicit MegaFoldImpl(const ModelConfig& cfg);
  // dropout_seed seeds every dropout mask of this forward (see core/seed.h).
  TrunkOutput forward(const data::Batch& batch, uint64_t dropout_seed);
  Losses loss(const data::Batch& batch, const TrunkOutput& out) const;
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  InputEmbedder embedder_{nullptr};
  PairformerStack pairformer_{nullptr};
  DistogramHead distogram_{nullptr};
};
TORCH_MODULE(MegaFold);

}  // namespace megafold::model
