#include "model/heads.h"

#include <torch/nn/functional/activation.h>

#include "model/layers.h"

namespace megafold::model {

DistogramHeadImpl::DistogramHeadImpl(const ModelConfig& cfg) {
  w_ = register_parameter("w", torch::zeros({cfg.distogram_bins, cfg.c_z}));
  b_ = register_parameter("b", torch::zeros({cfg.distogram_bins}));
}

at::Tensor DistogramHeadImpl::forward(const at::Tensor& z) {
  // Symmetrise so that logits_ij == logits_ji.
  return torch::linear(z + z.transpose(1, 2), w_, b_);
}

at::Tensor distogram_bins(const at::Tensor& coords, int64_t bins, double min, double max) {
  const at::Tensor boundaries = torch::linspace(min, max, bins - 1, coords.options());
  const at::Tensor d = torch::cdist(coords, coords);  // [B, N, N]
  return (d.unsqueeze(-1) > boundaries).sum(-1);
}

DistogramMetrics distogram_loss(const at::Tensor& logits, const at::Tensor& coords,
                                const at::Tensor& mask, double min, double max) {
  const int64_t bins = logits.size(-1);
  const at::Tensor target = distogram_bins(coords.to(torch::kFloat), bins, min, max);
  const at::Tensor pair_mask = (mask.unsqueeze(2) * mask.unsqueeze(1)).to(torch::kFloat);
  const at::Tensor log_p = torch::log_softmax(logits.to(torch::kFloat), -1);
  const at::Tensor nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1);  // [B, N, N]
  const at::Tensor pairs = pair_mask.sum();
  const at::Tensor denom = pairs.clamp_min(1.0);
  DistogramMetrics m;
  m.loss = (nll * pair_mask).sum() / denom;
  m.accuracy = ((log_p.argmax(-1) == target).to(torch::kFloat) * pair_mask).sum().detach() / denom;
  m.pairs = pairs.detach();
  return m;
}

}  // namespace megafold::model
