#pragma once
// Activation checkpointing: the forward keeps only a function's inputs; backward recomputes
// the function with autograd on and differentiates it. The autocast state of the forward is
// restored for the recomputation (backward may run on another thread), and every random draw
// comes from an explicit seed or is captured, so the recomputed activations are the ones of
// the forward.
#include <cstdint>
#include <functional>
#include <vector>

#include "model/pairformer.h"

namespace megafold::model {

// fn(inputs) runs without keeping its activations and again, with autograd on, in backward.
// fn must be a pure function of its inputs (draw noise before and capture it); gradients
// reach the floating-point inputs and, by a nested backward, the parameters fn uses.
using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> checkpointed(const TensorFn& fn, const std::vector<at::Tensor>& inputs);

// One Pairformer block under checkpointed(); its dropout masks come from dropout_seed;
// pair_rows as for PairformerBlock::forward.
PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed, const dist::PairShard* pair_rows = nullptr);

}  // namespace megafold::model
