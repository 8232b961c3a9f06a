#include "model/model.h"

namespace megafold::model {

MegaFoldImpl::MegaFoldImpl(const ModelConfig& cfg) : cfg_(cfg) {
  embedder_ = register_module("embedder", InputEmbedder(cfg));
  pairformer_ = register_module("pairformer", PairformerStack(cfg));
  distogram_ = register_module("distogram", DistogramHead(cfg));
}

TrunkOutput MegaFoldImpl::forward(const data::Batch& batch, uint64_t dropout_seed) {
  const at::Tensor token_mask = batch.token_mask;                            // [B, N]
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);  // [B, N, N]
  const Embedding emb = embedder_->forward(batch);
  const PairformerState st = pairformer_->forward({emb.s, emb.z}, token_mask, pair_mask, dropout_seed);
  return {st.s, st.z, distogram_->forward(st.z)};
}

Losses MegaFoldImpl::loss(const data::Batch& batch, const TrunkOutput& out) const {
  const DistogramMetrics d = distogram_loss(out.distogram_logits, batch.rep_coords,
                                            batch.rep_mask * batch.token_mask,
                                            cfg_.distogram_min, cfg_.distogram_max);
  return {d.loss, d.loss, d.accuracy};
}

}  // namespace megafold::model
