#pragma once
// The model: input embedding -> recycled (MSA module -> Pairformer stack) -> distogram head,
// and, when model.diffusion.samples > 0, the diffusion module on the trunk's s and z, and, when
// model.confidence.n_blocks > 0, the confidence head on sampled structures (AF3 SI Alg. 1, 8,
// 20 and 31; the template module comes later).
#include <torch/nn/module.h>

#include "data/features.h"
#include "model/config.h"
#include "model/confidence.h"
#include "model/embedder.h"
#include "model/diffusion_module.h"
#include "model/heads.h"
#include "model/msa_module.h"
#include "model/template_embedder.h"
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
  at::Tensor bond;               // scalar, no grad: the bond loss (AF3 Eq. 5); likewise
  at::Tensor plddt;              // scalar, no grad: pLDDT cross-entropy; undefined unless trained this step
  at::Tensor pae, pde, resolved;  // scalars, no grad: the head's other losses; likewise
  at::Tensor plddt_target;       // scalar, no grad: mean per-atom lDDT of the rollout structure
  at::Tensor rollout_mirrored;   // scalar, no grad: the fraction of rollouts that are the ground
                                 // truth's mirror image (scoring.h mirror_images); likewise
};

// Sampled structures and, with a confidence head, their confidences (model/confidence_scores.h).
// Rows are example-major: row b * samples + k. C = the most chains (asym_id + 1) of any example.
struct Prediction {
  at::Tensor coords;           // [B * samples, N * kMaxAtomsPerToken, 3] Angstrom
  at::Tensor contact_probs;    // [B, N, N] P(representative atoms within 8 A), from the distogram
  // Undefined without a confidence head:
  at::Tensor plddt;            // [B * samples, N * kMaxAtomsPerToken] in [0, 100]
  at::Tensor pae;              // [B * samples, N, N] expected aligned error, Angstrom
  at::Tensor ptm, iptm;        // [B * samples] double (ipTM NaN with one chain)
  at::Tensor chain_pair_iptm;  // [B * samples, C, C] double (NaN for chains without tokens)
  at::Tensor has_clash;        // [B * samples] bool
  at::Tensor fraction_disordered;  // [B * samples] double in [0, 1] (NaN: non-finite coordinates)
  at::Tensor ranking_score;    // [B * samples] double (NaN: non-finite coordinates)
};

class MegaFoldImpl : public torch::nn::Module {
 public:
  explicit MegaFoldImpl(const ModelConfig& cfg);
  // dropout_seed seeds every dropout mask of this forward (see core/seed.h). cycles: trunk
  // passes, 0 = the config's recycles; gradients flow through the last pass only.
  // pair_group (optional, every rank of it calling with the same batch): the Pairformer's pair
  // representation is row-sharded over the group (N must split evenly); everything else, and
  // the output, is replicated. Then only row_parameters() get rank-partial gradients.
  TrunkOutput forward(const data::Batch& batch, uint64_t dropout_seed, int64_t cycles = 0,
                      dist::ProcessGroup* pair_group = nullptr);
  std::vector<at::Tensor> row_parameters() const { return pairformer_->row_parameters(); }
  // noise_seed seeds the diffusion loss's noise, augmentation and noise levels, and the
  // confidence rollout. confidence: also train the confidence head on a rollout of this trunk
  // pass; the ground truth's interchangeable chains and symmetric atoms are then matched to the
  // rollout (model/permutation.h) for every loss of the step (AF3 SI Sec. 4.2).
  Losses loss(const data::Batch& batch, const TrunkOutput& out, uint64_t noise_seed, bool confidence = false);
  bool has_diffusion() const { return !diffusion_.is_empty(); }
  bool has_confidence() const { return !confidence_.is_empty(); }
  // Structures sampled by the diffusion module (Alg. 18), [B * samples, N * 14, 3]; requires
  // has_diffusion().
  at::Tensor sample(const data::Batch& batch, const TrunkOutput& out, int64_t samples, uint64_t seed);
  // sample() plus the contact probabilities, and the confidences of every sample when the model
  // has a confidence head.
  Prediction predict(const data::Batch& batch, const TrunkOutput& out, int64_t samples, uint64_t seed);
  const ModelConfig& config() const { return cfg_; }
  // The parts, for the per-module memory profile (`megafold memory`); the optional ones are
  // empty holders when the config leaves them out.
  InputEmbedder& embedder() { return embedder_; }
  TemplateEmbedder& templates() { return templates_; }
  MsaModule& msa() { return msa_; }
  PairformerStack& pairformer() { return pairformer_; }
  DistogramHead& distogram() { return distogram_; }
  DiffusionModule& diffusion() { return diffusion_; }
  ConfidenceHead& confidence() { return confidence_; }

 private:
  ModelConfig cfg_;
  InputEmbedder embedder_{nullptr};
  TemplateEmbedder templates_{nullptr};
  MsaModule msa_{nullptr};
  PairformerStack pairformer_{nullptr};
  DistogramHead distogram_{nullptr};
  DiffusionModule diffusion_{nullptr};
  ConfidenceHead confidence_{nullptr};
  // Recycling (AF3 Alg. 1 lines 9-11): LayerNorm + linear of the previous pass's z and s.
  at::Tensor ln_z_prev_w_, ln_z_prev_b_, w_z_prev_, ln_s_prev_w_, ln_s_prev_b_, w_s_prev_;
};
TORCH_MODULE(MegaFold);

}  // namespace megafold::model
