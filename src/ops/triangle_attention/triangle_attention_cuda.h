#pragma once
// The CUDA kernels' boundary: pointers, strides and sizes, validated on the host beforehand
// (triangle_attention_autograd.cpp). Strides are in elements, so transposed views (the
// ending-node variant) are read in place; the last (head-dim) stride of q, k, v and gate is 1.
//
// Three kernel sets share this boundary: fp16/bf16 run on tensor cores, through wgmma and TMA
// on Hopper (triangle_attention_wgmma.cu, at d = 32) and mma.sync on sm_80 and later
// (triangle_attention_mma.cu); fp32 on CUDA cores (triangle_attention_simt.cu).
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
  // [B, H, N, N] contiguous, or null (no bias). The sm_90a kernels read the same values from
  // bias_rows, whose rows are bias_ld >= N elements apart (a multiple of 8, for TMA).
  const void* bias;
  const void* bias_rows;
  int64_t bias_ld;
  // The sm_90a forward's, dQ's and bias gradient's copy of bias / scale in 64 x 64 tiles of floats
  // in score-fragment order ([B * H, T, T, 4096], T = ceil(N / 64)), written by those kernels'
  // launch; null without a bias or off sm_90a.
  float* bias_fragments;
  // [B, R, N] float, additive key mask: 0 = attend, -inf = masked; or null (all keys
  // attended). Rows are mask_ld >= N floats apart; the sm_90a kernels, which copy whole
  // 64-key rows of it, need mask_ld a multiple of 64 with -inf past N.
  const float* mask;
  int64_t mask_ld;
  // Which 64-key tiles of each mask row hold a masked key below N: bit t % 32 of word t / 32 of
  // row (b, r) of [B, R, mask_words] (make_key_mask writes them with the mask). The sm_90a
  // kernels add the mask to those tiles only; on the others (a padded crop's real keys, or no
  // padding at all) the keys past N get -inf alone, the same scores bit for bit.
  const uint32_t* mask_tiles;
  int64_t mask_words;
  // Forward outputs / backward inputs, [B, R, N, H, d]: o before gating (saved for backward),
  // contiguous, and out = sigmoid(gate) * o through out_stride (null without a gate: out is o,
  // and out_stride o's). The ending-node caller asks for out with its rows and columns swapped
  // in memory, so that its transpose back is contiguous.
  void* o;
  void* out; int64_t out_stride[5];
  float* lse;  // [B, R, H, N], log-sum-exp of the logits in base 2 (natural lse * log2 e);
              // +inf marks a fully masked row
  // Backward. d_out: gradient of out, through out_stride. d_o: gradient of o, contiguous (written by the
  // backward's first pass when there is a gate, else equal to d_out). delta [B, R, H, N] =
  // rowsum(d_o * o), written by the first pass.
  const void* d_out;
  void* d_o;
  float* delta;
  // The sm_90a backward's copy of (lse, delta) per query, [B, R, H, stats_ld, 2] with stats_ld
  // >= N even (16-byte TMA strides), written by the first pass beside delta; null otherwise.
  float* stats;
  int64_t stats_ld;
  // Backward outputs, written through their strides (per dimension, in elements; the last is
  // 1 and every other even, for 4-byte stores): d_gate (null without a gate), dq/dk/dv
  // [B, R, N, H, d] in dtype, dbias [B, H, N, N] in dbias_dtype (null without a bias). Dense
  // tensors, or the columns of the one projection q, k, v, gate and bias were read from, so
  // that its gradient is written whole without a concatenation.
  void* d_gate; int64_t d_gate_stride[5];
  void* dq; int64_t dq_stride[5];
  void* dk; int64_t dk_stride[5];
  void* dv; int64_t dv_stride[5];
  void* dbias; int64_t dbias_stride[4];
  DType dbias_dtype;  // float with fp32 inputs (the CUDA-core kernels write it directly)
  // Elements the bias-gradient reduction zeroes after each pair row's last head (the padding
  // columns of a projection whose gradient it writes into; needs dbias_stride[1] == 1), or 0.
  int64_t dbias_zero_after;
  // Float workspace of dbias_partials(p) * B * H * N * N elements: per-chunk partial sums of
  // the bias gradient over rows, added in chunk order afterwards; with one chunk it may be
  // dbias itself (dense float), which then needs no reduction.
  float* dbias_partial;
  // Run the sm_90a kernels (see use_sm90). q, k, v, d_o and a bias are then TMA-readable
  // (tma_operand, bias_ld a multiple of 8) and the backward needs stats.
  bool sm90;
};

// Whether these inputs run the sm_90a kernels on a GPU of compute capability major.minor:
// sm90::runs_on (built in, a 9.0 GPU, not switched off), fp16/bf16, d = 32.
bool use_sm90(DType dtype, int64_t d, int major, int minor);
// Whether TMA can read a [B, R, N, H, d] operand in place: 16-byte aligned start, unit
// innermost stride, every other stride a positive multiple of 16 bytes.
bool tma_operand(const void* ptr, const int64_t (&stride)[5], int64_t elem_bytes);

// Head dims the kernels are instantiated for; others use the ATen reference.
bool supported_head_dim(int64_t d);

// How many row chunks the bias gradient is split into (0: none, no workspace needed). The
// tensor-core kernels (either set) sum over the rows of a chunk for one 128-query x 64-key
// tile of the bias; the count depends on the shape only, never on the GPU.
int64_t dbias_partials(const TriangleAttentionParams& p);
// dbias = the sum of the chunk partials in chunk order, in dbias_dtype through dbias_stride
// (and dbias_zero_after zeros after each pair row's heads).
void dbias_reduce(const TriangleAttentionParams& p, int64_t chunks, void* stream);

// out = a [B, H, N, N] bias of elem_bytes-sized elements, read through `stride`, as a dense
// tensor (the kernels read the bias dense; the model's is a strided view of a projection).
void bias_heads_major(const void* bias, const int64_t (&stride)[4], int64_t B, int64_t H, int64_t N,
                      int64_t elem_bytes, void* out, void* stream);

// From a [B, R, N] float key mask read through `stride` (nonzero attends): the additive mask
// rows (0 / -inf, `ld` >= N floats apart, -inf past N) and the tile words of mask_tiles.
void make_key_mask(const float* mask, const int64_t (&stride)[3], int64_t B, int64_t R, int64_t N, float* additive,
                   int64_t ld, uint32_t* tiles, int64_t words, void* stream);

void triangle_attention_forward(const TriangleAttentionParams& p, void* stream);
void triangle_attention_backward(const TriangleAttentionParams& p, void* stream);

// Kernel-set entry points, one per dtype family (called by the two functions above).
void forward_mma(const TriangleAttentionParams& p, void* stream);
void backward_mma(const TriangleAttentionParams& p, void* stream);
int64_t dbias_partials_mma(const TriangleAttentionParams& p);
void forward_wgmma(const TriangleAttentionParams& p, void* stream);
void backward_wgmma(const TriangleAttentionParams& p, void* stream);
void forward_simt(const TriangleAttentionParams& p, void* stream);
void backward_simt(const TriangleAttentionParams& p, void* stream);

}  // namespace megafold::ops::cuda
