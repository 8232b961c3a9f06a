// Tensor-core kernels of layernorm_linear for c_in = 128 (see layernorm_linear_cuda.h).
//
// All three main kernels run 8 warps on tiles whose rows are padded to 136 elements, so the
// 8 rows an ldmatrix reads start 272 bytes apart and hit distinct bank groups.
//   forward_kernel  block = 128 rows of x: LayerNorm in registers (one warp per 16 rows, a
//                   lane per 4 columns), normalised rows to shared memory once, their A
//                   fragments to registers once; then the weight is streamed through in
//                   64-row tiles (cp.async, double buffered) and each warp's 16x64 output
//                   tile leaves through its own shared staging tile as 16-byte row stores.
//   dx_kernel       block = 128 rows: dxhat' = dy @ w over c_out in 64-wide steps (dy and w
//                   tiles double buffered), then the LayerNorm backward on the accumulators:
//                   the row sums it needs are quad shuffles plus one exchange between the
//                   two warps sharing a row; x is re-read per fragment.
//   g_kernel        block = (128 output features, a chunk of rows): G = dy^T @ xhat with
//                   dy^T read by transposing ldmatrix, xhat rebuilt from x, mean and rstd
//                   into shared memory one 32-row step ahead; colsum(dy) rides along as one
//                   more mma against a ones operand.
// Shared memory bandwidth, not DRAM, limits all three (Nsight Compute: L1/shared pipe ~70%
// busy, DRAM ~30%), hence warp tiles of 32 rows so that fragments are reused from registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/layernorm_linear/layernorm_linear_cuda.h"
#include "ops/kernel_dispatch.cuh"
#include "ops/launch.cuh"
#include "ops/ordered_sum.cuh"

namespace megafold::ops::cuda {
namespace {

using namespace megafold::mma;

constexpr int kK = static_cast<int>(kLayerNormLinearCin);
constexpr int kLd = kK + 8;       // padded row of a 128-wide tile
constexpr int kThreads = kBlockThreads;  // 8 warps
constexpr int kRows = 128;        // rows of x per forward / dx block (16 per warp)
constexpr int kTileN = 64;        // c_out per streamed step (forward, dx)
constexpr int kLdN = kTileN + 8;  // padded row of a 64-wide tile
constexpr int kStepM = 32;        // rows per step of g_kernel
constexpr int kFeatures = 128;    // c_out per g_kernel block (16 per warp)
constexpr int kLdF = kFeatures + 8;

// ---- tile loaders (cp.async; rows or columns outside the matrix arrive as zeros) -----------

// Rows [n0, n0 + rows) of w [N, 128] into dst [rows][kLd].
template <typename T, int rows>
__device__ __forceinline__ void load_weight_rows(T* dst, const T* w, int64_t n0, int64_t N) {
#pragma unroll
  for (int i = threadIdx.x; i < rows * (kK / 8); i += kThreads) {
    const int r = i / (kK / 8), c = (i % (kK / 8)) * 8;
    const bool valid = n0 + r < N;
    cp_async16(dst + r * kLd + c, w + (valid ? (n0 + r) * kK + c : 0), valid);
  }
}

// dy[m0 + r][n0 + c] for r < rows, c < cols into dst [rows][ld]. Rows of dy are 16-byte
// aligned when N % 8 == 0 (whole 8-element chunks); otherwise they are copied in pairs.
template <typename T, int rows, int cols, int ld>
__device__ __forceinline__ void load_dy_tile(T* dst, const T* dy, int64_t m0, int64_t n0, int64_t M,
                                             int64_t N) {
  if (N % 8 == 0) {
#pragma unroll
    for (int i = threadIdx.x; i < rows * (cols / 8); i += kThreads) {
      const int r = i / (cols / 8), c = (i % (cols / 8)) * 8;
      const bool valid = m0 + r < M && n0 + c < N;
      cp_async16(dst + r * ld + c, dy + (valid ? (m0 + r) * N + n0 + c : 0), valid);
    }
  } else {
#pragma unroll 4
    for (int i = threadIdx.x; i < rows * (cols / 2); i += kThreads) {
      const int r = i / (cols / 2), c = (i % (cols / 2)) * 2;
      const bool valid = m0 + r < M && n0 + c < N;
      cp_async4(dst + r * ld + c, dy + (valid ? (m0 + r) * N + n0 + c : 0), valid);
    }
  }
}

// ---- forward -------------------------------------------------------------------------------

constexpr int kLdS = 32 + 8;      // padded row of a warp's 32x32 output staging tile
constexpr int kForwardSmem = (kRows * kLd + 2 * kTileN * kLd + 8 * 32 * kLdS) * 2;

template <typename Tin, typename T>
__global__ void __launch_bounds__(kThreads, 2) forward_kernel(const LayerNormLinearParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* a_s = reinterpret_cast<T*>(smem);  // [kRows][kLd] normalised, scaled and shifted rows
  T* w_s = a_s + kRows * kLd;           // 2 x [kTileN][kLd]
  T* o_s = w_s + 2 * kTileN * kLd;      // 8 x [32][kLdS] output staging, one per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const T* w = static_cast<const T*>(p.w);
  const int n_tiles = static_cast<int>((p.N + kTileN - 1) / kTileN);
  load_weight_rows<T, kTileN>(w_s, w, 0, p.N);
  cp_async_commit();

  // LayerNorm of rows 16*warp .. +15; lane holds columns 4*lane .. +3. All loads first.
  const Tin* x = static_cast<const Tin*>(p.x);
  float4 v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int64_t row = row0 + warp * 16 + i;
    v[i] = row < p.M ? load4(x + row * kK + 4 * lane) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const float4 gw = *reinterpret_cast<const float4*>(p.ln_w + 4 * lane);
  const float4 gb = *reinterpret_cast<const float4*>(p.ln_b + 4 * lane);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = warp * 16 + i;
    const float mean = warp_sum(v[i].x + v[i].y + v[i].z + v[i].w) * (1.f / kK);
    const float d0 = v[i].x - mean, d1 = v[i].y - mean, d2 = v[i].z - mean, d3 = v[i].w - mean;
    const float rstd = rsqrtf(warp_sum(d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3) * (1.f / kK) + p.eps);
    *reinterpret_cast<uint2*>(a_s + r * kLd + 4 * lane) =
        make_uint2(pack2<T>(d0 * rstd * gw.x + gb.x, d1 * rstd * gw.y + gb.y),
                   pack2<T>(d2 * rstd * gw.z + gb.z, d3 * rstd * gw.w + gb.w));
    if (lane == 0 && row0 + r < p.M) {
      p.mean[row0 + r] = mean;
      p.rstd[row0 + r] = rstd;
    }
  }
  __syncthreads();
  // Warp grid 4 x 2 over each 128 x 64 output tile: warp (rg, ch) owns rows 32*rg .. +31 and
  // columns 32*ch .. +31, so a weight fragment read from shared memory feeds two row blocks
  // (half the shared-memory reads of one-warp-per-16-rows; shared memory is the limiter).
  const int rg = warp / 2, ch = warp % 2;
  uint32_t a[2][kK / 16][4];  // this warp's 32 rows as A fragments, reused for every output tile
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ks = 0; ks < kK / 16; ++ks)
      ldmatrix_x4(a[mi][ks], a_s + (rg * 32 + mi * 16 + lane % 16) * kLd + ks * 16 + (lane / 16) * 8);

  T* y = static_cast<T*>(p.y);
  const int g = lane / 4, t = lane % 4;
  T* stage = o_s + warp * 32 * kLdS;
  const int64_t row_w = row0 + rg * 32;
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // weight tile j is in for every warp; tile j-1's readers are done
    if (j + 1 < n_tiles) load_weight_rows<T, kTileN>(w_s + ((j + 1) % 2) * kTileN * kLd, w, (j + 1) * kTileN, p.N);
    cp_async_commit();
    const T* wt = w_s + (j % 2) * kTileN * kLd + ch * 32 * kLd;
    float acc[2][4][4] = {};
#pragma unroll
    for (int ks = 0; ks < kK / 16; ++ks) {
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, wt + (np * 16 + (lane / 16) * 8 + lane % 8) * kLd + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma16816<T>(acc[mi][2 * np], a[mi][ks], b[0], b[1]);
          mma16816<T>(acc[mi][2 * np + 1], a[mi][ks], b[2], b[3]);
        }
      }
    }
    // Each warp stages its own 32x32 output tile and stores it as whole row segments, so
    // only a warp barrier separates the two.
    const int64_t n0 = static_cast<int64_t>(j) * kTileN + ch * 32;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = nt * 8 + 2 * t;
      float b0 = 0.f, b1 = 0.f;
      if (p.bias != nullptr && n0 + col < p.N) b0 = p.bias[n0 + col], b1 = p.bias[n0 + col + 1];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        *reinterpret_cast<uint32_t*>(stage + (mi * 16 + g) * kLdS + col) = pack2<T>(acc[mi][nt][0] + b0, acc[mi][nt][1] + b1);
        *reinterpret_cast<uint32_t*>(stage + (mi * 16 + g + 8) * kLdS + col) = pack2<T>(acc[mi][nt][2] + b0, acc[mi][nt][3] + b1);
      }
    }
    __syncwarp();
    // Widest store the row alignment allows (y rows are N elements long, N even).
    if (p.N % 8 == 0) {
#pragma unroll
      for (int i = lane; i < 32 * 4; i += 32) {
        const int r = i / 4, c = (i % 4) * 8;
        if (row_w + r < p.M && n0 + c < p.N)
          *reinterpret_cast<uint4*>(y + (row_w + r) * p.N + n0 + c) = *reinterpret_cast<const uint4*>(stage + r * kLdS + c);
      }
    } else {
      const int vec = p.N % 4 == 0 ? 4 : 2;
      const int per_row = 32 / vec;
      for (int i = lane; i < 32 * per_row; i += 32) {
        const int r = i / per_row, c = (i % per_row) * vec;
        if (row_w + r >= p.M || n0 + c >= p.N) continue;
        const T* src = stage + r * kLdS + c;
        T* dst = y + (row_w + r) * p.N + n0 + c;
        if (vec == 4) *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
        else *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
      }
    }
    __syncwarp();  // the staging tile is rewritten by the next step
  }
}

// ---- backward: dx --------------------------------------------------------------------------

constexpr int kDxSmem = (2 * kRows * kLdN + 2 * kTileN * kLd) * 2;

template <typename Tin, typename T>
__global__ void __launch_bounds__(kThreads, 2) dx_kernel(const LayerNormLinearParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* dy_s = reinterpret_cast<T*>(smem);  // 2 x [kRows][kLdN]
  T* w_s = dy_s + 2 * kRows * kLdN;      // 2 x [kTileN][kLd]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const T* w = static_cast<const T*>(p.w);
  const T* dy = static_cast<const T*>(p.dy);
  const int n_tiles = static_cast<int>((p.N + kTileN - 1) / kTileN);
  load_dy_tile<T, kRows, kTileN, kLdN>(dy_s, dy, row0, 0, p.M, p.N);
  load_weight_rows<T, kTileN>(w_s, w, 0, p.N);
  cp_async_commit();

  // acc = dxhat' (the gradient of the scaled and shifted rows). Warp grid 4 x 2: warp
  // (rg, kh) owns rows 32*rg .. +31 and columns 64*kh .. +63, so each fragment read from
  // shared memory feeds 4 (dy) or 2 (w) products.
  const int rg = warp / 2, kh = warp % 2;
  float acc[2][8][4] = {};
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_tiles) {
      load_dy_tile<T, kRows, kTileN, kLdN>(dy_s + ((j + 1) % 2) * kRows * kLdN, dy, row0, (j + 1) * kTileN, p.M, p.N);
      load_weight_rows<T, kTileN>(w_s + ((j + 1) % 2) * kTileN * kLd, w, (j + 1) * kTileN, p.N);
    }
    cp_async_commit();
    const T* dyt = dy_s + (j % 2) * kRows * kLdN + rg * 32 * kLdN;
    const T* wt = w_s + (j % 2) * kTileN * kLd + kh * 64;
#pragma unroll
    for (int ks = 0; ks < kTileN / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldmatrix_x4(a[mi], dyt + (mi * 16 + lane % 16) * kLdN + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int kp = 0; kp < 4; ++kp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, wt + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLd + kp * 16 + (lane / 16) * 8);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma16816<T>(acc[mi][2 * kp], a[mi], b[0], b[1]);
          mma16816<T>(acc[mi][2 * kp + 1], a[mi], b[2], b[3]);
        }
      }
    }
  }

  // LayerNorm backward for this lane's rows 32*rg + 16*mi + g + 8*h (mi, h in {0, 1}):
  //   dxhat = dxhat' * ln_w,  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
  // Row sums: over the lane's columns, the quad, then the two column halves (warps kh = 0, 1)
  // through shared memory, always added as half 0 + half 1.
  const int g = lane / 4, t = lane % 4;
  const Tin* x = static_cast<const Tin*>(p.x);
  int64_t rows[4];
  float mean[4], rstd[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    rows[q] = row0 + rg * 32 + (q / 2) * 16 + g + 8 * (q % 2);
    const bool valid = rows[q] < p.M;
    mean[q] = valid ? p.mean[rows[q]] : 0.f;
    rstd[q] = valid ? p.rstd[rows[q]] : 0.f;
  }
  auto xhat = [&](int q, int col) {
    const float2 v = rows[q] < p.M ? load2(x + rows[q] * kK + col) : make_float2(0.f, 0.f);
    return make_float2((v.x - mean[q]) * rstd[q], (v.y - mean[q]) * rstd[q]);
  };
  float s1[4] = {}, s2[4] = {};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int col = kh * 64 + nt * 8 + 2 * t;
    const float2 gw = *reinterpret_cast<const float2*>(p.ln_w + col);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 xh = xhat(q, col);
      const float d0 = acc[q / 2][nt][2 * (q % 2)] * gw.x, d1 = acc[q / 2][nt][2 * (q % 2) + 1] * gw.y;
      s1[q] += d0 + d1;
      s2[q] += d0 * xh.x + d1 * xh.y;
    }
  }
  float2* sums = reinterpret_cast<float2*>(w_s);  // [2 halves][kRows] (s1, s2); the tiles are done
  __syncthreads();
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      s1[q] += __shfl_xor_sync(0xffffffffu, s1[q], o);
      s2[q] += __shfl_xor_sync(0xffffffffu, s2[q], o);
    }
    if (t == 0) sums[kh * kRows + rg * 32 + (q / 2) * 16 + g + 8 * (q % 2)] = make_float2(s1[q], s2[q]);
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int r = rg * 32 + (q / 2) * 16 + g + 8 * (q % 2);
    const float2 h0 = sums[r], h1 = sums[kRows + r];
    s1[q] = (h0.x + h1.x) * (1.f / kK);
    s2[q] = (h0.y + h1.y) * (1.f / kK);
  }
  Tin* dx = static_cast<Tin*>(p.dx);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int col = kh * 64 + nt * 8 + 2 * t;
    const float2 gw = *reinterpret_cast<const float2*>(p.ln_w + col);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (rows[q] >= p.M) continue;
      const float2 xh = xhat(q, col);
      const float* c = acc[q / 2][nt] + 2 * (q % 2);
      store2(dx + rows[q] * kK + col, rstd[q] * (c[0] * gw.x - s1[q] - xh.x * s2[q]),
             rstd[q] * (c[1] * gw.y - s1[q] - xh.y * s2[q]));
    }
  }
}

// ---- backward: G = dy^T xhat and colsum(dy), per row chunk ---------------------------------

constexpr int kGSmem = (2 * kStepM * kLdF + 2 * kStepM * kLd) * 2;

// Per-thread share of one step of x: row tid / 8, columns (tid % 8) * 16 .. +15, held as raw
// 16-byte vectors between the load (issued before a step's products) and the normalisation
// (after them).
constexpr int kSliceElems = kStepM * kK / kThreads;  // 16
static_assert(kSliceElems == 16, "x slice mapping assumes 16 elements per thread");

template <typename Tin>
struct XSlice {
  static constexpr int kVecs = kSliceElems * static_cast<int>(sizeof(Tin)) / 16;
  uint4 raw[kVecs];
};

template <typename Tin>
__device__ __forceinline__ void load_x_slice(XSlice<Tin>& s, const Tin* x, int64_t m0, int64_t M) {
  const int64_t row = m0 + threadIdx.x / 8;
  const uint4* src = reinterpret_cast<const uint4*>(x + row * kK + (threadIdx.x % 8) * kSliceElems);
#pragma unroll
  for (int i = 0; i < XSlice<Tin>::kVecs; ++i) s.raw[i] = row < M ? src[i] : make_uint4(0, 0, 0, 0);
}

// xhat = (x - mean) * rstd in T, into dst [kStepM][kLd]; rows past M are zeros.
template <typename Tin, typename T>
__device__ __forceinline__ void store_xhat_slice(T* dst, const XSlice<Tin>& s, const float* mean_g,
                                                 const float* rstd_g, int64_t m0, int64_t M) {
  const int r = threadIdx.x / 8;
  const int64_t row = m0 + r;
  const float mean = row < M ? mean_g[row] : 0.f, rstd = row < M ? rstd_g[row] : 0.f;
  float v[kSliceElems];
  if constexpr (std::is_same_v<Tin, float>) {
#pragma unroll
    for (int i = 0; i < XSlice<Tin>::kVecs; ++i) {
      const float4 f = reinterpret_cast<const float4&>(s.raw[i]);
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < XSlice<Tin>::kVecs; ++i) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(&s.raw[i]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = unpack2<Tin>(w[j]);
        v[8 * i + 2 * j] = f.x, v[8 * i + 2 * j + 1] = f.y;
      }
    }
  }
  uint4* out = reinterpret_cast<uint4*>(dst + r * kLd + (threadIdx.x % 8) * kSliceElems);
#pragma unroll
  for (int i = 0; i < kSliceElems / 8; ++i) {
    uint32_t q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = pack2<T>((v[8 * i + 2 * j] - mean) * rstd, (v[8 * i + 2 * j + 1] - mean) * rstd);
    out[i] = make_uint4(q[0], q[1], q[2], q[3]);
  }
}

template <typename Tin, typename T>
__global__ void __launch_bounds__(kThreads, 2) g_kernel(const LayerNormLinearParams p, int64_t steps_per_chunk) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* dy_s = reinterpret_cast<T*>(smem);  // 2 x [kStepM][kLdF]: dy rows, this block's 128 features
  T* xh_s = dy_s + 2 * kStepM * kLdF;    // 2 x [kStepM][kLd]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kFeatures;
  const int64_t chunk = blockIdx.y;
  const int64_t total_steps = (p.M + kStepM - 1) / kStepM;
  const int64_t step0 = chunk * steps_per_chunk;
  const int64_t steps = total_steps - step0 < steps_per_chunk ? total_steps - step0 : steps_per_chunk;
  const T* dy = static_cast<const T*>(p.dy);
  const Tin* x = static_cast<const Tin*>(p.x);

  XSlice<Tin> slice;
  load_dy_tile<T, kStepM, kFeatures, kLdF>(dy_s, dy, step0 * kStepM, n0, p.M, p.N);
  cp_async_commit();
  load_x_slice(slice, x, step0 * kStepM, p.M);
  store_xhat_slice<Tin, T>(xh_s, slice, p.mean, p.rstd, step0 * kStepM, p.M);

  // Warp grid 4 x 2: warp (fr, kh) owns features 32*fr .. +31 and columns 64*kh .. +63 of G,
  // so each dy^T fragment feeds 8 products and each xhat fragment 2 (shared memory is the
  // limiter). The kh = 0 warps also carry colsum(dy).
  const int fr = warp / 2, kh = warp % 2;
  float acc[2][8][4] = {};
  float acc_db[2][4] = {};
  const uint32_t ones = pack2<T>(1.f, 1.f);
  for (int64_t i = 0; i < steps; ++i) {
    cp_async_wait<0>();
    __syncthreads();  // step i's dy and xhat are in; step i-1's readers are done
    const int64_t m_next = (step0 + i + 1) * kStepM;
    const bool more = i + 1 < steps;
    if (more) {
      load_dy_tile<T, kStepM, kFeatures, kLdF>(dy_s + ((i + 1) % 2) * kStepM * kLdF, dy, m_next, n0, p.M, p.N);
      load_x_slice(slice, x, m_next, p.M);
    }
    cp_async_commit();
    const T* dyt = dy_s + (i % 2) * kStepM * kLdF + fr * 32;
    const T* xht = xh_s + (i % 2) * kStepM * kLd + kh * 64;
#pragma unroll
    for (int ks = 0; ks < kStepM / 16; ++ks) {
      uint32_t a[2][4];  // dy^T: features as rows, the step's rows of dy as the reduction
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ldmatrix_x4_trans(a[mi], dyt + (ks * 16 + (lane / 16) * 8 + lane % 8) * kLdF + mi * 16 + ((lane / 8) % 2) * 8);
        if (kh == 0) mma16816<T>(acc_db[mi], a[mi], ones, ones);
      }
#pragma unroll
      for (int kp = 0; kp < 4; ++kp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, xht + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLd + kp * 16 + (lane / 16) * 8);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma16816<T>(acc[mi][2 * kp], a[mi], b[0], b[1]);
          mma16816<T>(acc[mi][2 * kp + 1], a[mi], b[2], b[3]);
        }
      }
    }
    if (more) store_xhat_slice<Tin, T>(xh_s + ((i + 1) % 2) * kStepM * kLd, slice, p.mean, p.rstd, m_next, p.M);
  }

  const int g = lane / 4, t = lane % 4;
  float* gp = p.g_partial + chunk * p.N * kK;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n0 + fr * 32 + mi * 16 + g + 8 * h;
      if (n >= p.N) continue;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        *reinterpret_cast<float2*>(gp + n * kK + kh * 64 + nt * 8 + 2 * t) =
            make_float2(acc[mi][nt][2 * h], acc[mi][nt][2 * h + 1]);
      if (kh == 0 && t == 0) p.db_partial[chunk * p.N + n] = acc_db[mi][2 * h];
    }
  }
}

// ---- backward: the small reductions --------------------------------------------------------

// G = the sum of the chunk partials; db likewise. Block = 32 consecutive elements x kSumLanes
// lanes of chunks: lane l adds chunks l, l + kSumLanes, ... in order, then the lanes' sums are
// added in lane order. A fixed order that depends on the shape only (bitwise repeatable on any
// GPU), with kSumLanes times the parallelism of one thread per element walking every chunk,
// which left c_out = 128 (16K elements, hundreds of chunks) at ~0.1 ms of load latency.
constexpr int kSumLanes = 8;

__global__ void __launch_bounds__(32 * kSumLanes) sum_chunks_kernel(const LayerNormLinearParams p, int64_t chunks) {
  __shared__ float lanes[2][kSumLanes][32];
  const int64_t size = p.N * kK, e = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int lane = threadIdx.y;
  const int64_t mine = lane < chunks ? (chunks - lane + kSumLanes - 1) / kSumLanes : 0;  // chunks of this lane
  float s = e < size ? ordered_sum(p.g_partial + lane * size + e, mine, kSumLanes * size) : 0.f;
  float d = e < p.N ? ordered_sum(p.db_partial + lane * p.N + e, mine, kSumLanes * p.N) : 0.f;
  lanes[0][lane][threadIdx.x] = s;
  lanes[1][lane][threadIdx.x] = d;
  __syncthreads();
  if (lane != 0) return;
  s = d = 0.f;
  for (int l = 0; l < kSumLanes; ++l) {
    s += lanes[0][l][threadIdx.x];
    d += lanes[1][l][threadIdx.x];
  }
  if (e < size) p.g[e] = s;
  if (e < p.N) p.db[e] = d;
}

// Block k: d ln_w[k] = sum_n w[n,k] G[n,k] and d ln_b[k] = sum_n db[n] w[n,k], each summed
// by a fixed tree; and dw[:, k] = G[:, k] * ln_w[k] + db * ln_b[k].
template <typename T>
__global__ void finish_kernel(const LayerNormLinearParams p) {
  __shared__ float red[2][kThreads];
  const int k = blockIdx.x;
  const T* w = static_cast<const T*>(p.w);
  float sw = 0.f, sb = 0.f;
  for (int64_t n = threadIdx.x; n < p.N; n += kThreads) {
    const float wk = static_cast<float>(w[n * kK + k]), gk = p.g[n * kK + k], db = p.db[n];
    sw += wk * gk;
    sb += db * wk;
    p.dw[n * kK + k] = gk * p.ln_w[k] + db * p.ln_b[k];
  }
  red[0][threadIdx.x] = sw;
  red[1][threadIdx.x] = sb;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      red[0][threadIdx.x] += red[0][threadIdx.x + s];
      red[1][threadIdx.x] += red[1][threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    p.d_ln_w[k] = red[0][0];
    p.d_ln_b[k] = red[1][0];
  }
}

// ---- launch --------------------------------------------------------------------------------

template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int smem_bytes, cudaStream_t stream, Args... args) {
  launch_kernel(kernel, grid, kThreads, smem_bytes, stream, args...);
}

// Rows per chunk of the weight-gradient reduction: whole 64-row steps (the sm_90a kernel's; two
// of this file's), about 512 blocks over the feature tiles and row chunks for this file's
// kernel (over four waves of one block per SM on an A100: a short last wave) and 256 for the
// sm_90a one (one wave of two blocks per SM on an H100/H200: the rows of a chunk stream
// through one block, and the partials the sum reads back are half those of 512). A function
// of M, N and the kernel set only, so the sum's order, hence every bit, is the same on any GPU
// of a kind.
int64_t rows_per_chunk(int64_t M, int64_t N, bool sm90) {
  const int64_t steps = (M + 63) / 64;
  const int64_t feature_tiles = (N + kFeatures - 1) / kFeatures;
  const int64_t blocks = sm90 ? 256 : 512;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(steps, blocks / feature_tiles));
  return (steps + chunks - 1) / chunks * 64;
}

}  // namespace

int64_t layernorm_linear_dw_chunks(int64_t M, int64_t N, bool sm90) {
  if (M == 0) return 0;
  const int64_t per = rows_per_chunk(M, N, sm90);
  return (M + per - 1) / per;
}

void layernorm_linear_forward(const LayerNormLinearParams& p, void* stream) {
  if (p.M == 0 || p.N == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.sm90) return layernorm_linear_forward_wgmma(p, stream);
  const dim3 grid(static_cast<unsigned int>((p.M + kRows - 1) / kRows));
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    launch(forward_kernel<decltype(tin), decltype(t)>, grid, kForwardSmem, s, p);
  });
}

void layernorm_linear_backward(const LayerNormLinearParams& p, void* stream) {
  if (p.N == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.M == 0) {
    MF_CUDA_CHECK(cudaMemsetAsync(p.dw, 0, p.N * kK * sizeof(float), s));
    MF_CUDA_CHECK(cudaMemsetAsync(p.db, 0, p.N * sizeof(float), s));
    MF_CUDA_CHECK(cudaMemsetAsync(p.d_ln_w, 0, kK * sizeof(float), s));
    MF_CUDA_CHECK(cudaMemsetAsync(p.d_ln_b, 0, kK * sizeof(float), s));
    return;
  }
  const int64_t per = rows_per_chunk(p.M, p.N, p.sm90);
  const int64_t chunks = layernorm_linear_dw_chunks(p.M, p.N, p.sm90);
  if (p.sm90) layernorm_linear_backward_wgmma(p, per, chunks, stream);
  const dim3 dx_grid(static_cast<unsigned int>((p.M + kRows - 1) / kRows));
  const dim3 g_grid(static_cast<unsigned int>((p.N + kFeatures - 1) / kFeatures), static_cast<unsigned int>(chunks));
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    using Tin = decltype(tin);
    using T = decltype(t);
    if (!p.sm90) {
      if (p.dx != nullptr) launch(dx_kernel<Tin, T>, dx_grid, kDxSmem, s, p);
      launch(g_kernel<Tin, T>, g_grid, kGSmem, s, p, per / kStepM);
    }
    const dim3 sum_grid(static_cast<unsigned int>((p.N * kK + 31) / 32));
    launch_kernel(sum_chunks_kernel, sum_grid, dim3(32, kSumLanes), 0, s, p, chunks);
    launch_kernel(finish_kernel<T>, kK, kThreads, 0, s, p);
  });
}

}  // namespace megafold::ops::cuda
