#pragma once
// Scores of a predicted structure from the confidence head's outputs (AF3 SI Sec. 5.9): expected
// PAE and PDE, pTM, ipTM and chain-pair ipTM from the PAE distribution, the clash flag and the
// ranking score. Sample by sample; no gradients.
#include <ATen/core/Tensor.h>

#include <cstdint>

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

// AF3's ranking score without its disorder term: 0.8 ipTM + 0.2 pTM - 100 has_clash, with pTM
// standing in for ipTM when the structure has one chain.
double ranking_score(const TmScores& tm, bool clash);

// Probability that the representative atoms of two tokens lie within 8 A, from the distogram
// logits [B, N, N, bins] over [min, max] (the bins whose upper edge is at most 8 A) -> [B, N, N].
at::Tensor contact_probabilities(const at::Tensor& distogram_logits, double min, double max);

}  // namespace megafold::model
