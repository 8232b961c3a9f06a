#pragma once
// Confidence head (AF3 SI Alg. 31) and its losses (SI Sec. 4.3): pLDDT per atom, predicted
// aligned error (PAE) and distance error (PDE) per token pair, experimentally resolved per atom.
//
// The head sees the trunk's single and pair representations and one predicted structure:
// pair features gain the input features of both tokens and a one-hot of the predicted
// representative-atom distances, a small Pairformer refines both, and linear maps give the
// logits: per atom slot of each token from s (pLDDT, resolved), per token pair from z (PAE;
// PDE from z_ij + z_ji). Gradients stop at all inputs (trunk outputs and the structure), as in
// AF3.
#include <torch/nn/module.h>

#include "data/features.h"
#include "model/config.h"
#include "model/pairformer.h"

namespace megafold::model {

struct ConfidenceLogits {
  at::Tensor plddt;     // [B, A, plddt_bins], A = N * kMaxAtomsPerToken
  at::Tensor pae;       // [B, N, N, error_bins]: error of token j's centre atom in token i's frame
  at::Tensor pde;       // [B, N, N, error_bins]: error of the distance between the token centres
  at::Tensor resolved;  // [B, A, 2]: the atom is not / is resolved in the experiment
};

class ConfidenceHeadImpl : public torch::nn::Module {
 public:
  ConfidenceHeadImpl(const ModelConfig& cfg, int64_t c_s_inputs);
  // x_pred [B, N * kMaxAtomsPerToken, 3] -> the logits of every output.
  ConfidenceLogits forward(const data::Batch& batch, const at::Tensor& s_inputs, const at::Tensor& s_trunk,
                           const at::Tensor& z_trunk, const at::Tensor& x_pred, uint64_t dropout_seed);

 private:
  ConfidenceConfig cfg_;
  at::Tensor w_z_i_, w_z_j_, w_dist_;  // pair features from s_inputs and predicted distances
  at::Tensor w_plddt_;                 // [kMaxAtomsPerToken, plddt_bins, c_s]: one map per slot
  at::Tensor w_resolved_;              // [kMaxAtomsPerToken, 2, c_s]
  at::Tensor w_pae_, w_pde_;           // [error_bins, c_z]
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

// Errors of x_pred [B, N * kMaxAtomsPerToken, 3] against the batch's ground truth, per token
// pair, with the pairs that count (float masks, no grad).
struct PairErrors {
  at::Tensor error;  // [B, N, N] Angstrom
  at::Tensor mask;   // [B, N, N]
};
// Aligned error (Alg. 29-30): token j's centre atom expressed in token i's frame (Batch::
// frame_atoms) in the prediction and in the ground truth, and the distance between the two.
// Pairs count where token i's frame atoms and token j's centre atom are resolved.
PairErrors aligned_errors(const at::Tensor& x_pred, const data::Batch& batch);
// Distance error (Sec. 4.3.3): | |x_i - x_j| predicted - |x_i - x_j| true | between token centre
// atoms; pairs count where both centres are resolved.
PairErrors distance_errors(const at::Tensor& x_pred, const data::Batch& batch);

// Cross-entropy of pair logits [B, N, N, bins] against errors binned over [0, max] (the last
// bin open-ended), mean over the counted pairs of each example, then over the examples that
// have any.
at::Tensor pair_error_loss(const at::Tensor& logits, const PairErrors& e, double max);

// Cross-entropy of resolved logits [B, A, 2] against the ground truth's atom mask, over the
// atoms each real token has (ref.mask), mean per example then batch.
at::Tensor resolved_loss(const at::Tensor& logits, const data::Batch& batch);

// Every loss of the head on one predicted structure: L_confidence = L_plddt + L_pde +
// L_resolved + pae_weight * L_pae (SI Sec. 4.3, Eq. 13 of the main text's training loss).
struct ConfidenceLoss {
  at::Tensor total;                     // differentiable scalar
  at::Tensor plddt, pae, pde, resolved;  // scalars, no grad
  at::Tensor plddt_target;              // scalar, no grad: mean per-atom lDDT of x_pred
};
ConfidenceLoss confidence_loss(const ConfidenceLogits& logits, const at::Tensor& x_pred, const data::Batch& batch,
                               const ConfidenceConfig& cfg);

}  // namespace megafold::model
