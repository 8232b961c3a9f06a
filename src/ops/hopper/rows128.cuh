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

// LayerNorm backward of a warpgroup's 64 rows of c = 128, from dxhat' (the gradient of the
// scaled and shifted rows) in two m64n64 accumulators (columns 0..63, 64..127): this thread's
// rows are rows[h] (16 warp + g + 8 h of the warpgroup), xhat(h, col) gives the normalised
// pair at columns col, col + 1 of row h.
//   dxhat = dxhat' * ln_w,  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
// dx_add (dx's layout, or null) is added before the one rounding: the gradient x receives along
// a residual path, so that no separate pass sums the two.
// A row is whole within a quad of lanes, so its sums are two shuffles. Rows >= M are skipped.
template <typename Tin, typename XHat>
__device__ __forceinline__ void layernorm_backward_rows(const float (&acc)[2][32], const float* ln_w, XHat&& xhat,
                                                        const int64_t (&rows)[2], const float (&rstd)[2], int64_t M,
                                                        Tin* dx, const Tin* dx_add) {
  constexpr int kC = 128;
  const int t = threadIdx.x % 4;
  // fn(h, col, ln_w pair, accumulator pair) over this thread's pairs of columns of both rows.
  auto each_pair = [&](auto&& fn) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int col = 64 * half + 8 * c + 2 * t;
        const float2 gw = *reinterpret_cast<const float2*>(ln_w + col);
#pragma unroll
        for (int h = 0; h < 2; ++h) fn(h, col, gw, acc[half] + 4 * c + 2 * h);
      }
  };
  float s1[2] = {0.f, 0.f}, s2[2] = {0.f, 0.f};
  each_pair([&](int h, int col, float2 gw, const float* a) {
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
    s1[h] *= 1.f / kC;
    s2[h] *= 1.f / kC;
  }
  each_pair([&](int h, int col, float2 gw, const float* a) {
    if (rows[h] >= M) return;
    const float2 xh = xhat(h, col);
    const float2 add = dx_add != nullptr ? mma::load2(dx_add + rows[h] * kC + col) : make_float2(0.f, 0.f);
    mma::store2(dx + rows[h] * kC + col, rstd[h] * (a[0] * gw.x - s1[h] - xh.x * s2[h]) + add.x,
                rstd[h] * (a[1] * gw.y - s1[h] - xh.y * s2[h]) + add.y);
  });
}

#endif  // MEGAFOLD_SM90A_DEVICE

}  // namespace megafold::ops::cuda
