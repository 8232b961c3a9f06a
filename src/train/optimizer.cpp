#include "train/optimizer.h"

#include <torch/nn/utils/clip_grad.h>

#include <limits>

namespace megafold::train {

torch::optim::AdamWOptions adamw_options(const config::OptimConfig& o) {
  return torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
}

double clip_gradients(const std::vector<at::Tensor>& params, const config::OptimConfig& o) {
  return torch::nn::utils::clip_grad_norm_(
      params, o.clip_grad_norm > 0 ? o.clip_grad_norm : std::numeric_limits<double>::infinity());
}

}  // namespace megafold::train
