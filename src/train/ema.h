#pragma once
// Exponential moving average of the parameters (AF3: decay 0.999), used for validation and
// saved in checkpoints. Shadow tensors live on the parameters' device, in fp32.
#include <ATen/core/Tensor.h>

#include <vector>

namespace megafold::train {

class Ema {
 public:
  Ema(const std::vector<at::Tensor>& params, double decay);
  void update(const std::vector<at::Tensor>& params);  // shadow = d*shadow + (1-d)*param
  // Swaps the shadow values into params (and back on the second call): validation with EMA
  // weights without a second model.
  void swap(const std::vector<at::Tensor>& params);
  std::vector<at::Tensor>& shadow() { return shadow_; }

 private:
  double decay_;
  std::vector<at::Tensor> shadow_;
};

}  // namespace megafold::train
