#pragma once
// The keep-and-rescale factor of AF3's shared dropout (SI Alg. 17: "rowwise"/"columnwise" on
// the pair updates), drawn from a counter-based hash rather than a stateful generator:
//   mask[b, l, k] = 1 / (1 - rate) if hash(seed, counter(b, l, k)) >= rate else 0
// The same bits on the CPU and on any GPU (dropout_hash.h), one kernel and no generator state,
// so a step's masks depend on the seed alone (a recomputed block and a resumed run draw them
// again) and a captured CUDA graph can replay them.
//
//   like        [B, n, N2, c]: the tensor the mask scales (its shape, device)
//   axis        0 rowwise: one mask per (b, j, k) shared over the rows, [B, 1, N2, c];
//               1 columnwise: one per (b, i, k) shared over the columns, [B, n, 1, c]
//   rows_total, row_offset
//               columnwise on row-sharded pairs: like holds rows [row_offset, row_offset + n)
//               of rows_total, and gets those rows of the unsharded mask (rows_total < 0: n)
// Returns fp32. Registered as torch.ops.megafold.dropout_mask; on CUDA one kernel
// (dropout_mask.cu), elsewhere the loop in dropout_mask_ref.cpp.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace megafold::ops {

at::Tensor dropout_mask(const at::Tensor& like, double rate, int64_t axis, int64_t seed, int64_t rows_total,
                        int64_t row_offset);
at::Tensor dropout_mask_ref(const at::Tensor& like, double rate, int64_t axis, int64_t seed, int64_t rows_total,
                            int64_t row_offset);

// The mask's geometry, checked (shared by the reference and the CUDA binding).
struct DropoutMaskShape {
  int64_t B, L, c;         // the mask as [B, L, c] (L = N2 rowwise, n columnwise)
  int64_t L_total, first;  // counters run over [B, L_total, c], from row `first` of each batch
  std::vector<int64_t> sizes;  // [B, 1, N2, c] or [B, n, 1, c]
  float keep_scale;        // 1 / (1 - rate)
  float rate;
};
DropoutMaskShape dropout_mask_shape(const at::Tensor& like, double rate, int64_t axis, int64_t rows_total,
                                    int64_t row_offset);

}  // namespace megafold::ops
