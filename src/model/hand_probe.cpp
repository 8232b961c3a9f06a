#include "model/hand_probe.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/atom_attention.h"
#include "model/confidence.h"
#include "model/scoring.h"

namespace megafold::model {

std::vector<HandProbeRow> probe_hand(DiffusionModule& module, const TrunkContext& ctx, const std::vector<double>& noise,
                                     int64_t draws, uint64_t seed) {
  MF_CHECK(draws >= 1, "probe_hand: draws must be >= 1, got ", draws);
  at::NoGradGuard no_grad;
  const data::Batch& b = *ctx.batch;
  const int64_t B = b.size(), N = b.n_tokens(), D = N * data::kMaxAtomsPerToken;
  const auto prep = module->prepare(ctx);
  const auto opts = ctx.s_trunk.options();
  const AtomLayout& layout = *prep.layout;
  const at::Tensor truth = ground_truth_atoms(prep, b).to(opts).repeat_interleave(draws, 0);
  const at::Tensor mirror = truth * at::tensor({-1.0, 1.0, 1.0}, at::TensorOptions().dtype(at::kDouble)).to(opts);
  const at::Tensor centre_mask = (b.centre_mask * b.token_mask).repeat_interleave(draws, 0);
  const at::Tensor truth_centres =
      slot_atoms(b.atom_coords.reshape({B, D, 3}).to(opts), b.centre_slot).repeat_interleave(draws, 0);
  const at::Tensor mask = prep.atom_mask.repeat_interleave(draws, 0);
  const at::Tensor slots = b.centre_slot.repeat_interleave(draws, 0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto fraction_mirrored = [&](const at::Tensor& copies, double t) {
    const at::Tensor x = centre_random_augmentation(copies, mask, gen) +
                         t * at::randn(copies.sizes(), gen, at::TensorOptions().dtype(at::kDouble)).to(opts);
    const at::Tensor denoised = module(x, at::full({B * draws}, t, opts), prep);
    return mirror_images(slot_atoms(layout.to_dense(denoised), slots), truth_centres, centre_mask).mean().item<double>();
  };
  std::vector<HandProbeRow> rows;
  for (const double t : noise) {
    MF_CHECK(t > 0, "probe_hand: noise levels must be > 0, got ", t);
    const double from_truth = fraction_mirrored(truth, t);
    rows.push_back({t, from_truth, fraction_mirrored(mirror, t)});
  }
  return rows;
}

}  // namespace megafold::model
