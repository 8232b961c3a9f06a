#pragma once
// The CUDA kernels' boundary for triangle_multiplication (triangle_multiplication_layout.cu, and
// on H100/H200 the projection's fused backward in triangle_multiplication_wgmma.cu).
// The N^3 contraction runs in cuBLAS on channel-major operands [B, c, P] (P = the pair plane,
// rows x columns); these kernels are the passes around it, each one read and one write of an
// N^2 x c tensor, transposing through shared memory between the row-major pair layout
// [B, P, c] of the projections and the channel-major layout of the contraction:
//
//   operands_forward   proj rows -> a, b channel-major:  a = sigmoid(g_a) * p_a * mask (b alike),
//                      and the output gate sigmoid(g) of the columns after them, as rows
//   operands_backward  da, db channel-major, d gate rows + proj rows -> every column's gradient
//   channels_to_rows   t [B, c, P] -> [B, P, c]   (the contraction's output, for LayerNorm_out)
//   rows_to_channels   dt [B, P, c] -> [B, c, P]  (its gradient, for the contraction's backward)
//
// Elementwise math in fp32 from 16-bit storage, one rounding per stored value; no reductions,
// so every result is bitwise reproducible.
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

struct PairLayout {
  DType dtype;    // float16 or bfloat16: every tensor below
  int64_t batch;  // B
  int64_t plane;  // P: pairs per batch element (rows of the row-major layout)
  int64_t c;      // channels per operand
};

// proj: [B * P, ld] rows holding p_a, p_b, g_a, g_b as columns [0, 4c) and the output gate's
// logits as columns [4c, 4c + c_gate); mask: [B * P] or null. a, b: [B, c, P]; gate: [B * P, c_gate].
struct TrimulOperands {
  const void* proj;
  int64_t ld;
  const float* mask;
  int64_t c_gate;
  void* a;     // forward: outputs; backward: their gradients (inputs)
  void* b;
  void* gate;
  void* dproj;  // backward: [B * P, 4c + c_gate], every column written
};
// The projection's backward on H100/H200 (triangle_multiplication_wgmma.cu) for the shapes whose
// forward ran layernorm_linear's triangle-multiplication epilogue (which keeps no projection):
// one kernel recomputes proj = LayerNorm(x) w^T tile by tile, rounded as the forward rounded it,
// forms its gradient from those of a, b and the output gate as operands_backward does (the same
// bits), writes it whole (the weight gradients need it) and keeps
//   dxhat' = dproj w
// on chip until the LayerNorm backward gives dx. No reductions across blocks: bitwise
// reproducible.
struct TrimulProjectionBackwardParams {
  DType x_dtype;  // x and dx: float, or dtype
  DType dtype;    // w, da, db, d gate, dproj: float16 or bfloat16
  int64_t batch, plane, c, c_gate;  // M = batch * plane rows; c, c_gate multiples of 64
  const void* x;      // [M, 128]
  const float* ln_w;  // [128]
  const float* ln_b;  // [128]
  const void* w;      // [4c + c_gate, 128]: p_a, p_b, g_a, g_b, output gate logits
  const float* mean;  // [M]: x's LayerNorm statistics, from the forward
  const float* rstd;  // [M]
  const float* mask;  // [M] or null
  const void* da;     // [batch, c, plane] channel-major
  const void* db;
  const void* dgate;  // [M, c_gate] rows (c_gate > 0)
  void* dproj;        // [M, 4c + c_gate]
  void* dx;           // [M, 128]
  const void* dx_add;  // [M, 128] in x's dtype, added to dx (the residual stream's gradient), or null
};
void trimul_projection_backward(const TrimulProjectionBackwardParams& p, void* stream);

void trimul_operands_forward(const PairLayout& l, const TrimulOperands& o, void* stream);
void trimul_operands_backward(const PairLayout& l, const TrimulOperands& o, void* stream);
void channels_to_rows(const PairLayout& l, const void* src, void* dst, void* stream);
void rows_to_channels(const PairLayout& l, const void* src, void* dst, void* stream);

}  // namespace megafold::ops::cuda
