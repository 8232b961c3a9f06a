#pragma once
// Activation checkpointing for one Pairformer block: the forward keeps only the block's
// inputs; backward recomputes the block with autograd on and differentiates it. Dropout
// masks come from an explicit seed, and the autocast state of the forward is restored for
// the recomputation (backward may run on another thread), so the recomputed activations are
// the ones of the forward.
#include <cstdint>
#include <functional>
#include <vector>

#include "model/pairformer.h"

namespace megafold::model {

PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed);

// The same for any function of tensors: fn(inputs) runs without keeping its activations and
// is run again, with autograd on, in backward. fn must be a pure function of its inputs (draw
// noise before and capture it); parameter gradients accumulate as for checkpointed_block.
using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> checkpointed(const TensorFn& fn, const std::vector<at::Tensor>& inputs);

}  // namespace megafold::model
