#pragma once
// Device pieces the Hopper kernels over rows of c = 128 share (layernorm_linear_wgmma.cu,
// swiglu_transition_wgmma.cu): 128-byte-swizzled panel offsets and the LayerNorm backward on
// wgmma accumulators. CUDA sources only.
#include <cstdint>

#include "core/hopper.cuh"
#include "core/mma.cuh"

namespace megafold::ops::cuda {

#if defined(MEGAFOLD_SM90A_DEVICE)

// Byte offset of the 8-byte piece `piece` (0..15) of row r in a 128-byte-swizzled panel.
__device__ __forceinline__ int swizzled(int r, int piece) { return r * 128 + (((piece / 2) ^ (r % 8)) * 16) + (piece % 2) * 8; }

// Byte offset of accumulator chunk c (columns 8c..8c+7), bytes 4t..4t+3, of row r.
__device__ __forceinline__ int swizzled_pair(int r, int c, int t) { return r * 128 + ((c ^ (r % 8)) * 16) + 4 * t; }

// fn(h, col, ln_w pair, accumulator pair) over this thread's pairs of columns of both rows of
// two m64n64 accumulators (columns 0..63, 64..127; rows 16 warp + g + 8 h of the warpgroup).
template <typename Acc, typename Fn>
__device__ __forceinline__ void each_accumulator_pair(Acc (&acc)[2][32], const float* ln_w, Fn&& fn) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int col = 64 * half + 8 * c + 2 * t;
      const float2 gw = *reinterpret_cast<const float2*>(ln_w + col);
#pragma unroll
      for (int h = 0; h < 2; ++h) fn(h, col, gw, acc[half] + 4 * c + 2 * h);
    }
}

// The LayerNorm backward of a warpgroup's 64 rows of c = 128 from dxhat' (the gradient of the
// scaled and shifted rows) in two m64n64 accumulators; xhat(h, col) gives the normalised pair
// at columns col, col + 1 of row h.
//   dxhat = dxhat' * ln_w,  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
// The two means per row: a row is whole within a quad of lanes, so its sums are two shuffles.
template <typename XHat>
__device__ __forceinline__ void layernorm_backward_means(const float (&acc)[2][32], const float* ln_w, XHat&& xhat,
                                                         float (&s1)[2], float (&s2)[2]) {
  s1[0] = s1[1] = s2[0] = s2[1] = 0.f;
  each_accumulator_pair(acc, ln_w, [&](int h, int col, float2 gw, const float* a) {
    const float2 xh = xhat(h, col);
    const float d0 = a[0] * gw.x, d1 = a[1] * gw.y;
    s1[h] += d0 + d1;
    s2[h] += d0 * xh.x + d1 * xh.y;
  });
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      s1[h] += __shfl_xor_sync(0xffffffffu, s1[h], o);
      s2[h] += __shfl_xor_sync(0xffffffffu, s2[h], o);
    }
    s1[h] *= 1.f / 128;
    s2[h] *= 1.f / 128;
  }
}

// dx in place of the accumulators.
template <typename XHat>
__device__ __forceinline__ void layernorm_backward_in_place(float (&acc)[2][32], const float* ln_w, XHat&& xhat,
                                                            const float (&rstd)[2]) {
  float s1[2], s2[2];
  layernorm_backward_means(acc, ln_w, xhat, s1, s2);
  each_accumulator_pair(acc, ln_w, [&](int h, int col, float2 gw, float* a) {
    const float2 xh = xhat(h, col);
    a[0] = rstd[h] * (a[0] * gw.x - s1[h] - xh.x * s2[h]);
    a[1] = rstd[h] * (a[1] * gw.y - s1[h] - xh.y * s2[h]);
  });
}

// dx stored to rows[h] < M as each value is formed (fewer live registers than in place, then
// stored).
template <typename Tin, typename XHat>
__device__ __forceinline__ void layernorm_backward_rows(const float (&acc)[2][32], const float* ln_w, XHat&& xhat,
                                                        const int64_t (&rows)[2], const float (&rstd)[2], int64_t M,
                                                        Tin* dx) {
  float s1[2], s2[2];
  layernorm_backward_means(acc, ln_w, xhat, s1, s2);
  each_accumulator_pair(acc, ln_w, [&](int h, int col, float2 gw, const float* a) {
    if (rows[h] >= M) return;
    const float2 xh = xhat(h, col);
    mma::store2(dx + rows[h] * 128 + col, rstd[h] * (a[0] * gw.x - s1[h] - xh.x * s2[h]),
                rstd[h] * (a[1] * gw.y - s1[h] - xh.y * s2[h]));
  });
}

// dx = the accumulators after layernorm_backward_in_place plus dx_add (dx's layout: a residual
// stream's gradient, added before dx's one rounding so that no separate pass sums the two), by
// plain loads in groups of 8 pairs, each group's loads issued before its stores so that their
// latencies overlap (the compiler may not move a load of dx_add above an earlier store to dx,
// which it must assume could alias). For kernels with registers to spare: the transition's
// fused backward (207 registers) adds it at ~13 us over its plain store at N = 768 on an H100.
// In the LayerNorm+Linear dx kernel (128 registers, two blocks per SM) neither these loads nor
// a TMA copy of the addend over the x tile paid: +220 to +290 us against the 290 us pass they
// replace (bench/notes/fused_ops.md).
template <typename Tin>
__device__ __forceinline__ void store_dx_rows_adding(const float (&acc)[2][32], const int64_t (&rows)[2], int64_t M,
                                                     Tin* dx, const Tin* dx_add) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int group = 0; group < 4; ++group) {
    const int half = group / 2, c0 = 4 * (group % 2);
    float2 add[4][2];
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        add[c][h] = rows[h] < M ? mma::load2(dx_add + rows[h] * 128 + 64 * half + 8 * (c0 + c) + 2 * t)
                                : make_float2(0.f, 0.f);
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (rows[h] >= M) continue;
        const float* a = acc[half] + 4 * (c0 + c) + 2 * h;
        mma::store2(dx + rows[h] * 128 + 64 * half + 8 * (c0 + c) + 2 * t, a[0] + add[c][h].x, a[1] + add[c][h].y);
      }
  }
}

#endif  // MEGAFOLD_SM90A_DEVICE

}  // namespace megafold::ops::cuda
