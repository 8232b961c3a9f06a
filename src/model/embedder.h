#pragma once
// Input embedding (AF3 SI Alg. 1 lines 1-6 without templates, Alg. 2 and Alg. 3): every token
// type, ligand atoms included, through the atom attention encoder's per-token features, the
// MSA profile, relative positions and token bonds.
#include <torch/nn/module.h>

#include "data/features.h"
#include "data/residue_constants.h"
#include "model/atom_attention.h"
#include "model/config.h"

namespace megafold::model {

// Width of s_inputs (AF3 Alg. 2): the atom encoder's per-token features (c_s wide, AF3's 384),
// token type one-hot, MSA profile and deletion mean.
inline int64_t s_inputs_width(const ModelConfig& cfg) { return cfg.c_s + 2 * data::kNumTokenTypes + 1; }

struct Embedding {
  at::Tensor s_inputs;  // [B, N, c_s_inputs]  per-token input features
  at::Tensor s;         // [B, N, c_s]         s_init
  at::Tensor z;         // [B, N, N, c_z]      z_init
};

// AF3 SI Alg. 3. Features: relative residue index within a chain, relative token index
// within a residue (the atoms of a per-atom residue), same-entity flag, relative chain (sym_id)
// index across chains.
class RelativePositionEncodingImpl : public torch::nn::Module {
 public:
  RelativePositionEncodingImpl(int64_t c_z, int64_t r_max, int64_t s_max);
  at::Tensor forward(const data::Batch& batch);  // [B, N, N, c_z]
 private:
  int64_t r_max_, s_max_;
  at::Tensor w_;  // [c_z, 2*(2 r_max + 2) + 1 + (2 s_max + 2)]
};
TORCH_MODULE(RelativePositionEncoding);

class InputEmbedderImpl : public torch::nn::Module {
 public:
  explicit InputEmbedderImpl(const ModelConfig& cfg);
  Embedding forward(const data::Batch& batch);

 private:
  at::Tensor w_s_, w_z_i_, w_z_j_, w_bond_;
  RelativePositionEncoding relpos_{nullptr};
  AtomAttentionEncoder atoms_{nullptr};  // Alg. 2: reference conformers -> per-token features
};
TORCH_MODULE(InputEmbedder);

}  // namespace megafold::model
