#pragma once
// Crops of long entries for training (AF-Multimer SI Sec. 7.2, AF3 SI Sec. 2.7): contiguous,
// spatial and spatial-interface, mixed with configurable weights. Every crop is a pure
// function of the entry and a seed: the same sample gets the same tokens for any number of
// loader threads, after a resume, and on every rank.
#include <cstdint>
#include <vector>

#include "data/structure.h"

namespace megafold::data {

// Every crop keeps a per-atom residue (ligand, ion, non-standard residue) whole or leaves it
// out (unless every one of the entry's residues is larger than the crop: then the nearest
// tokens); distances are between token centre atoms (CA, C1', the atom of a per-atom token).
// A crop is never empty.

// Token indices (sorted) of a contiguous crop of at most crop_size tokens
// (AF-Multimer SI Alg. 1: chains in random order, each gets a random contiguous span within
// the budget left; a ligand cut by a span's edge is left out). Returns all tokens when the
// entry fits. Deterministic in `seed`.
std::vector<int32_t> contiguous_crop(const Entry& e, int crop_size, uint64_t seed);

// The chains a spatial crop centres on: the training unit that AF3's weighted PDB sampling drew
// (a chain, or an interface of two chains; data/sampling.h), since the crop's reference atom
// comes from the chosen chain or interface (AF3 SI Sec. 2.7.2). Asym ids; chain_a = -1 is no
// focus (any chain, the crop of an entry drawn as a whole), chain_b = -1 a single chain.
struct CropFocus {
  int32_t chain_a = -1, chain_b = -1;
  bool none() const { return chain_a < 0; }
  bool operator==(const CropFocus&) const = default;
};

// Spatial crop (AF-Multimer SI Alg. 2, AF3 SI Sec. 2.7.2): the tokens nearest, by centre-atom
// distance, to a random token with a resolved centre atom, up to crop_size (a per-atom residue
// that no longer fits is passed over); tokens without a centre atom are taken last. With
// `interface` (Alg. 3) the centre is drawn among interface tokens (a centre atom of another
// chain within 15 A); an entry without an interface falls back to a plain spatial crop. Ties
// in distance go to the lower token index. Sorted indices; all tokens when the entry fits.
// A focus narrows the centres to the drawn unit's tokens with a resolved centre atom:
//  - an interface (a, b), either crop: tokens of a within 15 A of b's and of b within 15 A of
//    a's (centre atoms); when none are, any token of a or b;
//  - a chain, spatial crop: any token of it; interface crop: its tokens within 15 A of another
//    chain's, else any token of it.
// Focused chains without a resolved centre atom leave the centres as without focus. A focus on a
// chain the entry does not have throws megafold::Error naming the entry (when the crop has to
// cut the entry).
std::vector<int32_t> spatial_crop(const Entry& e, int crop_size, uint64_t seed, bool interface,
                                  const CropFocus& focus = {});

// Whether a resolved centre atom of another chain lies within `radius` of each token's.
std::vector<bool> interface_tokens(const Entry& e, double radius = 15.0);

struct CropWeights {  // AF3: 0.2 / 0.4 / 0.4 (AF3 SI Table 4 for most sets)
  double contiguous = 0.2, spatial = 0.4, spatial_interface = 0.4;
};

// One of the three crops, chosen with `weights` (not necessarily normalised) from the seed. The
// focus applies to the spatial crops only: the contiguous crop (AF-Multimer SI Alg. 1) draws its
// spans over all chains, as AF3 uses it.
std::vector<int32_t> training_crop(const Entry& e, int crop_size, const CropWeights& weights, uint64_t seed,
                                   const CropFocus& focus = {});

}  // namespace megafold::data
