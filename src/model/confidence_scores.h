#pragma once
// Scores of a predicted structure from the confidence head's outputs (AF3 SI Sec. 5.9): expected
// PAE and PDE, pTM, ipTM and chain-pair ipTM from the PAE distribution, the clash flag, the
// fraction disordered and the ranking score. Sample by sample; no gradients.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace megafold::data {
struct Batch;
}

namespace megafold::model {

// Expected error under binned logits [..., bins] over [0, max] (bin centres; the last bin,
// which takes every larger error, at its centre too) -> [...] float.
at::Tensor expected_error(const at::Tensor& logits, double max);

// The TM-scores of one structure, from its PAE logits [N, N, bins] over [0, max], the real
// tokens token_mask [N], the tokens with a frame frame_mask [N] (Batch::frame_mask) and their
// chains asym_id [N] (chains numbered 0..C-1):
//   score(T, pairs) = max over i in T with a frame of the mean over j with (i, j) in pairs of
//                     sum_k p_ij(k) / (1 + (e_k / d0(|T|))^2), d0(n) = 1.24 (max(n, 19) - 15)^(1/3) - 1.8
// with e_k the bin centres (SI Eq. 17-19, as AF-Multimer defines them; tokens without a frame,
// such as ions, are aligned on by no row, as in AF3's released code). Computed on the logits'
// device in float32, each chain pair on its own block.
struct TmScores {
  double ptm = 0;              // T = every token, every pair
  double iptm = 0;             // T = every token, pairs of different chains; NaN with one chain
  at::Tensor chain_pair_iptm;  // [C, C] double: T = the tokens of chains c and d, pairs of different
                               // chains (c != d) or of the chain (c == d: the chain's pTM); NaN
                               // for chains without tokens
};
TmScores tm_scores(const at::Tensor& pae_logits, const at::Tensor& token_mask, const at::Tensor& frame_mask,
                   const at::Tensor& asym_id, int64_t chains, double max);

// Clashes between polymer chains (SI Sec. 5.9.2): a heavy atom clashes when an atom of another
// chain lies within 1.1 A. A structure clashes when a chain has more than 100 clashing atoms,
// or more than half of its atoms clash. coords [A, 3] Angstrom; atom_mask [A] the atoms of
// polymer chains to consider (ligands and ions are left out, as in AF3); atom_chain [A].
bool has_clash(const at::Tensor& coords, const at::Tensor& atom_mask, const at::Tensor& atom_chain, int64_t chains);

// AF3's disorder term (SI Sec. 5.9.3; the released code's confidences.fraction_disordered, an
// AlphaFold-RSA predictor, Piovesan et al. 2022): the fraction of protein residues whose
// relative accessible surface area (RASA), averaged over a window of 25 residues of their
// chain, exceeds 0.581. Not weighted by pLDDT. Each protein chain is measured alone, as AF3
// runs DSSP on one chain at a time: other chains, ligands and nucleic acids bury nothing.
// A residue's RASA is its SASA (surface_area.h: Shrake-Rupley, DSSP's 401 dots and atom radii,
// probe 1.4 A) rounded to whole A^2 as DSSP reports it, over its maximum (Sander & Rost),
// capped at 1. Residues without all of N, CA, C and O are left out (DSSP drops them).
inline constexpr double kDisorderRasaCutoff = 0.581;
inline constexpr int64_t kDisorderWindow = 25;

// One structure's atoms grouped into the protein residues the disorder term measures. A atoms
// in the coordinates' order, R residues; the residues of a chain are consecutive, in chain order.
struct ProteinResidues {
  at::Tensor atom_residue;      // [A] int64: the atom's residue in 0..R-1; -1 = left out
  at::Tensor atom_radius;       // [A] double Angstrom (dssp_atom_radius of the atom's name)
  at::Tensor residue_chain;     // [R] int64 chain (asym_id)
  at::Tensor residue_max_area;  // [R] double Angstrom^2 (max_accessible_area of its type)
};

// The protein residues of example b of a batch, over its dense atom slots (A = N *
// kMaxAtomsPerToken, token-major, as MegaFold::sample lays out coordinates): the atoms each
// real protein token has (ref.mask), grouped by ref.space_uid (a standard residue's token, or
// the per-atom tokens of one non-standard residue), named by ref.name_chars.
ProteinResidues protein_residues(const data::Batch& batch, int64_t b);

// Per-residue SASA [R] double, Angstrom^2, of a structure with coordinates coords [A, 3]
// Angstrom (any device; finite where atom_residue >= 0): the sum over the residue's atoms, each
// chain's computed without the other chains.
at::Tensor residue_sasa(const at::Tensor& coords, const ProteinResidues& residues);

// Per-residue RASA [R] double in [0, 1]: residue_sasa rounded to whole A^2, over
// residue_max_area, capped at 1.
at::Tensor residue_rasa(const at::Tensor& coords, const ProteinResidues& residues);

// rasa [R] averaged over a window of `window` (odd) residues centred on each residue, within
// its chain (residue_chain [R], chains in contiguous runs). Near a chain's ends the window is
// filled by mirroring the chain about its end residue (numpy's 'reflect' padding, which AF3
// uses; repeatedly for chains shorter than half the window; a one-residue chain repeats itself).
at::Tensor windowed_rasa(const at::Tensor& rasa, const at::Tensor& residue_chain, int64_t window = kDisorderWindow);

// The fraction of residues with windowed RASA > kDisorderRasaCutoff; 0 without protein residues.
double fraction_disordered(const at::Tensor& coords, const ProteinResidues& residues);

// AF3's ranking score (SI Sec. 5.9.3): 0.8 ipTM + 0.2 pTM + 0.5 fraction_disordered - 100
// has_clash, with pTM standing in for 0.8 ipTM + 0.2 pTM when the structure has one chain.
double ranking_score(const TmScores& tm, double fraction_disordered, bool clash);

// Probability that the representative atoms of two tokens lie within 8 A, from the distogram
// logits [B, N, N, bins] over [min, max] (the bins whose upper edge is at most 8 A) -> [B, N, N].
at::Tensor contact_probabilities(const at::Tensor& distogram_logits, double min, double max);

}  // namespace megafold::model
