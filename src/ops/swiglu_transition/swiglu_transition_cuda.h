#pragma once
// The CUDA kernels' boundary for the fused swiglu_transition, for c = 128 (pair) and c = 384
// (single):
//   y = (silu(a) * b) @ w_out^T,  [a | b] = LayerNorm(x) @ w_in^T
// Forward, one kernel per tile of rows: LayerNorm into shared memory, then the hidden width in
// chunks: a and b of the chunk in registers, silu(a) * b, and its product with the chunk's
// columns of w_out added to the output accumulators. Neither a, b nor the hidden
// h = silu(a) * b ever reach global memory; backward recomputes them.
// Kernels: swiglu_transition_mma.cu (sm_80 and later, both widths) and, for c = 128 on
// H100/H200, swiglu_transition_wgmma.cu, which also has a fused backward (below).
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

// The hidden width must be a multiple of this (the chunk: 64 for c = 128, 32 for c = 384).
constexpr int64_t swiglu_transition_hidden_multiple(int64_t c) { return c == 384 ? 32 : 64; }
// Whether the fused kernel serves width c.
inline bool swiglu_transition_fused_width(int64_t c) { return c == 128 || c == 384; }
// Rows from which the fused kernel serves width c; fewer go through the unfused ops. The c = 384
// kernel gives each 64-row block a whole SM, so below ~8K rows it runs one partial wave of
// long blocks: the Pairformer's single track (N rows) took 0.18 ms of forward alone at N = 384
// and 768, where the unfused products (cuBLAS over every SM) need a fraction of that. The rule
// depends on the shape only, so every GPU of a kind takes the same path.
constexpr int64_t swiglu_transition_fused_min_rows(int64_t c) { return c == 384 ? 8192 : 0; }

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
  bool sm90;           // run the sm_90a kernel (swiglu_transition_use_sm90); pointers 16-byte aligned
};

void swiglu_transition_forward(const SwigluTransitionParams& p, void* stream);

// Whether the sm_90a kernels serve width c on a GPU of compute capability major.minor.
bool swiglu_transition_use_sm90(int64_t c, int major, int minor);
void swiglu_transition_forward_wgmma(const SwigluTransitionParams& p, void* stream);

// The sm_90a fused backward (c = 128), one kernel per tile of rows: a and b again from the
// LayerNorm'd rows, dh = dy @ w_out per chunk, and from them
//   h = silu(a) * b,  da = dh * b * s * (1 + a (1 - s)),  db = dh * silu(a)   (s = sigmoid(a))
// written out (16-bit) for the weight gradients, while dxhat' += [da | db] @ w_in[chunk]
// accumulates on chip and ends in the LayerNorm backward: dx. The weight gradients follow as
// reductions over rows outside the kernel: dw_out = dy^T h and, through layernorm_linear's
// weight-gradient kernels, dw_in, d ln_w and d ln_b from d ab, x and the row statistics.
struct SwigluTransitionBackwardParams {
  SwigluTransitionParams f;  // the forward's inputs (f.y unused)
  const void* dy;            // [M, c] 16-bit (dtype)
  void* dx;                  // [M, c] in x's dtype
  const void* dx_add;        // [M, c] in x's dtype, added to dx (a residual path's gradient), or null
  void* dab;                 // [M, 2h] 16-bit: rows (da | db)
  void* h;                   // [M, h] 16-bit
  float* mean;               // [M] LayerNorm statistics of x
  float* rstd;               // [M]
};
void swiglu_transition_backward_wgmma(const SwigluTransitionBackwardParams& p, void* stream);

}  // namespace megafold::ops::cuda
