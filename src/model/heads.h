#pragma once
// Distogram head and loss (AF3 SI Sec. 4.4: 64 bins from 2 to 22 Angstrom on the
// representative atom, CB or CA for glycine).
#include <torch/nn/module.h>

#include "model/config.h"

namespace megafold::model {

class DistogramHeadImpl : public torch::nn::Module {
 public:
  explicit DistogramHeadImpl(const ModelConfig& cfg);
  at::Tensor forward(const at::Tensor& z);  // [B, N, N, c_z] -> logits [B, N, N, bins]
 private:
  at::Tensor w_, b_;
};
TORCH_MODULE(DistogramHead);

struct DistogramMetrics {
  at::Tensor loss;      // scalar: cross-entropy averaged over the valid pairs of each example,
                        // then over examples (differentiable)
  at::Tensor accuracy;  // scalar: fraction of valid pairs whose argmax bin is the true bin,
                        // averaged the same way
  at::Tensor pairs;     // scalar, number of valid pairs
};

// Bin of each pairwise distance among `bins` equal bins over [min, max] (first and last
// open-ended). coords [B, N, 3] -> [B, N, N] int64.
at::Tensor distogram_bins(const at::Tensor& coords, int64_t bins, double min, double max);

// Pairs count when both representative atoms were resolved (mask [B, N]).
DistogramMetrics distogram_loss(const at::Tensor& logits, const at::Tensor& coords,
                                const at::Tensor& mask, double min, double max);

}  // namespace megafold::model
