#pragma once
// The CUDA kernel's boundary for the fused forward of swiglu_transition
// (swiglu_transition_mma.cu), for c = 128 (pair) and c = 384 (single):
//   y = (silu(a) * b) @ w_out^T,  [a | b] = LayerNorm(x) @ w_in^T
// One kernel per tile of rows: LayerNorm into shared memory, then the hidden width in chunks:
// a and b of the chunk in registers, silu(a) * b to shared memory, and its product with the
// chunk's columns of w_out added to the output accumulators. Neither a, b nor the hidden
// h = silu(a) * b ever reach global memory; backward recomputes them (swiglu_transition_autograd.cpp).
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

// The hidden width must be a multiple of this (the chunk: 64 for c = 128, 32 for c = 384).
constexpr int64_t swiglu_transition_hidden_multiple(int64_t c) { return c == 384 ? 32 : 64; }
// Whether the fused kernel serves width c.
inline bool swiglu_transition_fused_width(int64_t c) { return c == 128 || c == 384; }

struct SwigluTransitionParams {
  DType x_dtype;       // x: float, or the same 16-bit type as dtype
  DType dtype;         // w_in, w_out and y: float16 or bfloat16 (products in fp32)
  int64_t M, c, h;     // rows, width, hidden width (a multiple of swiglu_transition_hidden_multiple(c))
  float eps;           // LayerNorm epsilon
  const void* x;       // [M, c] contiguous, 16-byte aligned
  const float* ln_w;   // [c]
  const float* ln_b;   // [c]
  const void* w_in;    // [2h, c]: rows [0, h) give a, rows [h, 2h) give b
  const void* w_out;   // [c, h]
  void* y;             // [M, c]
};

void swiglu_transition_forward(const SwigluTransitionParams& p, void* stream);

}  // namespace megafold::ops::cuda
