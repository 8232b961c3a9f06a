#include "train/ema.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>

namespace megafold::train {

Ema::Ema(const std::vector<at::Tensor>& params, double decay) : decay_(decay) {
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : params) shadow_.push_back(p.detach().clone());
}

void Ema::update(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) shadow_[i].lerp_(params[i].detach(), 1.0 - decay_);
}

void Ema::swap(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor tmp = params[i].detach().clone();
    params[i].detach().copy_(shadow_[i]);
    shadow_[i].copy_(tmp);
  }
}

}  // namespace megafold::train
