#pragma once
// The CUDA kernels' boundary: pointers, strides and sizes, validated on the host beforehand
// (triangle_attention_autograd.cpp). Strides are in elements, so transposed views (the
// ending-node variant) are read in place; the last (head-dim) stride of q, k, v and gate is 1.
//
// Two kernel sets share this boundary: fp16/bf16 run on tensor cores
// (triangle_attention_mma.cu), fp32 on CUDA cores (triangle_attention_simt.cu).
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

struct TriangleAttentionParams {
  DType dtype;  // of q, k, v, bias, gate and every output below that is not float
  int64_t B, R, N, H, d;
  float scale;  // 1 / sqrt(d)
  // [B, R, N, H, d], strides per dimension.
  const void* q; int64_t q_stride[5];
  const void* k; int64_t k_stride[5];
  const void* v; int64_t v_stride[5];
  const void* gate; int64_t gate_stride[5];  // pre-sigmoid output gate, or null
  // [B, H, N, N] contiguous, or null (no bias).
  const void* bias;
  // [B, R, N] float, contiguous, additive key mask: 0 = attend, -inf = masked; or null (all
  // keys attended).
  const float* mask;
  // Forward outputs / backward inputs, contiguous [B, R, N, H, d]: o before gating (saved for
  // backward) and out = sigmoid(gate) * o (null without a gate: out is o).
  void* o;
  void* out;
  float* lse;  // [B, R, H, N], log-sum-exp of the logits in base 2 (natural lse * log2 e);
              // +inf marks a fully masked row
  // Backward. d_out: gradient of out, contiguous. d_o: gradient of o (written by the
  // backward's first pass when there is a gate, else equal to d_out). delta [B, R, H, N] =
  // rowsum(d_o * o), written by the first pass.
  const void* d_out;
  void* d_o;
  float* delta;
  // Backward outputs, contiguous: d_gate (null without a gate), dq/dk/dv [B, R, N, H, d],
  // dbias [B, H, N, N] float (null without a bias).
  void* d_gate;
  void* dq;
  void* dk;
  void* dv;
  float* dbias;
  // Float workspace of dbias_partials(p) * B * H * N * N elements: per-chunk partial sums of
  // the bias gradient over rows, added in chunk order afterwards.
  float* dbias_partial;
};

// Head dims the kernels are instantiated for; others use the ATen reference.
bool supported_head_dim(int64_t d);

// How many row chunks the bias gradient is split into (0: none, no workspace needed).
int64_t dbias_partials(const TriangleAttentionParams& p);

void triangle_attention_forward(const TriangleAttentionParams& p, void* stream);
void triangle_attention_backward(const TriangleAttentionParams& p, void* stream);

// Kernel-set entry points, one per dtype family (called by the two functions above).
void forward_mma(const TriangleAttentionParams& p, void* stream);
void backward_mma(const TriangleAttentionParams& p, void* stream);
int64_t dbias_partials_mma(const TriangleAttentionParams& p);
void forward_simt(const TriangleAttentionParams& p, void* stream);
void backward_simt(const TriangleAttentionParams& p, void* stream);

}  // namespace megafold::ops::cuda
