#pragma once
// Shared-mask dropout (AF3 Alg. 17: "rowwise"/"columnwise" dropout on the pair updates).
// The mask is a hash of the caller's seed and each element's position (ops::dropout_mask), so a
// recomputed block (activation checkpointing) and a resumed run draw exactly the same masks,
// the CPU draws the GPU's, and a captured CUDA graph can replay the step.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace megafold::model {

enum class DropoutAxis { kRowwise, kColumnwise };

// x: [B, N, N, c]. Rowwise: one mask per (b, j, c) shared over rows i; columnwise: shared
// over columns j. Identity when rate == 0 or !training.
// Row-sharded x (rows [row_offset, row_offset + x.size(1)) of rows_total): the columnwise mask
// of those rows is the unsharded mask's, so every shard applies its part of it.
at::Tensor shared_dropout(const at::Tensor& x, double rate, DropoutAxis axis, bool training,
                          uint64_t seed, int64_t rows_total = -1, int64_t row_offset = 0);

// The factor shared_dropout multiplies x by, in fp32: the keep mask times 1 / (1 - rate),
// [B, 1, N2, c] rowwise or [B, n, 1, c] columnwise; nullopt when dropout is the identity. The
// pair stack hands it to ops::residual_update, which applies it with the residual add.
std::optional<at::Tensor> dropout_scale(const at::Tensor& x, double rate, DropoutAxis axis, bool training,
                                        uint64_t seed, int64_t rows_total = -1, int64_t row_offset = 0);

}  // namespace megafold::model
