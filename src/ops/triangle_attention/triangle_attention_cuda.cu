// Entry points of the CUDA triangle attention: picks the kernel set by dtype and runs the
// backward's elementwise first pass (gate gradient, gradient of the ungated output, and the
// per-row softmax statistic delta) before the kernels that touch N^3.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/hopper/sm90.h"
#include "ops/triangle_attention/triangle_attention_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

using mma::load_pack;
using mma::Pack;
using mma::store_pack;

constexpr int kPrologueThreads = 256;

struct BiasStrides {
  int64_t v[4];
};

struct RowIndex {
  int64_t b, r, n, h;
};

// The first pass over the [B, R, N, H] rows of d elements:
//   d_o    = d_out * sigmoid(gate)                       (d_out itself without a gate)
//   d_gate = d_out * o * sigmoid(gate) * (1 - sigmoid(gate))
//   delta  = sum_c d_o[c] * o[c], with d_o as stored (rounded to T), as the kernels read it
//   stats  = (lse, delta) pairs, for the sm_90a backward
// `lanes` consecutive lanes of a warp share a row, each with kLoads vectors of kVec elements,
// so a warp reads and writes contiguous vectors. delta is added in element order, 0 + p_0 +
// p_1 + ..., whatever the vector width (strided views and dense copies get the same bits): each
// lane adds its products to the running sum of the lanes before it, handed on by a shuffle.
// Nothing waits for the whole block (the rows' products used to meet in shared memory, a
// thread then adding each row's).
template <typename T, int kVec, int kLoads>
__global__ void __launch_bounds__(kPrologueThreads)
    backward_prologue_kernel(const TriangleAttentionParams p, int lanes) {
  constexpr int kChunk = kVec * kLoads;
  // Block (x, y): plane (b, r) = x, rows (n, h) of it, h fastest, in chunks y. 32-bit index
  // arithmetic (checked on the host): 64-bit divisions per thread, ~70 instructions each, had
  // made this pass issue-bound.
  const int lane = static_cast<int>(threadIdx.x % 32), sub = lane % lanes, rows_per_warp = 32 / lanes;
  const int heads = static_cast<int>(p.H), plane_rows = static_cast<int>(p.N) * heads;
  const int local = (static_cast<int>(blockIdx.y) * (kPrologueThreads / 32) + static_cast<int>(threadIdx.x / 32)) *
                        rows_per_warp + lane / lanes;
  const bool active = lane < rows_per_warp * lanes && local < plane_rows;
  const int plane = static_cast<int>(blockIdx.x), rr = static_cast<int>(p.R);
  const RowIndex x{plane / rr, plane % rr, local / heads, local % heads};
  const int64_t row = static_cast<int64_t>(plane) * plane_rows + local;  // of [B, R, N, H]
  const int64_t stat = (static_cast<int64_t>(plane) * heads + x.h) * p.N;  // + n: [B, R, H, N]
  const bool last = sub == lanes - 1;
  float prod[kChunk] = {}, lse = 0.f;
  if (active) {
    if (last && p.stats != nullptr) lse = p.lse[stat + x.n];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int64_t col = sub * kChunk + l * kVec, at = row * p.d + col;
      auto strided = [&](const int64_t(&s)[5]) { return x.b * s[0] + x.r * s[1] + x.n * s[2] + x.h * s[3] + col; };
      const Pack<T, kVec> o = load_pack<T, kVec>(static_cast<const T*>(p.o) + at);
      const Pack<T, kVec> d_out = load_pack<T, kVec>(static_cast<const T*>(p.d_out) + strided(p.out_stride));
      float* pr = prod + l * kVec;
      // __fmul_rn: a product the compiler fused into the sum's add would round differently.
      if (p.gate == nullptr) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) pr[i] = __fmul_rn(static_cast<float>(d_out.v[i]), static_cast<float>(o.v[i]));
      } else {
        const Pack<T, kVec> gate = load_pack<T, kVec>(static_cast<const T*>(p.gate) + strided(p.gate_stride));
        Pack<T, kVec> d_o, d_gate;
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float sg = 1.f / (1.f + expf(-static_cast<float>(gate.v[i])));
          const float g_out = static_cast<float>(d_out.v[i]), o_i = static_cast<float>(o.v[i]);
          d_o.v[i] = static_cast<T>(g_out * sg);
          d_gate.v[i] = static_cast<T>(g_out * o_i * sg * (1.f - sg));
          pr[i] = __fmul_rn(static_cast<float>(d_o.v[i]), o_i);
        }
        store_pack(static_cast<T*>(p.d_o) + at, d_o);
        store_pack(static_cast<T*>(p.d_gate) + strided(p.d_gate_stride), d_gate);
      }
    }
  }
  float sum = 0.f;
  for (int j = 0; j < lanes; ++j) {
    const float before = __shfl_up_sync(0xffffffffu, sum, 1);
    if (sub == j) {
      float s = j == 0 ? 0.f : before;
#pragma unroll
      for (int c = 0; c < kChunk; ++c) s = __fadd_rn(s, prod[c]);
      sum = s;
    }
  }
  if (active && last) {
    p.delta[stat + x.n] = sum;
    if (p.stats != nullptr) {
      const int64_t pair = (static_cast<int64_t>(plane) * heads + x.h) * p.stats_ld + x.n;
      reinterpret_cast<float2*>(p.stats)[pair] = make_float2(lse, sum);
    }
  }
}

// Whether every row piece of `bytes` is an aligned access: the dense rows of d elements and the
// strided rows of d_out, the gate and its gradient (the model's, inside the 4Hd + H wide
// projection, allow 8 bytes).
bool pieces_aligned(const TriangleAttentionParams& p, int64_t elem, int64_t bytes) {
  auto aligned = [&](const void* ptr, const int64_t* s) {
    if (ptr == nullptr) return true;
    if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) return false;
    for (int i = 0; s != nullptr && i < 4; ++i)
      if ((s[i] * elem) % bytes != 0) return false;
    return true;
  };
  return (p.d * elem) % bytes == 0 && aligned(p.o, nullptr) && aligned(p.d_o, nullptr) &&
         aligned(p.d_out, p.out_stride) && aligned(p.gate, p.gate_stride) && aligned(p.d_gate, p.d_gate_stride);
}

// The widest vector (at most 16 bytes) that every row piece allows; a row over at most 32 lanes
// (two vectors a lane where single elements would need more).
template <typename T, int kVec = 16 / sizeof(T)>
void backward_prologue(const TriangleAttentionParams& p, cudaStream_t stream) {
  if constexpr (kVec > 1) {
    if (!pieces_aligned(p, sizeof(T), kVec * sizeof(T))) return backward_prologue<T, kVec / 2>(p, stream);
  }
  const int pieces = static_cast<int>(p.d) / kVec, loads = pieces > 32 ? 2 : 1, lanes = pieces / loads;
  MF_CHECK(lanes <= 32 && lanes * loads * kVec == p.d, "triangle_attention CUDA: no first-pass layout for head dim ",
           p.d);
  const int64_t plane_rows = p.N * p.H, rows_per_block = kPrologueThreads / 32 * (32 / lanes);
  const int64_t chunks = (plane_rows + rows_per_block - 1) / rows_per_block;
  MF_CHECK(p.B * p.R <= 0x7fffffff && chunks <= 65535,
           "triangle_attention CUDA: ", p.B * p.R, " planes of ", plane_rows, " rows exceed the first pass's grid");
  const dim3 blocks(static_cast<unsigned int>(p.B * p.R), static_cast<unsigned int>(chunks));
  if constexpr (kVec == 1) {  // only single elements can need more than 32 lanes (d <= 64)
    if (loads == 2)
      return launch_kernel(backward_prologue_kernel<T, 1, 2>, blocks, kPrologueThreads, 0, stream, p, lanes);
  }
  launch_kernel(backward_prologue_kernel<T, kVec, 1>, blocks, kPrologueThreads, 0, stream, p, lanes);
}

// Block = one mask row (b, r); pass k's warp w covers keys 256 k + 32 w .. + 31, so a 64-key
// tile's bit is the OR of two warps' ballots (an integer OR in shared memory: order-free).
__global__ void __launch_bounds__(kPrologueThreads)
    key_mask_kernel(const float* mask, int64_t s0, int64_t s1, int64_t s2, int64_t R, int64_t N, float* additive,
                    int64_t ld, uint32_t* tiles, int64_t words) {
  extern __shared__ uint32_t bits[];
  const int64_t row = blockIdx.x;
  const float* m = mask + (row / R) * s0 + (row % R) * s1;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) bits[w] = 0;
  __syncthreads();
  for (int64_t j0 = 0; j0 < ld; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    const bool in = j < N, attend = in && m[j * s2] != 0.f;
    if (j < ld) additive[row * ld + j] = attend ? 0.f : -INFINITY;
    const unsigned masked = __ballot_sync(0xffffffffu, in && !attend);
    if (threadIdx.x % 32 == 0 && masked != 0) atomicOr(&bits[j / 64 / 32], 1u << (j / 64 % 32));
  }
  __syncthreads();
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) tiles[row * words + w] = bits[w];
}

// out = the [B, H, N, N] bias read through its strides, dense. A thread per (b, i, j) copies its
// H values, j fastest across a block's threads: each head's stores are coalesced, and a pair's
// heads, adjacent in a projection's columns, come from one sector. (ATen's strided copy, a 4-D
// offset computation per element, took 62 us for the model's [1, 4, 768, 768] view of the
// projection.) T is an unsigned type of the element's size: a copy needs no arithmetic.
template <typename T>
__global__ void __launch_bounds__(kPrologueThreads)
    bias_heads_major_kernel(const T* bias, BiasStrides s, int64_t H, int64_t N, T* out) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= N) return;
  const int n = static_cast<int>(N), row = static_cast<int>(blockIdx.x);  // B * N < 2^31 (the grid's limit)
  const int64_t b = row / n, i = row % n, plane = N * N;
  const T* from = bias + b * s.v[0] + i * s.v[2] + j * s.v[3];
  T* to = out + b * H * plane + i * N + j;
  for (int64_t h = 0; h < H; ++h) to[h * plane] = from[h * s.v[1]];
}

}  // namespace

void bias_heads_major(const void* bias, const int64_t (&stride)[4], int64_t B, int64_t H, int64_t N,
                      int64_t elem_bytes, void* out, void* stream) {
  if (B * H * N == 0) return;
  MF_CHECK(B * N <= 0x7fffffff, "triangle_attention CUDA: ", B * N, " bias rows exceed the grid limit");
  const dim3 blocks(static_cast<unsigned int>(B * N), static_cast<unsigned int>((N + kPrologueThreads - 1) /
                                                                                kPrologueThreads));
  const BiasStrides s{{stride[0], stride[1], stride[2], stride[3]}};
  const auto st = static_cast<cudaStream_t>(stream);
  auto run = [&](auto t) {
    using T = decltype(t);
    launch_kernel(bias_heads_major_kernel<T>, blocks, kPrologueThreads, 0, st, static_cast<const T*>(bias), s, H, N,
                  static_cast<T*>(out));
  };
  switch (elem_bytes) {
    case 2: return run(uint16_t{});
    case 4: return run(uint32_t{});
    case 8: return run(uint64_t{});
  }
  MF_CHECK(false, "triangle_attention CUDA: no bias copy for ", elem_bytes, "-byte elements");
}

void make_key_mask(const float* mask, const int64_t (&stride)[3], int64_t B, int64_t R, int64_t N, float* additive,
                   int64_t ld, uint32_t* tiles, int64_t words, void* stream) {
  if (B * R == 0 || N == 0) return;
  launch_kernel(key_mask_kernel, static_cast<unsigned>(B * R), kPrologueThreads, static_cast<int>(words * 4),
                static_cast<cudaStream_t>(stream), mask, stride[0], stride[1], stride[2], R, N, additive, ld, tiles,
                words);
}

bool supported_head_dim(int64_t d) { return d == 16 || d == 24 || d == 32 || d == 48 || d == 64; }

int64_t dbias_partials(const TriangleAttentionParams& p) {
  return p.dtype == DType::kFloat32 ? 0 : dbias_partials_mma(p);
}

bool use_sm90(DType dtype, int64_t d, int major, int minor) {
  return sm90::runs_on(major, minor) && dtype != DType::kFloat32 && d == 32;
}

void triangle_attention_forward(const TriangleAttentionParams& p, void* stream) {
  if (p.N == 0 || p.B * p.R * p.H == 0) return;
  if (p.dtype == DType::kFloat32) return forward_simt(p, stream);
  p.sm90 ? forward_wgmma(p, stream) : forward_mma(p, stream);
}

void triangle_attention_backward(const TriangleAttentionParams& p, void* stream) {
  if (p.N == 0 || p.B * p.R * p.H == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: backward_prologue<float>(p, s); return backward_simt(p, stream);
    case DType::kFloat16: backward_prologue<__half>(p, s); break;
    case DType::kBFloat16: backward_prologue<__nv_bfloat16>(p, s); break;
  }
  p.sm90 ? backward_wgmma(p, stream) : backward_mma(p, stream);
}

}  // namespace megafold::ops::cuda
