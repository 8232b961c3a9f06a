#pragma once
// The hand of a sampled structure, read from its stereocentres against the reference
// conformers, and the reflection of samples that came out as mirror images.
//
// Why: no loss of the denoiser but the aligned MSE sees a reflection, and a denoiser that has
// not learnt the global hand copies whatever hand the noise suggests, so samples are often
// the exact mirror image of a good structure (every residue a D-amino acid). lDDT cannot see
// it; aligned errors can, so the PAE head learns from a mixture. The reference conformers
// (CCD ideal coordinates) carry every residue's true chirality, so a sample whose tetrahedral
// centres mostly have the opposite hand to their conformer's is reflected. AF3's authors
// advise filtering samples by chirality; generators of conformers reflect mirrored ones.
#include <ATen/core/Tensor.h>

#include "data/features.h"

namespace megafold::model {

// Tetrahedral centres within each token's reference conformer: an atom with three or four
// heavy-atom neighbours closer than kBondCutoff (the conformer's bonds), whose first three
// neighbours are not coplanar with it (normalised signed volume of at least kMinVolume), so
// planar sp2 atoms are left out, and none of whose neighbours are two terminal atoms of one
// element (phosphorus with OP1 / OP2, Val CB with CG1 / CG2: only their names tell them apart,
// and deposited structures swap such names). Every such quadruple flips sign under a
// reflection and keeps it under any rotamer change.
struct ChiralCentres {
  at::Tensor atoms;  // [B, K, 4] int64 dense slots token * kMaxAtomsPerToken + slot: centre, 3 neighbours
  at::Tensor sign;   // [B, K] float +1 / -1: the sign of the signed volume in the reference conformer
  at::Tensor mask;   // [B, K] float, 1 = a centre (K = the most of any example)
};

inline constexpr double kBondCutoff = 1.9;  // Angstrom: above every heavy-atom bond, below 1-3 distances
inline constexpr double kMinVolume = 0.25;  // of |(b-a) . ((c-a) x (d-a))| / (|b-a| |c-a| |d-a|)

ChiralCentres chiral_centres(const data::Batch& batch);

// Per row of x [R, N * kMaxAtomsPerToken, 3] (dense layout, R = B * samples example-major as
// sampled): the fraction of its example's centres whose signed volume has the opposite sign to
// the conformer's; NaN for an example without centres (ligand atoms alone: per-atom tokens hold
// one atom of their conformer each).
at::Tensor inverted_fraction(const at::Tensor& x, const ChiralCentres& centres);

// x with every row whose centres are mostly inverted (inverted_fraction > 0.5) reflected
// through the centroid of its atoms (atom_mask [B, N * kMaxAtomsPerToken], 1 where the token
// has the atom: the reference mask), and which rows were ([R] bool).
struct Reflected {
  at::Tensor x;
  at::Tensor reflected;
};
Reflected reflect_mirror_images(const at::Tensor& x, const ChiralCentres& centres, const at::Tensor& atom_mask);

}  // namespace megafold::model
