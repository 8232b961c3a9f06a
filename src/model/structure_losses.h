#pragma once
// Structure losses and the lDDT metric on atom coordinates (AF3 SI Sec. 4.2 and 5.9).
// Coordinates are [B, A, 3] in Angstrom, A atoms per example in any fixed layout (the
// dense [n_token * kMaxAtomsPerToken] layout of data::Batch flattened, or one atom per token
// for C-alpha scores); mask [B, A] is 1 for atoms that exist in both structures.
#include <ATen/core/Tensor.h>

namespace megafold::model {

// AF3 SI Alg. 28: the rigid motion (rotation, never a reflection, and translation) that best
// superposes `x` onto `target` in the weighted least-squares sense, applied to `x`.
// weights [B, A] >= 0 (0 ignores an atom, e.g. a masked one). Returns the moved x [B, A, 3],
// detached: AF3 stops gradients through the alignment. The 3x3 SVD runs in float64.
at::Tensor weighted_rigid_align(const at::Tensor& x, const at::Tensor& target, const at::Tensor& weights);

// AF3 SI Eq. 2-3: the ground truth is aligned onto the prediction with weights w * mask, then
// L = 1/3 * mean over masked atoms of w * |pred - gt_aligned|^2. Returns [B], one loss per
// example. weights [B, A] (AF3: 1 + 5 for DNA/RNA + 10 for ligand atoms; 1 for protein).
// Invariant to a rigid motion of either structure.
at::Tensor aligned_mse_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& weights,
                            const at::Tensor& mask);

// AF3 SI Alg. 27: 1 - smooth lDDT per example ([B]). Pairs l != m of masked atoms whose
// true distance is below l's radius (AF3: 30 A for nucleotide atoms, 15 A for the others)
// score 1/4 * sum_{t in 0.5, 1, 2, 4} sigmoid(t - |d_pred - d_true|). A perfect prediction
// gives 1 - 0.8041 = 0.1959, not 0 (the sigmoids never reach 1). radius: [B, A] per atom, or
// one value for all.
at::Tensor smooth_lddt_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& mask,
                            double radius = 15.0);
at::Tensor smooth_lddt_loss(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& mask,
                            const at::Tensor& radius);

// AF3's per-atom weights and lDDT radii from the tokens' molecule types (mol_type [B, N]
// int64, data::MolType), repeated over each token's kMaxAtomsPerToken slots: weights 1 + 5 for
// DNA/RNA + 10 for ligand atoms (SI Eq. 2), radius 30 A for nucleotide atoms and 15 A for the
// others (SI Alg. 27). Both [B, N * kMaxAtomsPerToken] float.
at::Tensor atom_loss_weights(const at::Tensor& mol_type);
at::Tensor atom_lddt_radius(const at::Tensor& mol_type);

struct Lddt {
  at::Tensor score;  // [B] global lDDT in [0, 1]; 0 for an example without any scored pair
                     // ([B, A] per atom for per_atom_lddt)
  at::Tensor pairs;  // [B] number of scored (ordered) pairs ([B, A] per atom)
};

// lDDT (Mariani et al. 2013), global form: over ordered pairs l != m of masked atoms in
// different residues (residue [B, A] int64: pairs within one residue are not scored; pass
// a distinct id per atom to score every pair, as for C-alpha lDDT) whose reference distance
// is below `radius`, the mean of the fraction of thresholds 0.5, 1, 2, 4 A that
// |d_pred - d_ref| stays under. No stereochemistry checks. Not differentiable.
Lddt lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
          double radius = 15.0);

// Per-atom lDDT, the target of the pLDDT head (AF3 SI Sec. 4.3.1): for each masked atom l of
// (pred, ref) [B, A, 3], the lDDT above over the pairs (l, m) with m a masked atom of a second
// set (set_* [B, M, 3] and [B, M]: the C-alpha atoms for proteins) in another residue and
// within `radius` of l in the reference. Memory is [B, A, M], not [B, A, A]. score and pairs
// are [B, A]; an atom without pairs scores 0.
Lddt per_atom_lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
                   const at::Tensor& set_pred, const at::Tensor& set_ref, const at::Tensor& set_mask,
                   const at::Tensor& set_residue, double radius = 15.0);
// The same with a radius per atom l, [B, A] (atom_lddt_radius: 30 A for nucleotide atoms).
Lddt per_atom_lddt(const at::Tensor& pred, const at::Tensor& ref, const at::Tensor& mask, const at::Tensor& residue,
                   const at::Tensor& set_pred, const at::Tensor& set_ref, const at::Tensor& set_mask,
                   const at::Tensor& set_residue, const at::Tensor& radius);

}  // namespace megafold::model
