#pragma once
// Device pieces the Hopper kernels over rows of c = 128 share (layernorm_linear_wgmma.cu,
// swiglu_transition_wgmma.cu, triangle_multiplication_wgmma.cu; triangle_attention_wgmma.cu
// reads its transposed bias tiles with them): 128-byte-swizzled panel offsets, projections of
// a LayerNorm'd row tile, accumulators as A fragments, a 16-bit tile read transposed, the
// LayerNorm backward of wgmma accumulators by rows, and L2 prefetches of row tiles. CUDA
// sources only.
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

// Columns col .. col + 3 of row `row` of x [M, 128] as floats; zeros past M.
template <typename Tin>
__device__ __forceinline__ float4 x_row_quad(const Tin* x, int64_t row, int64_t M, int col) {
  return row < M ? mma::load4(x + row * 128 + col) : make_float4(0.f, 0.f, 0.f, 0.f);
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
// give ln_b. kInTile: x (16-bit) already lies in the tile in the same layout (TMA boxes of 64
// rows x 128 bytes, zeros past M) and is overwritten in place: a lane writes only the 8 bytes of
// each row that it read.
template <typename Tin, typename T, RowStats kStats, bool kInTile = false>
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
      if constexpr (kInTile) {
        static_assert(sizeof(Tin) == 2, "x in the tile is 16-bit");
        const int r = 16 * warp + 8 * pass + i;
        v[i] = mma::load4(reinterpret_cast<const Tin*>(a_tile + (lane / 16) * 64 * 128 + swizzled(r, lane % 16)));
      } else {
        v[i] = x_row_quad(x, row, M, 4 * lane);
      }
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

// The LayerNorm backward of a warp's 16 rows of c = 128 (rows 16 warp + g + 8 h of its
// warpgroup, global rows row0 + g + 8 h, lane 4 g + t) from dxhat' in two m64n64 accumulators
// (columns 0..63, 64..127), mean and rstd of the same rows, stored as dx (plus dx_add, a
// residual stream's gradient in dx's layout, when it is not null, before dx's one rounding):
//   dxhat = dxhat' * ln_w,  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
// By rows: per h the accumulators go through the warp's exchange buffer (2 KB at lo for
// columns 0..63 and 2 KB at hi for 64..127, 8 rows each) and half-warps take rows 2q and
// 2q + 1, a lane columns 4 l .. + 3 and 64 + 4 l .. + 3 (l = lane % 16). A lane holds 8 values
// of ln_w, not 32; a row's sums run over 16 lanes; every load of x and dx_add and every store
// of dx covers 128 contiguous bytes of a row or more. In the accumulator layout (a quad of
// lanes per row, 4-byte pairs) the same pass was a chain of dependent pairs per thread: 45% of
// the LayerNorm+Linear dx kernel's stall samples (Nsight Compute, N = 768, H100). x4(r, col)
// gives x's values at columns col .. col + 3 of the warp's row r (0..15; zeros past M).
// kLoadsFirst issues an h's x and dx_add loads before its exchange (one round trip per h, for
// rows read from L2; 64 registers more) instead of per row pair. The buffer's 16-byte chunks
// are XOR-swizzled by twice the row, which keeps the exchange free of bank conflicts (a
// 16-lane phase of 8-byte stores, 8-lane phases of 16-byte loads). dx and dx_add must be
// 16-byte aligned (8 for 16-bit Tin); the caller's last use of the buffer must be over, and a
// warp barrier ends the helper, so that the warp may write the buffer again.
template <typename Tin, bool kLoadsFirst, typename X4>
__device__ __forceinline__ void layernorm_backward_by_rows(const float (&acc)[2][32], float* lo, float* hi,
                                                           int64_t row0, int64_t M, const float (&mean)[2],
                                                           const float (&rstd)[2], const float* ln_w, X4&& x4,
                                                           Tin* dx, const Tin* dx_add) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int half = lane / 16, l = lane % 16;  // this lane's rows 2q + half
  const float4 w_lo = *reinterpret_cast<const float4*>(ln_w + 4 * l);
  const float4 w_hi = *reinterpret_cast<const float4*>(ln_w + 64 + 4 * l);
  const float gw[8] = {w_lo.x, w_lo.y, w_lo.z, w_lo.w, w_hi.x, w_hi.y, w_hi.z, w_hi.w};
  float* const buf[2] = {lo, hi};
  const auto* quads_lo = reinterpret_cast<const float4*>(lo);
  const auto* quads_hi = reinterpret_cast<const float4*>(hi);
  constexpr int kLoaded = kLoadsFirst ? 4 : 1;  // row pairs whose loads are in flight together
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float4 xv[kLoaded][2], add[kLoaded][2];
    auto load_rows = [&](int q, int at) {
      const int r = 2 * q + half + 8 * h;
      const int64_t row = row0 + r;
      xv[at][0] = x4(r, 4 * l);
      xv[at][1] = x4(r, 64 + 4 * l);
      const bool adds = dx_add != nullptr && row < M;
      add[at][0] = adds ? mma::load4(dx_add + row * 128 + 4 * l) : zero;
      add[at][1] = adds ? mma::load4(dx_add + row * 128 + 64 + 4 * l) : zero;
    };
    if constexpr (kLoadsFirst) {
#pragma unroll
      for (int q = 0; q < 4; ++q) load_rows(q, q);
    }
    __syncwarp();  // the previous h's reads of the buffer are done
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int chunk = 2 * c + t / 2;  // of columns 64 a + 8 c + 2 t, + 1 (4 floats a chunk)
        reinterpret_cast<float2*>(buf[a])[g * 32 + 2 * (chunk ^ (2 * g)) + t % 2] =
            make_float2(acc[a][4 * c + 2 * h], acc[a][4 * c + 2 * h + 1]);
      }
    __syncwarp();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = 2 * q + half;  // row g = r of this h
      const int at = kLoadsFirst ? q : 0;
      if constexpr (!kLoadsFirst) load_rows(q, 0);
      const float mu = __shfl_sync(0xffffffffu, mean[h], 4 * r), rs = __shfl_sync(0xffffffffu, rstd[h], 4 * r);
      const float4 d_lo = quads_lo[r * 16 + (l ^ (2 * r))], d_hi = quads_hi[r * 16 + (l ^ (2 * r))];
      const float dxh[8] = {d_lo.x, d_lo.y, d_lo.z, d_lo.w, d_hi.x, d_hi.y, d_hi.z, d_hi.w};
      const float4 x_lo = xv[at][0], x_hi = xv[at][1], a_lo = add[at][0], a_hi = add[at][1];
      const float xs[8] = {x_lo.x, x_lo.y, x_lo.z, x_lo.w, x_hi.x, x_hi.y, x_hi.z, x_hi.w};
      const float ad[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      float d[8], xh[8], s1 = 0.f, s2 = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        d[k] = dxh[k] * gw[k];
        xh[k] = (xs[k] - mu) * rs;
        s1 += d[k];
        s2 += d[k] * xh[k];
      }
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) {
        s1 += __shfl_xor_sync(0xffffffffu, s1, o);
        s2 += __shfl_xor_sync(0xffffffffu, s2, o);
      }
      s1 *= 1.f / 128;
      s2 *= 1.f / 128;
      const int64_t row = row0 + r + 8 * h;
      if (row >= M) continue;
      float out[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) out[k] = rs * (d[k] - s1 - xh[k] * s2);
      if (dx_add != nullptr) {  // not as + 0: that would round -0 to +0 and cost the kernels without an addend
#pragma unroll
        for (int k = 0; k < 8; ++k) out[k] += ad[k];
      }
      mma::store4(dx + row * 128 + 4 * l, out[0], out[1], out[2], out[3]);
      mma::store4(dx + row * 128 + 64 + 4 * l, out[4], out[5], out[6], out[7]);
    }
  }
  __syncwarp();  // every lane's reads of the buffer are done before the warp writes it again
}

// layernorm_backward_by_rows for the fused backward kernels that hold x in global memory (L2
// since their prologue read it) and exchange through the warp's own 16 rows of their two-panel
// A tile (64 rows of 128 bytes a panel, the 128-byte swizzle): those rows' last reader, the
// tile's final projection, was waited for, and the next tile's LayerNorm writes them from the
// same warp. row0 is the warpgroup's first row; x's loads are issued an h at a time.
template <typename Tin>
__device__ __forceinline__ void layernorm_backward_through_a_tile(const float (&acc)[2][32], unsigned char* a_tile,
                                                                  int warp, int64_t row0, int64_t M,
                                                                  const float (&mean)[2], const float (&rstd)[2],
                                                                  const float* ln_w, const Tin* x, Tin* dx,
                                                                  const Tin* dx_add) {
  const int64_t warp_row0 = row0 + 16 * warp;
  auto x4 = [&](int r, int col) { return x_row_quad(x, warp_row0 + r, M, col); };
  float* exchange = reinterpret_cast<float*>(a_tile + 16 * warp * 128);
  layernorm_backward_by_rows<Tin, true>(acc, exchange, exchange + 64 * 128 / 4, warp_row0, M, mean, rstd, ln_w, x4,
                                        dx, dx_add);
}

#endif  // MEGAFOLD_SM90A_DEVICE

}  // namespace megafold::ops::cuda
