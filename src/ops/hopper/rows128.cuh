#pragma once
// Device pieces the Hopper kernels over rows of c = 128 share (layernorm_linear_wgmma.cu,
// swiglu_transition_wgmma.cu, triangle_multiplication_wgmma.cu; triangle_attention_wgmma.cu
// reads its transposed bias tiles with them): 128-byte-swizzled panel offsets, projections of
// a LayerNorm'd row tile, accumulators as A fragments, a 16-bit tile read transposed, the
// LayerNorm backward on wgmma accumulators, and L2 prefetches of row tiles. CUDA sources only.
#include <cstdint>
#include <type_traits>

#include "core/hopper.cuh"
#include "core/mma.cuh"

namespace megafold::ops::cuda {

#if defined(MEGAFOLD_SM90A_DEVICE)

// Byte offset of the 8-byte piece `piece` (0..15) of row r in a 128-byte-swizzled panel.
__device__ __forceinline__ int swizzled(int r, int piece) { return r * 128 + (((piece / 2) ^ (r % 8)) * 16) + (piece % 2) * 8; }

// Byte offset of accumulator chunk c (columns 8c..8c+7), bytes 4t..4t+3, of row r.
__device__ __forceinline__ int swizzled_pair(int r, int c, int t) { return r * 128 + ((c ^ (r % 8)) * 16) + 4 * t; }

// The calling warpgroup's leader asks for rows row0 .. row0 + 63 of x [M, 128] (those below M)
// in L2, ahead of plain loads of them (a later tile's LayerNorm, or an epilogue's addend).
template <typename Tin>
__device__ __forceinline__ void prefetch_rows_l2(const Tin* x, int64_t row0, int64_t M, bool leader) {
  if (!leader || row0 >= M) return;
  const int64_t n = M - row0 < 64 ? M - row0 : 64;
  hopper::prefetch_l2(x + row0 * 128, static_cast<uint32_t>(n * 128 * sizeof(Tin)));
}

// An epilogue's addend (rows row0 .. row0 + 63 of add, read by plain loads after a tile's last
// step; none when add is null) into L2 three steps before the end of the tile's `steps`, or at
// its first step when it has fewer.
template <typename Tin>
__device__ __forceinline__ void prefetch_addend_rows_l2(const Tin* add, int64_t row0, int64_t M, int step, int steps,
                                                        bool leader) {
  if (add != nullptr && step == (steps > 3 ? steps - 3 : 0)) prefetch_rows_l2(add, row0, M, leader);
}

// Where layer_norm_rows gets the row statistics: computed, and kept (kNone) or written to
// mean[row], rstd[row] for rows below M and, when `stats` is given, to stats[r], stats[64 + r]
// (kWrite); or read from mean and rstd (kGiven), which gives a backward that recomputes the
// forward's tile from the forward's statistics the same bits.
enum class RowStats { kNone, kWrite, kGiven };
template <RowStats kStats>
using RowStatistic = std::conditional_t<kStats == RowStats::kGiven, const float, float>;

// The LayerNorm of a warpgroup's 64 rows row0 .. row0 + 63 of x [M, 128] into its two-panel A
// tile (columns 0..63, 64..127), (x - mean) * rstd * ln_w + ln_b rounded to T: warp w (0..3)
// rows 16 w .. +15 in two passes of 8 (loads first), lane columns 4 lane .. +3; rows past M
// give ln_b.
template <typename Tin, typename T, RowStats kStats>
__device__ __forceinline__ void layer_norm_rows(unsigned char* a_tile, const Tin* x, int64_t M, int64_t row0,
                                                const float* ln_w, const float* ln_b, float eps,
                                                RowStatistic<kStats>* mean, RowStatistic<kStats>* rstd,
                                                float* stats = nullptr) {
  constexpr bool kGiven = kStats == RowStats::kGiven;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const float4 gw = *reinterpret_cast<const float4*>(ln_w + 4 * lane);
  const float4 gb = *reinterpret_cast<const float4*>(ln_b + 4 * lane);
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    float4 v[8];
    float mu[8], rs[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t row = row0 + 16 * warp + 8 * pass + i;
      v[i] = row < M ? mma::load4(x + row * 128 + 4 * lane) : make_float4(0.f, 0.f, 0.f, 0.f);
      if constexpr (kGiven) {
        mu[i] = row < M ? mean[row] : 0.f;
        rs[i] = row < M ? rstd[row] : 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = 16 * warp + 8 * pass + i;
      if constexpr (!kGiven) mu[i] = mma::warp_sum(v[i].x + v[i].y + v[i].z + v[i].w) * (1.f / 128);
      const float d0 = v[i].x - mu[i], d1 = v[i].y - mu[i], d2 = v[i].z - mu[i], d3 = v[i].w - mu[i];
      if constexpr (!kGiven) rs[i] = rsqrtf(mma::warp_sum(d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3) * (1.f / 128) + eps);
      *reinterpret_cast<uint2*>(a_tile + (lane / 16) * 64 * 128 + swizzled(r, lane % 16)) =
          make_uint2(mma::pack2<T>(d0 * rs[i] * gw.x + gb.x, d1 * rs[i] * gw.y + gb.y),
                     mma::pack2<T>(d2 * rs[i] * gw.z + gb.z, d3 * rs[i] * gw.w + gb.w));
      if constexpr (kStats == RowStats::kWrite) {
        if (stats != nullptr && lane == 0) stats[r] = mu[i], stats[64 + r] = rs[i];
        if (lane == 0 && row0 + r < M) mean[row0 + r] = mu[i], rstd[row0 + r] = rs[i];
      }
    }
  }
}

// acc (+)= A W^T over c = 128: A a warpgroup's 64 rows (two K-major panels: columns 0..63 at
// a_lo, 64..127 at a_hi), W 64 output features (a two-panel tile, K-major) at w. Eight
// m64n64k16 in k order (every kernel that recomputes a projection gets the forward's bits).
// Issued after a wgmma_fence, not committed.
template <typename T>
__device__ __forceinline__ void issue_row_projection(float (&acc)[32], uint64_t a_lo, uint64_t a_hi,
                                                     const unsigned char* w) {
  const uint64_t w_lo = hopper::smem_desc<128>(w), w_hi = hopper::smem_desc<128>(w + 64 * 128);
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const uint32_t off = 32 * (ks % 4);
    const uint64_t a = hopper::desc_add(ks < 4 ? a_lo : a_hi, off);
    hopper::wgmma_64x64_ss<T>(acc, a, hopper::desc_add(ks < 4 ? w_lo : w_hi, off), ks > 0);
  }
}

// Two such projections of the same rows, their k-steps interleaved.
template <typename T>
__device__ __forceinline__ void issue_row_projections(float (&acc_a)[32], float (&acc_b)[32], uint64_t a_lo,
                                                      uint64_t a_hi, const unsigned char* wa, const unsigned char* wb) {
  const uint64_t wa_lo = hopper::smem_desc<128>(wa), wa_hi = hopper::smem_desc<128>(wa + 64 * 128);
  const uint64_t wb_lo = hopper::smem_desc<128>(wb), wb_hi = hopper::smem_desc<128>(wb + 64 * 128);
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const uint32_t off = 32 * (ks % 4);
    const uint64_t a = hopper::desc_add(ks < 4 ? a_lo : a_hi, off);
    hopper::wgmma_64x64_ss<T>(acc_a, a, hopper::desc_add(ks < 4 ? wa_lo : wa_hi, off), ks > 0);
    hopper::wgmma_64x64_ss<T>(acc_b, a, hopper::desc_add(ks < 4 ? wb_lo : wb_hi, off), ks > 0);
  }
}

// dxhat' (columns 0..63 in dx[0], 64..127 in dx[1]) += A_a W_a + A_b W_b over one 64-wide
// step of the reduction: A_a, A_b 16-bit A fragments in registers (to_fragment), W_a, W_b
// two-panel weight tiles (64 reduction rows x 128 columns) read MN-major, the two products'
// k-steps interleaved. Issued after a wgmma_fence, not committed.
template <typename T>
__device__ __forceinline__ void issue_dx_products(float (&dx)[2][32], const uint32_t (&fa)[4][4],
                                                  const uint32_t (&fb)[4][4], const unsigned char* wa,
                                                  const unsigned char* wb) {
#pragma unroll
  for (int nh = 0; nh < 2; ++nh) {
    const uint64_t da = hopper::smem_desc<128>(wa + nh * 64 * 128), db = hopper::smem_desc<128>(wb + nh * 64 * 128);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      hopper::wgmma_64x64_rs<T, 1>(dx[nh], fa[ks], hopper::desc_add(da, 2048 * ks), true);
      hopper::wgmma_64x64_rs<T, 1>(dx[nh], fb[ks], hopper::desc_add(db, 2048 * ks), true);
    }
  }
}

// The same with one operand.
template <typename T>
__device__ __forceinline__ void issue_dx_product(float (&dx)[2][32], const uint32_t (&f)[4][4],
                                                 const unsigned char* w) {
#pragma unroll
  for (int nh = 0; nh < 2; ++nh) {
    const uint64_t d = hopper::smem_desc<128>(w + nh * 64 * 128);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) hopper::wgmma_64x64_rs<T, 1>(dx[nh], f[ks], hopper::desc_add(d, 2048 * ks), true);
  }
}

// Element pair (i, i + 1) of an m64n64 accumulator (i even) as part of the A fragments of its
// 16-column k-steps.
template <typename T>
__device__ __forceinline__ void to_fragment(uint32_t (&f)[4][4], int i, float lo, float hi) {
  f[i / 8][((i / 4) % 2) * 2 + (i / 2) % 2] = mma::pack2<T>(lo, hi);
}

// A 64 x 64 16-bit tile (rows x of 128 bytes, 16-byte chunk c of row x stored at chunk
// c ^ (x % 8)) read transposed, in the layout of an m64n64 accumulator whose rows are the tile's
// columns: f[2c + h] holds the pair (tile rows 8c + 2t, 8c + 2t + 1) of tile column row16 + g +
// 8h (warp row16 / 16 of the warpgroup, lane 4g + t). transposed_tile_offsets gives this lane's
// byte offsets once; each ldmatrix.x4.trans then hands out the 8 x 8 blocks of tile rows
// 8c..8c+7 (c = 2m + lane / 16) and column chunk row16 / 8 + (lane / 8) % 2.
__device__ __forceinline__ void transposed_tile_offsets(int (&at)[4], int row16, int lane) {
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int x = 8 * (2 * m + lane / 16) + lane % 8, c = row16 / 8 + (lane / 8) % 2;
    at[m] = x * 128 + ((c ^ (x % 8)) * 16);
  }
}

__device__ __forceinline__ void load_tile_transposed(uint32_t (&f)[16], const unsigned char* tile, const int (&at)[4]) {
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    uint32_t x[4];
    mma::ldmatrix_x4_trans(x, tile + at[m]);
#pragma unroll
    for (int e = 0; e < 4; ++e) f[4 * m + e] = x[e];
  }
}

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

// The LayerNorm backward of dxhat' stored as dx, plus dx_add (a residual stream's gradient, in
// dx's layout) when it is not null.
template <typename Tin, typename XHat>
__device__ __forceinline__ void store_layernorm_backward(float (&acc)[2][32], const float* ln_w, XHat&& xhat,
                                                        const int64_t (&rows)[2], const float (&rstd)[2], int64_t M,
                                                        void* dx, const void* dx_add) {
  if (dx_add == nullptr) {
    layernorm_backward_rows(acc, ln_w, xhat, rows, rstd, M, static_cast<Tin*>(dx));
  } else {
    layernorm_backward_in_place(acc, ln_w, xhat, rstd);
    store_dx_rows_adding(acc, rows, M, static_cast<Tin*>(dx), static_cast<const Tin*>(dx_add));
  }
}

#endif  // MEGAFOLD_SM90A_DEVICE

}  // namespace megafold::ops::cuda
