#pragma once
// The optimiser settings of a run, shared by the trainer and the benchmark workloads
// (`megafold fit`), so both step the parameters the same way.
#include <torch/optim/adamw.h>

#include <vector>

#include "config/config.h"

namespace megafold::train {

// AdamW with the config's learning rate, betas, eps and weight decay (AF3 SI Sec. 5.4).
torch::optim::AdamWOptions adamw_options(const config::OptimConfig& o);

// Clips the parameters' gradients to o.clip_grad_norm (0: no clipping) and returns their total
// norm before clipping.
double clip_gradients(const std::vector<at::Tensor>& params, const config::OptimConfig& o);

}  // namespace megafold::train
