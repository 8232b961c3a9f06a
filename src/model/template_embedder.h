#pragma once
// Template embedder (AF3 SI Sec. 2.4, Alg. 16): the batch's templates (data/features.h:
// template_restype, template_coords, template_mask) become an update of the pair
// representation before every trunk pass.
//
// Per template slot t: the pair features of template_pair_features() and the one-hot residue
// types of both tokens are projected to c channels and added to a projection of LayerNorm(z);
// a pair-only Pairformer stack (triangle updates, triangle attention, transition: the trunk's
// PairStack and its fused ops, at c channels) refines them; LayerNorm of the result is
// averaged over the example's templates, and ReLU + a linear map (zero at initialisation, so
// a new embedder starts as the identity) takes the mean back to c_z. An example without
// templates gets no update.
//
// Memory kept for backward: the projection of z, N^2 c per example, shared by the templates,
// and ReLU of the templates' mean (N^2 c, for the output map); when the memory plan checkpoints
// blocks, each template's stack is recomputed in backward from the projection, else every
// template's stack keeps its activations (model/layers.h). The embedder runs on the whole pair
// representation on every rank: pair sharding (dist/shard.h) starts at the Pairformer.
#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

#include "data/features.h"
#include "model/config.h"
#include "model/memory_plan.h"
#include "model/pairformer.h"

namespace megafold::model {

// Width of template_pair_features' last dimension: distogram, backbone frame mask, unit vector
// (3), pseudo-beta mask.
inline int64_t template_pair_width(const TemplateConfig& cfg) { return cfg.distogram_bins + 5; }

// AF3 SI Alg. 16 lines 1-4 for template slot t: [B, N, N, template_pair_width], float (double
// for double coordinates).
//  - distogram: one-hot of the pseudo-beta (CB; CA for glycine) distance d_ij, bin k for
//    lower_k < d <= lower_k+1 with lower = distogram_bins edges evenly from distogram_min to
//    distogram_max (the last bin open-ended; below the first edge, no bin: AF2's dgram), times
//    the pseudo-beta mask of the pair;
//  - backbone frame mask of the pair (N, CA and C resolved at both tokens);
//  - unit vector from CA_i to CA_j in the frame of token i (origin CA, axes by Gram-Schmidt from
//    C - CA and N - CA: AF2 Alg. 21), times the pair's backbone frame mask;
//  - pseudo-beta mask of the pair.
// Every feature is zero between tokens of different chains (asym_id): templates are per chain
// (the erratum of Alg. 16, whose multichain mask must test chain equality). Computed in fp32
// by elementwise ops, so autocast does not round the coordinates.
at::Tensor template_pair_features(const data::Batch& batch, int64_t t, const TemplateConfig& cfg);

// Whether each example has template slot t: [B, T] float, 1 where any of the slot's atoms is
// resolved.
at::Tensor templates_present(const data::Batch& batch);

class TemplateEmbedderImpl : public torch::nn::Module {
 public:
  explicit TemplateEmbedderImpl(const ModelConfig& cfg);
  // z [B, N, N, c_z] plus the templates' update (AF3 Alg. 16), in z's dtype; z itself when the
  // batch has no template slots. pair_mask [B, N, N]; the stack's dropout masks are drawn from
  // dropout_seed.
  at::Tensor forward(const data::Batch& batch, const at::Tensor& z, const at::Tensor& pair_mask,
                     uint64_t dropout_seed);

 private:
  // LayerNorm(v) of template slot t after the stack, [B, N, N, c], from zp = the projection of z.
  at::Tensor embed_one(const data::Batch& batch, int64_t t, const at::Tensor& zp, const at::Tensor& pair_mask,
                       uint64_t dropout_seed);
  TemplateConfig cfg_;
  MemoryPlan plan_;
  at::Tensor ln_z_w_, ln_z_b_, w_z_;   // LinearNoBias(LayerNorm(z)), [c, c_z]
  at::Tensor w_a_;                     // pair features, [c, template_pair_width]
  at::Tensor w_restype_i_, w_restype_j_;  // residue types of token i and of token j, [c, 32] each
  std::vector<PairStack> blocks_;
  at::Tensor ln_v_w_, ln_v_b_;         // LayerNorm of each template's result
  at::Tensor w_out_;                   // [c_z, c], zeros at initialisation
};
TORCH_MODULE(TemplateEmbedder);

}  // namespace megafold::model
