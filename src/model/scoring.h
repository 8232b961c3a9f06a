#pragma once
// Scores of predicted structures against a batch's ground truth (validation, `megafold eval`,
// `megafold predict`).
#include <ATen/core/Tensor.h>

#include "data/features.h"

namespace megafold::model {

struct StructureScores {
  at::Tensor lddt_ca;   // [R] lDDT over the polymer tokens' C-alpha / C1' atoms (pairs of different tokens)
  at::Tensor lddt_all;  // [R] lDDT over all resolved heavy atoms (pairs of different tokens; AF3's
                        // inclusion radius: 30 A around nucleotide atoms, 15 A around the others)
  // [R, kNumMolTypes] lDDT of the pairs (l, m) whose first atom l is of each molecule type
  // (protein, RNA, DNA, ligand) against every other resolved atom: the part of lddt_all that
  // concerns that type; NaN for a type the example does not have.
  at::Tensor lddt_by_type;
  // [R, L] per ligand chain (L = the most ligand chains of any example, NaN past an example's
  // own): RMSD in Angstrom of its resolved atoms after superposing the prediction's pocket on
  // the ground truth's (the polymer centre atoms within kPocketRadius of the ligand in the
  // ground truth; all polymer centre atoms when fewer than 3 are that close).
  at::Tensor ligand_rmsd;
  // [R] 1 where the sample is the ground truth's mirror image (mirror_images), else 0.
  at::Tensor mirrored;
};

inline constexpr double kPocketRadius = 10.0;  // Angstrom, as PoseBusters defines a pocket

// Whether each structure is closer to the reflection of its reference than to the reference
// itself, both superposed by proper rotations (weighted_rigid_align): x, ref [R, N, 3] (token
// centre atoms), mask [R, N] -> [R] float 1 / 0; 0 for rows with fewer than 4 masked points.
// lDDT, distance errors and the smooth lDDT loss cannot tell a structure from its mirror image;
// aligned errors (PAE) and the aligned MSE can. A structure far from its reference (an early
// rollout, a collapsed sample) fits both about equally: its flag is then a coin flip, so a
// fraction near 0.5 means "no hand", not "half are mirrored", unless the structures are good.
at::Tensor mirror_images(const at::Tensor& x, const at::Tensor& ref, const at::Tensor& mask);

// Token index of every atom slot of the dense layout, [R, N * kMaxAtomsPerToken] int64: the
// residue ids that lDDT uses to skip pairs within one residue.
at::Tensor atom_token_index(int64_t R, int64_t N, const at::Device& device);

// pred [R, N * kMaxAtomsPerToken, 3] with R = B * samples rows, example-major (as sampled),
// each against the ground truth with its chain copies matched to the sample's (permutation.h);
// scored on the atoms the batch resolves (only those: memory is [R, A_resolved^2], not the
// dense layout's). Float64 arithmetic, no gradients.
StructureScores score_structures(const at::Tensor& pred, const data::Batch& batch);

}  // namespace megafold::model
