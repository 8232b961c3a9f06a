#pragma once
// The CUDA kernel's boundary for dropout_mask (dropout_mask.cu): the mask as [B, L, c] fp32,
// element (b, l, k) drawn at dropout_counter(b, l, k, L_total, first, c) of the stream `key`.
#include <cstdint>

namespace megafold::ops::cuda {

struct DropoutMaskParams {
  int64_t B, L, c, L_total, first;
  uint64_t key;
  float rate, keep_scale;
  float* out;
};

void dropout_mask_forward(const DropoutMaskParams& p, void* stream);

}  // namespace megafold::ops::cuda
