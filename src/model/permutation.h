#pragma once
// Chain permutation of the ground truth (AF3 SI Sec. 4.2): the copies of a chain are
// interchangeable, so before a prediction is scored or trained against the ground truth, the
// ground truth's copies are matched to the predicted ones.
//
// Interchangeable: chains of one entity whose tokens in the batch are the same residues, row by
// row (restype and residue_index; a crop that kept different parts of two copies leaves them
// apart). Per example, on token centre atoms (CA, C1', a ligand's atoms):
//   1. anchor: a ground-truth polymer chain (a ligand only when no polymer chain qualifies) of the
//      class with the fewest copies (a chain without copies if there is one), the one with the
//      most resolved centres (at least 3);
//   2. for every predicted chain the anchor could be, superpose the whole ground truth by the
//      anchor onto it, then let every other predicted chain, in order, take the unassigned copy
//      of its class whose superposed centroid is nearest;
//   3. keep the assignment with the lowest RMSD over all resolved centres.
// Then symmetric atoms within residues (AF2's renaming swaps: ASP OD1/OD2, GLU OE1/OE2, PHE and
// TYR CD1/CD2 with CE1/CE2): a residue takes its swapped naming where that brings the distances
// from its symmetric atoms to every other resolved atom closer to the predicted ones. Last, the
// atoms of each ligand residue: among the automorphisms of its bond graph (element and bonds
// kept; at most kMaxAutomorphisms enumerated), the one whose distances (within the ligand and
// to every other resolved atom) come closest to the predicted ones.
#include <ATen/core/Tensor.h>

#include "data/features.h"

namespace megafold::model {

// Row permutation [B, N] int64 of the ground truth's tokens that matches x_pred [B, N *
// kMaxAtomsPerToken, 3] (one structure per example): ground-truth row perm[b][i] belongs at row
// i. The identity for examples without interchangeable chains.
at::Tensor chain_permutation(const at::Tensor& x_pred, const data::Batch& batch);

// The batch's ground truth with symmetric residue atoms renamed to match x_pred (same layout):
// atom_coords and atom_mask swapped within the residues whose swapped naming fits better.
data::Batch rename_symmetric_atoms(const at::Tensor& x_pred, const data::Batch& batch);

// The most automorphisms of one ligand's bond graph that are compared (AF3 caps them too):
// enough for every phosphate, carboxylate and ring flip of a drug-like molecule.
inline constexpr int kMaxAutomorphisms = 1000;

// The batch's ground truth with each ligand residue's atoms permuted by the automorphism of its
// bond graph (Batch::token_bonds, ref.element) that fits x_pred best (see above).
data::Batch permute_ligand_atoms(const at::Tensor& x_pred, const data::Batch& batch);

// The batch with its ground truth (atom_coords, atom_mask, rep_coords, rep_mask, centre_mask) permuted by
// chain_permutation(x_pred, batch), then its symmetric atoms renamed (rename_symmetric_atoms,
// permute_ligand_atoms); every other field is the batch's.
data::Batch permute_ground_truth(const at::Tensor& x_pred, const data::Batch& batch);

}  // namespace megafold::model
