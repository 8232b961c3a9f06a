#pragma once
// The CUDA kernels' boundary for triangle_multiplication (triangle_multiplication_layout.cu).
// The N^3 contraction runs in cuBLAS on channel-major operands [B, c, P] (P = the pair plane,
// rows x columns); these kernels are the passes around it, each one read and one write of an
// N^2 x c tensor, transposing through shared memory between the row-major pair layout
// [B, P, c] of the projections and the channel-major layout of the contraction:
//
//   operands_forward   proj rows -> a, b channel-major:  a = sigmoid(g_a) * p_a * mask (b alike)
//   operands_backward  da, db channel-major + proj rows -> d p_a, d g_a, d p_b, d g_b rows
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

// proj: [B * P, ld] rows holding p_a, p_b, g_a, g_b as columns [0, 4c); mask: [B * P] or null.
// a, b: [B, c, P].
void trimul_operands_forward(const PairLayout& l, const void* proj, int64_t ld, const float* mask, void* a,
                             void* b, void* stream);
// da, db: [B, c, P]; dproj: [B * P, 4c] (every column written).
void trimul_operands_backward(const PairLayout& l, const void* da, const void* db, const void* proj, int64_t ld,
                              const float* mask, void* dproj, void* stream);
void channels_to_rows(const PairLayout& l, const void* src, void* dst, void* stream);
void rows_to_channels(const PairLayout& l, const void* src, void* dst, void* stream);

}  // namespace megafold::ops::cuda
