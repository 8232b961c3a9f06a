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
  // `bins` equal bins over [min, max] (AF2/AF3: edges 2.3125 .. 21.6875 for 64 bins over
  // 2..22 A); the first and last bins are open-ended.
  const double width = (max - min) / static_cast<double>(bins);
  const at::Tensor edges = torch::linspace(min + width, max - width, bins - 1, coords.options());
  // Explicit differences: cdist's matmul form loses ~1e-3 A and can flip bins at edges.
  const at::Tensor d = (coords.unsqueeze(2) - coords.unsqueeze(1)).pow(2).sum(-1).sqrt();
  return (d.unsqueeze(-1) > edges).sum(-1);
}

DistogramMetrics distogram_loss(const at::Tensor& logits, const at::Tensor& coords,
                                const at::Tensor& mask, double min, double max) {
  const int64_t bins = logits.size(-1);
  const at::Tensor target = distogram_bins(coords.to(torch::kFloat), bins, min, max);
  const at::Tensor pair_mask = (mask.unsqueeze(2) * mask.unsqueeze(1)).to(torch::kFloat);
  const at::Tensor log_p = torch::log_softmax(logits.to(torch::kFloat), -1);
  const at::Tensor nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1);  // [B, N, N]
  // Mean over the valid pairs of each example, then over examples (AF2/AF3), so a long crop
  // does not outweigh a short one in a batch.
  const at::Tensor pairs_b = pair_mask.sum({1, 2});                      // [B]
  const at::Tensor has_pairs = (pairs_b > 0).to(torch::kFloat);
  const at::Tensor examples = has_pairs.sum().clamp_min(1.0);
  const at::Tensor loss_b = (nll * pair_mask).sum({1, 2}) / pairs_b.clamp_min(1.0);
  const at::Tensor correct = (log_p.argmax(-1) == target).to(torch::kFloat) * pair_mask;
  DistogramMetrics m;
  m.loss = (loss_b * has_pairs).sum() / examples;
  m.accuracy = (correct.sum({1, 2}) / pairs_b.clamp_min(1.0) * has_pairs).sum().detach() / examples;
  m.pairs = pairs_b.sum().detach();
  return m;
}

}  // namespace megafold::model
