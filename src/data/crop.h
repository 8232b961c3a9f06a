#pragma once
// Crops of long entries for training (AF-Multimer SI Sec. 7.2, AF3 SI Sec. 2.7): contiguous,
// spatial and spatial-interface, mixed with configurable weights. Every crop is a pure
// function of the entry and a seed: the same sample gets the same tokens for any number of
// loader threads, after a resume, and on every rank.
#include <cstdint>
#include <vector>

#include "data/structure.h"

namespace megafold::data {

// Token indices (sorted) of a contiguous crop of at most crop_size tokens
// (AF-Multimer SI Alg. 1: chains in random order, each gets a random contiguous span within
// the budget left). Returns all tokens when the entry fits. Deterministic in `seed`.
std::vector<int32_t> contiguous_crop(const Entry& e, int crop_size, uint64_t seed);

// Spatial crop (AF-Multimer SI Alg. 2): the crop_size tokens nearest, by C-alpha distance, to a
// random token with a resolved C-alpha; tokens without one are taken last. With `interface`
// (Alg. 3) the centre is drawn among interface tokens (a C-alpha of another chain within
// 15 A); an entry without an interface falls back to a plain spatial crop. Ties in distance
// go to the lower token index. Sorted indices; all tokens when the entry fits.
std::vector<int32_t> spatial_crop(const Entry& e, int crop_size, uint64_t seed, bool interface);

// The resolved C-alpha tokens of another chain within `radius` of each token's C-alpha.
std::vector<bool> interface_tokens(const Entry& e, double radius = 15.0);

struct CropWeights {  // AF3: 0.2 / 0.4 / 0.4 (AF3 SI Table 4 for most sets)
  double contiguous = 0.2, spatial = 0.4, spatial_interface = 0.4;
};

// One of the three crops, chosen with `weights` (not necessarily normalised) from the seed.
std::vector<int32_t> training_crop(const Entry& e, int crop_size, const CropWeights& weights, uint64_t seed);

}  // namespace megafold::data
