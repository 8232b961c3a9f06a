#pragma once
// The CUDA kernels' boundary for triangle_multiplication (triangle_multiplication_layout.cu).
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
void trimul_operands_forward(const PairLayout& l, const TrimulOperands& o, void* stream);
void trimul_operands_backward(const PairLayout& l, const TrimulOperands& o, void* stream);
void channels_to_rows(const PairLayout& l, const void* src, void* dst, void* stream);
void rows_to_channels(const PairLayout& l, const void* src, void* dst, void* stream);

}  // namespace megafold::ops::cuda
