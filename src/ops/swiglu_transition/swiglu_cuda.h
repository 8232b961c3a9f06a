#pragma once
// The CUDA kernels' boundary for the transition's gated activation (swiglu_gate.cu):
//   forward   h = silu(a) * b                           ab: [M, 2h] rows (a | b), h: [M, h]
//   backward  da = dh * b * s * (1 + a * (1 - s)), db = dh * silu(a), s = sigmoid(a),
//             written as one [M, 2h] gradient of ab; optionally h again from the same reads
// One read and one write of each tensor, fp32 math from 16-bit storage, one rounding per value.
// The backward may write d ab over ab (out == ab): each element is read, then written, by one thread.
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

struct SwigluParams {
  DType dtype;     // float16 or bfloat16
  int64_t M, h;    // rows and hidden width
  const void* ab;  // [M, 2h] contiguous
  const void* dh;  // [M, h] contiguous (backward)
  void* out;       // forward: h [M, h]; backward: d ab [M, 2h]
  void* h_out;     // backward, optional: h [M, h] as well (for a caller that recomputed ab)
};

void swiglu_forward(const SwigluParams& p, void* stream);
void swiglu_backward(const SwigluParams& p, void* stream);

}  // namespace megafold::ops::cuda
