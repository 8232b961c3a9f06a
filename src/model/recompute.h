#pragma once
// Activation checkpointing: the forward keeps only a function's inputs; backward recomputes
// the function with autograd on and differentiates it. The autocast state of the forward is
// restored for the recomputation (backward may run on another thread), and every random draw
// comes from an explicit seed or is captured, so the recomputed activations are the ones of
// the forward.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/offload.h"
#include "model/pairformer.h"

namespace megafold::model {

// fn(inputs) runs without keeping its activations and again, with autograd on, in backward.
// fn must be a pure function of its inputs (draw noise before and capture it); gradients
// reach the floating-point inputs and, by a nested backward, the parameters fn uses.
using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Where a checkpoint's inputs wait for backward. offloaded[k], when given, holds inputs[k]
// (put by the caller, e.g. in host memory), so the checkpoint does not keep it; prefetch, when
// given, is started as this checkpoint's backward begins, so the checkpoint whose backward
// comes next finds its input already on its way back.
struct SavedInputs {
  std::vector<std::shared_ptr<OffloadedTensor>> offloaded;
  std::shared_ptr<OffloadedTensor> prefetch;
};

std::vector<at::Tensor> checkpointed(const TensorFn& fn, const std::vector<at::Tensor>& inputs,
                                     const SavedInputs& saved = {});

// Row-chunked checkpoint. fn(chunks, shared, start) maps the slices [start, start + C) along
// `dim` of the tensors `xs` (and any tensors it needs whole, `shared`) to outputs with the same
// extent C along `dim`; the result is the outputs of all chunks laid side by side (allocated
// once, in the first chunk's memory order). Only xs and shared are kept for backward, which
// recomputes each chunk and differentiates it alone: the activations of one chunk live at a
// time. Each x's gradient is written chunk by chunk; gradients of shared inputs are summed
// over the chunks in order, and the parameters fn uses receive theirs by nested backwards, so
// the result is deterministic.
using ChunkFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& chunks,
                                                      const std::vector<at::Tensor>& shared, int64_t start)>;
std::vector<at::Tensor> chunked_checkpoint(const ChunkFn& fn, const std::vector<at::Tensor>& xs,
                                           const std::vector<at::Tensor>& shared, int64_t dim, int64_t chunk);

// t.narrow(dim, start, length), or t itself when it broadcasts along dim (extent 1) or is
// undefined: the slice of a per-row constant (a dropout factor, a mask) for one chunk.
at::Tensor chunk_of(const at::Tensor& t, int64_t dim, int64_t start, int64_t length);

// One Pairformer block under checkpointed(); its dropout masks come from dropout_seed;
// pair_rows as for PairformerBlock::forward; saved: where its inputs (s, z) wait.
PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed, const dist::PairShard* pair_rows = nullptr,
                                   const SavedInputs& saved = {});

}  // namespace megafold::model
