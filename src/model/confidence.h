#pragma once
// Confidence head, pLDDT part (AF3 SI Alg. 31) and its loss (SI Sec. 4.3.1).
//
// The head sees the trunk's single and pair representations and one predicted structure:
// pair features gain the input features of both tokens and a one-hot of the predicted
// representative-atom distances, a small Pairformer refines both, and a per-atom-slot linear
// layer gives 50-bin lDDT logits for every heavy atom. Gradients stop at all inputs (trunk
// outputs and the structure), as in AF3.
#include <torch/nn/module.h>

#include "data/features.h"
#include "model/config.h"
#include "model/pairformer.h"

namespace megafold::model {

class ConfidenceHeadImpl : public torch::nn::Module {
 public:
  ConfidenceHeadImpl(const ModelConfig& cfg, int64_t c_s_inputs);
  // x_pred [B, N * kMaxAtomsPerToken, 3] -> pLDDT logits [B, N * kMaxAtomsPerToken, bins].
  at::Tensor forward(const data::Batch& batch, const at::Tensor& s_inputs, const at::Tensor& s_trunk,
                     const at::Tensor& z_trunk, const at::Tensor& x_pred, uint64_t dropout_seed);

 private:
  ConfidenceConfig cfg_;
  at::Tensor w_z_i_, w_z_j_, w_dist_;  // pair features from s_inputs and predicted distances
  at::Tensor w_plddt_;                 // w_plddt [kMaxAtomsPerToken, bins, c_s]: one map per slot
  PairformerStack pairformer_{nullptr};
};
TORCH_MODULE(ConfidenceHead);

// The atom in slot[b, i] of every token of x [B, N * kMaxAtomsPerToken, 3] (a batch's rep_slot
// or centre_slot [B, N] int64) -> [B, N, 3].
at::Tensor slot_atoms(const at::Tensor& x, const at::Tensor& slot);

// Expected lDDT x 100 under the binned distribution: [B, A] in [0, 100].
at::Tensor plddt_from_logits(const at::Tensor& logits);

struct PlddtLoss {
  at::Tensor loss;    // scalar: cross-entropy over resolved atoms, mean per example then batch
  at::Tensor target;  // scalar, no grad: mean per-atom lDDT of x_pred (what the head learns)
};

// Cross-entropy of the pLDDT logits [B, A, bins] against the binned per-atom lDDT of x_pred
// to the ground truth, scored against the C-alpha atoms within 15 A (per_atom_lddt).
PlddtLoss plddt_loss(const at::Tensor& logits, const at::Tensor& x_pred, const data::Batch& batch);

}  // namespace megafold::model
