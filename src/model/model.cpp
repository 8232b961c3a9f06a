#include "model/model.h"

#include "core/check.h"
#include "data/residue_constants.h"

namespace megafold::model {

MegaFoldImpl::MegaFoldImpl(const ModelConfig& cfg) : cfg_(cfg) {
  embedder_ = register_module("embedder", InputEmbedder(cfg));
  pairformer_ = register_module("pairformer", PairformerStack(cfg));
  distogram_ = register_module("distogram", DistogramHead(cfg));
  if (cfg.diffusion.samples > 0)
    diffusion_ = register_module("diffusion", DiffusionModule(cfg.diffusion, cfg, data::kNumTokenTypes));
}

TrunkOutput MegaFoldImpl::forward(const data::Batch& batch, uint64_t dropout_seed) {
  const at::Tensor token_mask = batch.token_mask;                            // [B, N]
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);  // [B, N, N]
  const Embedding emb = embedder_->forward(batch);
  const PairformerState st = pairformer_->forward({emb.s, emb.z}, token_mask, pair_mask, dropout_seed);
  return {emb.s_inputs, st.s, st.z, distogram_->forward(st.z)};
}

Losses MegaFoldImpl::loss(const data::Batch& batch, const TrunkOutput& out, uint64_t noise_seed) {
  const DistogramMetrics d = distogram_loss(out.distogram_logits, batch.rep_coords,
                                            batch.rep_mask * batch.token_mask,
                                            cfg_.distogram_min, cfg_.distogram_max);
  Losses l{d.loss, d.loss, d.accuracy, {}, {}};
  if (!has_diffusion()) return l;
  const TrunkContext ctx{&batch, out.s_inputs, out.s, out.z};
  const DiffusionLoss dl = diffusion_loss(diffusion_, ctx, cfg_.diffusion.samples, noise_seed);
  l.total = l.total + cfg_.diffusion.weight * dl.total;
  l.diffusion_mse = dl.mse;
  l.smooth_lddt = dl.smooth_lddt;
  return l;
}

at::Tensor MegaFoldImpl::sample(const data::Batch& batch, const TrunkOutput& out, int64_t samples, uint64_t seed) {
  MF_CHECK(has_diffusion(), "sample: this model has no diffusion module (model.diffusion.samples is 0)");
  const TrunkContext ctx{&batch, out.s_inputs, out.s, out.z};
  SamplerConfig sc;
  sc.steps = cfg_.diffusion.sampler_steps;
  return sample_structures(diffusion_, ctx, samples, sc, seed);
}

}  // namespace megafold::model
