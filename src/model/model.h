#pragma once
// The model: input embedding -> Pairformer stack -> distogram head, and, when
// model.diffusion.samples > 0, the diffusion module on the trunk's s and z (AF3 SI Alg. 1 and
// 20; confidence and MSA modules come later).
#include <torch/nn/module.h>

#include "data/features.h"
#include "model/config.h"
#include "model/embedder.h"
#include "model/diffusion_module.h"
#include "model/heads.h"
#include "model/pairformer.h"

namespace megafold::model {

struct TrunkOutput {
  at::Tensor s_inputs;           // [B, N, c_s_inputs] per-token input features
  at::Tensor s;                  // [B, N, c_s]
  at::Tensor z;                  // [B, N, N, c_z]
  at::Tensor distogram_logits;   // [B, N, N, bins]
};

struct Losses {
  at::Tensor total;              // differentiable scalar: distogram + diffusion.weight * diffusion
  at::Tensor distogram;          // scalar
  at::Tensor distogram_accuracy; // scalar, no grad
  at::Tensor diffusion_mse;      // scalar, no grad; undefined without the diffusion module
  at::Tensor smooth_lddt;        // scalar, no grad; undefined without the diffusion module
};

class MegaFoldImpl : public torch::nn::Module {
 public:
  explicit MegaFoldImpl(const ModelConfig& cfg);
  // dropout_seed seeds every dropout mask of this forward (see core/seed.h).
  TrunkOutput forward(const data::Batch& batch, uint64_t dropout_seed);
  // noise_seed seeds the diffusion loss's noise, augmentation and noise levels.
  Losses loss(const data::Batch& batch, const TrunkOutput& out, uint64_t noise_seed);
  bool has_diffusion() const { return !diffusion_.is_empty(); }
  // Structures sampled by the diffusion module (Alg. 18), [B * samples, N * 14, 3]; requires
  // has_diffusion().
  at::Tensor sample(const data::Batch& batch, const TrunkOutput& out, int64_t samples, uint64_t seed);
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  InputEmbedder embedder_{nullptr};
  PairformerStack pairformer_{nullptr};
  DistogramHead distogram_{nullptr};
  DiffusionModule diffusion_{nullptr};
};
TORCH_MODULE(MegaFold);

}  // namespace megafold::model
