#pragma once
// The CUDA kernels' boundary for layernorm_linear with c_in = 128 (every pair-representation
// site: c_z = 128). Validated and laid out on the host (layernorm_linear_autograd.cpp).
//
//   forward:  y = (xhat * ln_w + ln_b) @ w^T + bias, xhat = (x - mean) * rstd per row;
//             the normalised rows live only in shared memory.
//   backward: dx from dy @ w and the LayerNorm backward, row by row (one kernel);
//             G = dy^T @ xhat and db = colsum(dy) in row chunks (one kernel, partials per
//             chunk added in chunk order), then, from G and db alone:
//               dw = G * ln_w + db (x) ln_b,  d ln_w = colsum_n(w * G),  d ln_b = db @ w.
//             No atomics: every gradient is bitwise reproducible.
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

inline constexpr int64_t kLayerNormLinearCin = 128;

struct LayerNormLinearParams {
  DType x_dtype;  // x and dx: float, or the same 16-bit type as dtype
  DType dtype;    // w, y, dy: float16 or bfloat16 (products in fp32)
  int64_t M, N;   // rows (all leading dims of x) and c_out; N even
  float eps;
  const void* x;          // [M, 128] contiguous
  const float* ln_w;      // [128]
  const float* ln_b;      // [128]
  const void* w;          // [N, 128] contiguous
  const float* bias;      // [N] or null
  void* y;                // [M, N] contiguous
  float* mean;            // [M], written by forward, read by backward
  float* rstd;            // [M]
  // Backward.
  const void* dy;         // [M, N] contiguous
  void* dx;               // [M, 128]; null: the weight gradients alone (a caller with its own dx)
  float* g_partial;       // [dw_chunks, N, 128] workspace
  float* db_partial;      // [dw_chunks, N] workspace
  float* g;               // [N, 128] workspace
  float* dw;              // [N, 128]
  float* db;              // [N] (also needed without a bias: d ln_b comes from it)
  float* d_ln_w;          // [128]
  float* d_ln_b;          // [128]
  // Run the sm_90a kernels (layernorm_linear_use_sm90); y and dy rows are then 16-byte
  // multiples (N % 8 == 0) and every pointer 16-byte aligned, as TMA needs.
  bool sm90;
};

// Row chunks of the weight-gradient reduction (a function of M, N and the kernel set only, so
// results do not depend on the GPU of a kind).
int64_t layernorm_linear_dw_chunks(int64_t M, int64_t N, bool sm90);

void layernorm_linear_forward(const LayerNormLinearParams& p, void* stream);
void layernorm_linear_backward(const LayerNormLinearParams& p, void* stream);

// Whether the sm_90a kernels (layernorm_linear_wgmma.cu) serve c_out = N on a GPU of compute
// capability major.minor: built in, a 9.0 GPU, N % 8 == 0.
bool layernorm_linear_use_sm90(int64_t N, int major, int minor);

// Triangle multiplication's operands (triangle_multiplication_cuda.h) made in the sm_90a
// forward's epilogue from y = [p_a | p_b | g_a | g_b | gate logits] (c, c, c, c, c_gate
// columns) instead of y, which is not written (the fused backward, triangle_multiplication's
// trimul_projection_backward, recomputes it):
//   a = p_a * sigmoid(g_a) * mask, b alike: [B, c, plane] channel-major
//   gate = sigmoid(gate logits): [M, c_gate] rows (c_gate may be 0)
// each value computed from y's rounded values and rounded once, as the separate operands pass
// does. p.y is not used.
struct TrimulEpilogue {
  int64_t batch, plane, c, c_gate;  // M = batch * plane rows
  const float* mask;                // [M] or null
  void* a;
  void* b;
  void* gate;
};
// Whether the epilogue serves this shape on a GPU of compute capability major.minor (the
// sm_90a forward runs, c and c_gate multiples of 64, no bias, a plane of a multiple of 8 pairs,
// TMA's 16-byte strides for a and b, and no 64-row tile straddling two batch elements).
bool layernorm_linear_trimul_epilogue_fits(const LayerNormLinearParams& p, const TrimulEpilogue& e, int major,
                                           int minor);
void layernorm_linear_forward_trimul(const LayerNormLinearParams& p, const TrimulEpilogue& e, void* stream);

// The sm_90a kernels, called by the two above when p.sm90: the forward; dx and the chunk
// partials of G and db (rows_per_chunk a multiple of 64).
void layernorm_linear_forward_wgmma(const LayerNormLinearParams& p, void* stream);
void layernorm_linear_backward_wgmma(const LayerNormLinearParams& p, int64_t rows_per_chunk, int64_t chunks,
                                     void* stream);

}  // namespace megafold::ops::cuda
