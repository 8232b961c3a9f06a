#pragma once
// How the denoiser treats a structure's hand (a diagnostic: `megafold dev hand-probe`). lDDT
// cannot tell a structure from its mirror image, so a model can score well while sampling
// mirror images; this asks the denoiser directly, noise level by noise level.
#include <cstdint>
#include <vector>

#include "model/diffusion_module.h"

namespace megafold::model {

struct HandProbeRow {
  double t;            // noise level, Angstrom
  double from_truth;   // fraction of denoised copies of the ground truth that are its mirror image
  double from_mirror;  // the same for denoised copies of the ground truth's mirror image
};

// For each noise level t: `draws` copies per example of the ground truth (its unresolved atoms
// at the resolved atoms' centroid, as in training) and as many of its reflection, each centred
// and randomly rotated (AF3 Alg. 19) plus t N(0, I), denoised once by `module` on the trunk
// pass `ctx`; then whether each denoised structure is the ground truth's mirror image
// (scoring.h mirror_images on the token centre atoms). A denoiser that knows the hand gives 0
// for both inputs wherever its output is a structure at all; one that keeps its input's hand
// gives 0 and 1. Deterministic in `seed`.
std::vector<HandProbeRow> probe_hand(DiffusionModule& module, const TrunkContext& ctx, const std::vector<double>& noise,
                                     int64_t draws, uint64_t seed);

}  // namespace megafold::model
