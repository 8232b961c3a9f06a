// Fused forward of swiglu_transition on tensor cores (see swiglu_transition_cuda.h).
//
// A block owns R rows and runs 8 warps as a 4 x 2 grid over every product's output tile:
//   1. LayerNorm(x) * ln_w + ln_b of its rows into shared memory (fp32 statistics).
//   2. For each chunk of HC hidden features (weights double buffered through cp.async):
//      a, b = xhat @ w_in[chunk]^T, w_in[h + chunk]^T   in fp32 registers (warp: R/4 rows x HC/2)
//      h_s  = silu(a) * b                                16-bit, shared memory only
//      acc += h_s @ w_out[:, chunk]^T                    fp32 registers (warp: R/4 rows x c/2)
//   3. acc staged through shared memory and stored as 16-byte row segments.
// The 4c-wide hidden layer never leaves the SM: per row, global traffic is one read of x and
// one write of y, and the weights come from L2 once per block.
//
// Configurations: c = 128 with R = 128, HC = 64 (156 KB shared memory) and c = 384 with R = 64,
// HC = 32 (212 KB); one block per SM either way. Row pitches are padded by 8 elements so the
// 8 rows an ldmatrix reads fall in distinct 16-byte bank groups.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/kernel_dispatch.cuh"
#include "ops/launch.cuh"
#include "ops/swiglu_transition/swiglu_transition_cuda.h"

namespace megafold::ops::cuda {
namespace {

using namespace megafold::mma;

constexpr int kThreads = kBlockThreads;

template <int C, int R, int HC>
struct Shape {
  static constexpr int kLdC = C + 8;            // pitch of xhat and w_in rows
  static constexpr int kLdH = HC + 8;           // pitch of h and w_out rows (one chunk wide)
  static constexpr int kWarpRows = R / 4;
  static constexpr int kMi = kWarpRows / 16;    // 16-row fragments per warp
  static constexpr int kUpCols = HC / 2;        // hidden features per warp (of a and of b)
  static constexpr int kDownCols = C / 2;       // output features per warp
  static constexpr int kXElems = R * kLdC;
  static constexpr int kWinElems = 2 * HC * kLdC;  // a rows of the chunk, then its b rows
  static constexpr int kWoutElems = C * kLdH;
  static constexpr int kHElems = R * kLdH;
  static constexpr int kSmemBytes = 2 * (kXElems + 2 * kWinElems + 2 * kWoutElems + kHElems);
  static_assert(C % 128 == 0 && R % 64 == 0 && HC % 32 == 0, "tile shape");
  static_assert(kXElems <= 2 * kWinElems, "the output is staged in the w_in buffers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

__device__ __forceinline__ float silu(float a) { return a / (1.0f + __expf(-a)); }

// Chunk j of both weights: w_in rows [j*HC, +HC) and [h + j*HC, +HC) into win_s [2HC][kLdC],
// w_out columns [j*HC, +HC) of all C rows into wout_s [C][kLdH].
template <typename T, int C, int R, int HC>
__device__ __forceinline__ void load_chunk(T* win_s, T* wout_s, const T* w_in, const T* w_out, int64_t h, int64_t j) {
  using S = Shape<C, R, HC>;
#pragma unroll 4
  for (int i = threadIdx.x; i < 2 * HC * (C / 8); i += kThreads) {
    const int r = i / (C / 8), col = (i % (C / 8)) * 8;
    const int64_t src = (r < HC ? 0 : h - HC) + j * HC + r;
    cp_async16(win_s + r * S::kLdC + col, w_in + src * C + col, true);
  }
#pragma unroll 4
  for (int i = threadIdx.x; i < C * (HC / 8); i += kThreads) {
    const int n = i / (HC / 8), k = (i % (HC / 8)) * 8;
    cp_async16(wout_s + n * S::kLdH + k, w_out + n * h + j * HC + k, true);
  }
}

template <typename Tin, typename T, int C, int R, int HC>
__global__ void __launch_bounds__(kThreads, 1) fused_forward_kernel(const SwigluTransitionParams p) {
  using S = Shape<C, R, HC>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* x_s = reinterpret_cast<T*>(smem);   // [R][kLdC] normalised, scaled and shifted rows
  T* win_s = x_s + S::kXElems;           // 2 x [2HC][kLdC]
  T* wout_s = win_s + 2 * S::kWinElems;  // 2 x [C][kLdH]
  T* h_s = wout_s + 2 * S::kWoutElems;   // [R][kLdH] silu(a) * b of the current chunk
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const T* w_in = static_cast<const T*>(p.w_in);
  const T* w_out = static_cast<const T*>(p.w_out);
  const int chunks = static_cast<int>(p.h / HC);
  load_chunk<T, C, R, HC>(win_s, wout_s, w_in, w_out, p.h, 0);
  cp_async_commit();

  // LayerNorm: warp w owns rows w*R/8 .. +R/8-1, lane the columns 128q + 4 lane .. +3. All of
  // the warp's loads are issued before the first reduction.
  constexpr int kRowsPerWarp = R / 8, kQ = C / 128;
  const Tin* x = static_cast<const Tin*>(p.x);
  float4 v[kRowsPerWarp][kQ];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = row0 + warp * kRowsPerWarp + i;
#pragma unroll
    for (int q = 0; q < kQ; ++q)
      v[i][q] = row < p.M ? load4(x + row * C + 128 * q + 4 * lane) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < kQ; ++q) s += v[i][q].x + v[i][q].y + v[i][q].z + v[i][q].w;
    const float mean = warp_sum(s) * (1.f / C);
    float ss = 0.f;
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      v[i][q] = make_float4(v[i][q].x - mean, v[i][q].y - mean, v[i][q].z - mean, v[i][q].w - mean);
      ss += v[i][q].x * v[i][q].x + v[i][q].y * v[i][q].y + v[i][q].z * v[i][q].z + v[i][q].w * v[i][q].w;
    }
    const float rstd = rsqrtf(warp_sum(ss) * (1.f / C) + p.eps);
    T* dst = x_s + (warp * kRowsPerWarp + i) * S::kLdC + 4 * lane;
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const float4 gw = *reinterpret_cast<const float4*>(p.ln_w + 128 * q + 4 * lane);
      const float4 gb = *reinterpret_cast<const float4*>(p.ln_b + 128 * q + 4 * lane);
      const float4 d = v[i][q];
      *reinterpret_cast<uint2*>(dst + 128 * q) =
          make_uint2(pack2<T>(d.x * rstd * gw.x + gb.x, d.y * rstd * gw.y + gb.y),
                     pack2<T>(d.z * rstd * gw.z + gb.z, d.w * rstd * gw.w + gb.w));
    }
  }

  const int rg = warp / 2, ch = warp % 2;
  const int wr0 = rg * S::kWarpRows;
  float acc[S::kMi][S::kDownCols / 8][4] = {};
  for (int j = 0; j < chunks; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // chunk j's weights (and at j = 0 the rows) are in; chunk j-1's readers are done
    if (j + 1 < chunks)
      load_chunk<T, C, R, HC>(win_s + ((j + 1) % 2) * S::kWinElems, wout_s + ((j + 1) % 2) * S::kWoutElems, w_in,
                              w_out, p.h, j + 1);
    cp_async_commit();

    // a and b of this warp's rows and hidden features ch*HC/2 .. +HC/2-1.
    const T* wa = win_s + (j % 2) * S::kWinElems + ch * S::kUpCols * S::kLdC;
    const T* wb = wa + HC * S::kLdC;
    float up_a[S::kMi][S::kUpCols / 8][4] = {}, up_b[S::kMi][S::kUpCols / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < C / 16; ++ks) {
      uint32_t a[S::kMi][4];
#pragma unroll
      for (int mi = 0; mi < S::kMi; ++mi)
        ldmatrix_x4(a[mi], x_s + (wr0 + mi * 16 + lane % 16) * S::kLdC + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < S::kUpCols / 16; ++np) {
        const int off = (np * 16 + (lane / 16) * 8 + lane % 8) * S::kLdC + ks * 16 + ((lane / 8) % 2) * 8;
        uint32_t ba[4], bb[4];
        ldmatrix_x4(ba, wa + off);
        ldmatrix_x4(bb, wb + off);
#pragma unroll
        for (int mi = 0; mi < S::kMi; ++mi) {
          mma16816<T>(up_a[mi][2 * np], a[mi], ba[0], ba[1]);
          mma16816<T>(up_a[mi][2 * np + 1], a[mi], ba[2], ba[3]);
          mma16816<T>(up_b[mi][2 * np], a[mi], bb[0], bb[1]);
          mma16816<T>(up_b[mi][2 * np + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
    // h = silu(a) * b from the fp32 accumulators, rounded once to 16 bits.
#pragma unroll
    for (int mi = 0; mi < S::kMi; ++mi)
#pragma unroll
      for (int nt = 0; nt < S::kUpCols / 8; ++nt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float* ca = up_a[mi][nt] + 2 * hh;
          const float* cb = up_b[mi][nt] + 2 * hh;
          *reinterpret_cast<uint32_t*>(h_s + (wr0 + mi * 16 + g + 8 * hh) * S::kLdH + ch * S::kUpCols + nt * 8 + 2 * t) =
              pack2<T>(silu(ca[0]) * cb[0], silu(ca[1]) * cb[1]);
        }
    __syncthreads();  // the chunk's hidden rows are whole (both column halves written)

    // acc += h_s @ w_out[:, chunk]^T for this warp's rows and output features ch*C/2 .. +C/2-1.
    const T* wo = wout_s + (j % 2) * S::kWoutElems + ch * S::kDownCols * S::kLdH;
#pragma unroll
    for (int ks = 0; ks < HC / 16; ++ks) {
      uint32_t a[S::kMi][4];
#pragma unroll
      for (int mi = 0; mi < S::kMi; ++mi)
        ldmatrix_x4(a[mi], h_s + (wr0 + mi * 16 + lane % 16) * S::kLdH + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < S::kDownCols / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, wo + (np * 16 + (lane / 16) * 8 + lane % 8) * S::kLdH + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mi = 0; mi < S::kMi; ++mi) {
          mma16816<T>(acc[mi][2 * np], a[mi], b[0], b[1]);
          mma16816<T>(acc[mi][2 * np + 1], a[mi], b[2], b[3]);
        }
      }
    }
  }

  // The w_in buffers are idle once every warp has passed the last chunk's middle barrier,
  // which any warp reaching this point has: the output is staged there.
  T* stage = win_s;  // [R][kLdC]
#pragma unroll
  for (int mi = 0; mi < S::kMi; ++mi)
#pragma unroll
    for (int nt = 0; nt < S::kDownCols / 8; ++nt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        *reinterpret_cast<uint32_t*>(stage + (wr0 + mi * 16 + g + 8 * hh) * S::kLdC + ch * S::kDownCols + nt * 8 + 2 * t) =
            pack2<T>(acc[mi][nt][2 * hh], acc[mi][nt][2 * hh + 1]);
  __syncthreads();
  T* y = static_cast<T*>(p.y);
#pragma unroll 4
  for (int i = threadIdx.x; i < R * (C / 8); i += kThreads) {
    const int r = i / (C / 8), col = (i % (C / 8)) * 8;
    if (row0 + r < p.M)
      *reinterpret_cast<uint4*>(y + (row0 + r) * C + col) = *reinterpret_cast<const uint4*>(stage + r * S::kLdC + col);
  }
}

template <typename Tin, typename T, int C, int R, int HC>
void launch(const SwigluTransitionParams& p, cudaStream_t stream) {
  using S = Shape<C, R, HC>;
  const auto kernel = fused_forward_kernel<Tin, T, C, R, HC>;
  const dim3 grid(static_cast<unsigned int>((p.M + R - 1) / R));
  launch_kernel(kernel, grid, kThreads, S::kSmemBytes, stream, p);
}

template <typename Tin, typename T>
void launch_width(const SwigluTransitionParams& p, cudaStream_t stream) {
  if (p.c == 128) launch<Tin, T, 128, 128, swiglu_transition_hidden_multiple(128)>(p, stream);
  else launch<Tin, T, 384, 64, swiglu_transition_hidden_multiple(384)>(p, stream);
}

}  // namespace

void swiglu_transition_forward(const SwigluTransitionParams& p, void* stream) {
  if (p.M == 0) return;
  if (p.sm90) return swiglu_transition_forward_wgmma(p, stream);
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    launch_width<decltype(tin), decltype(t)>(p, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace megafold::ops::cuda
