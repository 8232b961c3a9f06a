// Triangle attention for Hopper (sm_90a): the forward and the three backward products (dQ,
// dK/dV, the bias gradient) as wgmma kernels on shared-memory tiles that TMA fills.
//
// Every kernel: two warpgroups that compute and feed themselves. Tiles arrive by TMA in a ring
// of shared-memory slots with a "full" mbarrier each (bytes landed); the last warpgroup done
// with a slot issues its next copies (hopper::SelfFilledRing). Without a dedicated producer
// warp two blocks of 8 warps fill an SM's 64K registers at 128 per thread (a ninth warp capped
// them at 96), which lets every product run on whole 64 x 64 score blocks.
// - Forward / dQ: block = one tile of 64 queries of kRows consecutive rows r (same b, h);
//   warpgroup w computes row r0 + w. All rows of a block share one bias tile per key step
//   (the bias does not depend on r), so the bias bytes per score fall by kRows against a
//   block per row. Per 64-key step:
//     S = bias / scale + Q K^T   the accumulators start at the bias, stored as floats in the
//                        order the threads hold the scores (bias_fragments_kernel), and
//                        wgmma m64n64k16 x2 adds the product (Q as A fragments in registers,
//                        loaded once; K from shared memory)
//     forward: online softmax (base 2) in registers, O += P V (m64n32k16 x4, P from
//       registers, V read transposed from shared memory) and the row sums P 1 (m64n8k16 x4
//       against a resident block of ones), issued behind the next step's scores so that the
//       next softmax runs while they do
//     dQ: dP = dO V^T (dO in registers too), dS = P (dP - delta), dQ += dS K
// - dK/dV: block = one tile of 64 keys of kRows rows; the query tiles stream (with the bias
//   tile, shared by the rows, and each row's lse and delta). Per 64-query step, transposed:
//     S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q
// - Bias gradient: block = 128 queries x 64 keys of one (b, h) and a chunk of rows r; each
//   warpgroup keeps sum_r dS of its 64 x 64 in registers while the rows stream through (its
//   bias fragments resident; where the block's bias is moderate, e^bias comes out of the sum
//   and multiplies it once at the end).
// The counts behind the shape (N=768, H=4, d=32): per score 4d = 128 tensor FLOPs against
// one exponential and ~8 other float instructions, so the exponential unit (16/clock/SM) and
// the instruction issue, not the tensor cores, bound these kernels; wgmma frees the issue
// slots mma.sync spent, TMA those of the cp.async loaders' address arithmetic. Measurements
// and what limits them: bench/notes/triangle_attention.md.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/hopper.cuh"
#include "core/mma.cuh"
#include "ops/hopper/rows128.cuh"
#include "ops/hopper/sm90.h"
#include "ops/triangle_attention/triangle_attention_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

// Tile choices, by head dim (only d = 32 is instantiated: one 64-byte swizzled row per query
// or key). kRows warpgroups per block, one row r each (forward, dQ, dK/dV) or one 64-query
// half of the block's bias tile each (bias gradient); a 64 x 64 score block per step.
template <int D>
struct Traits {
  static constexpr int kRows = 2;          // consumer warpgroups
  static constexpr int kBlockM = 64;       // queries per warpgroup (the wgmma M)
  static constexpr int kBlockN = 64;       // keys per step
  static constexpr int kThreads = 128 * kRows;
  // Two blocks per SM: 2 x 256 threads x 128 registers = 64K.
  static constexpr int kRegisters = 128;
  static constexpr int kSwizzle = D * 2;   // bytes per row of a q/k/v tile
  static constexpr int kTile = 64 * kSwizzle;             // a 64-row q, k, v or dO tile
  static constexpr int kBiasTile = kBlockM * kBlockN * 2;  // 64 x 64, 128-byte rows
  static constexpr int kBiasFragments = kBlockM * kBlockN * 4;  // 64 x 64 floats in score order
  static constexpr int kMaskRow = kBlockN * 4;             // the key mask of one row r
  static constexpr int kStatRow = kBlockM * 8;             // (lse, delta) of 64 queries
  __host__ __device__ static constexpr int align(int bytes) { return (bytes + 1023) / 1024 * 1024; }
  // Ring depth: the deepest that keeps two blocks' shared memory within the SM's 228 KB.
  static constexpr int kStages = 3;
  // Forward and dQ: per step, the keys and values of every row, the shared bias tile (as
  // fragments of floats) and, with a mask, the key masks; resident: the queries (and dO) of
  // every row. Their shared memory is dynamic only (resident tiles, slots, then the ring's
  // barriers), so it starts on the block's 1024-byte aligned base and needs no alignment slack.
  __host__ __device__ static constexpr int key_stage(bool mask) {
    return align(2 * kRows * kTile + kBiasFragments + (mask ? kRows * kMaskRow : 0));
  }
  // dQ's ring: 3 slots fit twice per SM beside the resident queries and dO (112 KB a block)
  // only without the mask rows and the slack; with a mask it has 2. (Against 3 slots of the
  // bf16 bias tile, whose unpacking and scaling the floats save, 2 slots of floats measured 1.13
  // against 1.20 ms at N = 768.)
  __host__ __device__ static constexpr int key_loop_stages(bool grad, bool mask) { return grad && mask ? 2 : 3; }
  // The forward's row sums come from the tensor cores: P times a 16 x 8 block of ones (8 rows of
  // 64 bytes, K-major, the B operand of each k-step of 16 keys), resident after the queries.
  static constexpr int kOnesTile = 1024;
  __host__ __device__ static constexpr int key_loop_resident(bool grad) {
    return grad ? 2 * kRows * kTile : kRows * kTile + kOnesTile;
  }
  __host__ __device__ static constexpr int key_loop_barriers(bool grad, bool mask) {
    return key_loop_resident(grad) + key_loop_stages(grad, mask) * key_stage(mask);
  }
  static constexpr int kKeyLoopBarrierBytes = 128;  // the ring's barriers and `resident` after the slots
  __host__ __device__ static constexpr int key_loop_smem(bool grad, bool mask) {
    return key_loop_barriers(grad, mask) + kKeyLoopBarrierBytes;
  }
  // dK/dV: per step, the queries, dO and statistics of every row and the shared bias tile;
  // resident: the keys and values of every row.
  // Its bias stays a bf16 tile, read transposed by ldmatrix: as floats it needs 2 slots too,
  // and measured 1.58 against 1.55 ms at N = 768.
  static constexpr int kQueryStage = align(2 * kRows * kTile + kBiasTile + kRows * kStatRow);
  static constexpr int kQuerySmem = 2 * kRows * kTile + kStages * kQueryStage + 1024;
  // Bias gradient: per step (row r), queries and dO of both halves, keys, values, key mask and
  // the halves' (lse, delta) pairs; resident: the bias fragments of both halves.
  static constexpr int kRowStage = align(2 * kRows * kTile + 2 * kTile + kMaskRow + kRows * kStatRow);
  static constexpr int kRowSmem = kRows * kBiasFragments + kStages * kRowStage + 1024;
  static_assert(kBlockM == 64 && kBlockN == 64 && D == 32, "one instantiation");
  // Two blocks per SM, each with the 1 KB the system reserves, within the SM's 228 KB.
  static_assert(2 * (key_loop_smem(true, false) + 1024) <= 228 * 1024 &&
                    2 * (key_loop_smem(true, true) + 1024) <= 228 * 1024 &&
                    2 * (key_loop_smem(false, false) + 1024) <= 228 * 1024 &&
                    2 * (key_loop_smem(false, true) + 1024) <= 228 * 1024,
                "two forward or dQ blocks per SM");
  // (Its ring is static shared memory: 1 KB more a block besides the system's.)
  static_assert(2 * (kRowSmem + 2 * 1024) <= 228 * 1024, "two bias-gradient blocks per SM");
};

struct Maps {
  CUtensorMap q, k, v, d_o, bias, mask, stats;
};

#if defined(MEGAFOLD_SM90A_DEVICE)
using namespace megafold::hopper;
using mma::exp2_approx;
using mma::pack2;

constexpr float kLog2e = 1.4426950408889634f;
// The bias gradient sums e^-bias-scaled probabilities over rows where every |bias| of its block
// is at most this: e^40 = 2.4e17 leaves the float range's 3.4e38 room for the sum over rows and
// the factor (dP - delta), and e^-40 keeps probabilities above 3e-21 normal floats.
constexpr float kFactoredBiasLimit = 40.f;

// Every kernel's ring: its two warpgroups refill it themselves.
template <int kStages>
using KernelRing = SelfFilledRing<kStages, 2>;

// Thread 0 sets up the ring and the barrier of the resident tiles; then every thread may use them.
template <int kStages>
__device__ __forceinline__ void init_barriers(KernelRing<kStages>& ring, uint64_t& resident) {
  if (threadIdx.x == 0) {
    ring.init();
    barrier_init(&resident, 1);
    barrier_init_fence();
  }
  __syncthreads();
}

// Thread 0 issues the copies of the first kStages steps; the ring refills itself after that.
template <int kStages, typename Issue>
__device__ __forceinline__ void prefetch(int steps, Issue&& issue) {
  if (threadIdx.x != 0) return;
  for (int step = 0; step < kStages && step < steps; ++step) issue(step);
}

// After step `step`: the first thread of the last warpgroup done with its slot refills it.
template <int kStages, typename Issue>
__device__ __forceinline__ void release(KernelRing<kStages>& ring, int s, int wg, int step, int steps,
                                        Issue&& issue) {
  if (ring.release(s, wg) && step + kStages < steps) issue(step + kStages);
}

// The warp's index, through a shuffle so that the compiler knows it is the same in every lane
// (tile addresses and wgmma descriptors derived from it stay in uniform registers).
__device__ __forceinline__ int warp_index() { return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0); }

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Score blocks are wgmma m64nC accumulators (C = 64 or 32 keys, NX = C / 2 values): warp w of
// the warpgroup holds rows 16w + g and 16w + g + 8, columns 8c + 2t and 8c + 2t + 1 of chunk
// c, as x[4c + 2 half + e].

// The dK/dV kernel reads its bias from a 64 x 64 bf16 tile (queries as rows of 128 bytes,
// 128-byte swizzle) transposed, as its scores S^T are (rows keys, columns queries):
// transposed_tile_offsets and load_tile_transposed (ops/hopper/rows128.cuh).

template <typename T>
__device__ __forceinline__ void scale_add_bias(float (&x)[32], const uint32_t (&bf)[16], float scale) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float2 b = mma::unpack2<T>(bf[2 * (i / 4) + (i / 2) % 2]);
    x[i] = fmaf(x[i], scale, i % 2 == 0 ? b.x : b.y);
  }
}

// The forward, dQ and the bias gradient start their score accumulators at bias / scale, read in
// the order the threads hold the scores (prepared by bias_fragments_kernel): thread `lane` of
// warp w of a warpgroup reads its 32 values as eight 16-byte pieces, x[4c..4c+3] from
// ((8w + c) * 32 + lane) * 16 bytes into the tile, which a warp reads as 512 contiguous bytes.
// The product then adds Q K^T on top, and the scale moves into the exponential's multiplier:
// the kernels work on unscaled logits u = bias / scale + q.k, exp(scale u - m) = 2^(c u - m')
// with c = scale log2(e), which saves the unpacking of the bias and the scaling of every score.
// The tile of (b, h), queries qt, keys kt.
__device__ __forceinline__ const float* bias_fragment_tile(const TriangleAttentionParams& p, int64_t bh, int64_t qt,
                                                          int64_t kt) {
  const int64_t tiles = (p.N + 63) / 64;
  return p.bias_fragments + ((bh * tiles + qt) * tiles + kt) * 64 * 64;
}

__device__ __forceinline__ void load_bias_fragments(float (&x)[32], const unsigned char* tile, int warp16, int lane) {
  const float4* at = reinterpret_cast<const float4*>(tile) + warp16 * 8 * 32 + lane;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const float4 v = at[32 * c];
    x[4 * c] = v.x, x[4 * c + 1] = v.y, x[4 * c + 2] = v.z, x[4 * c + 3] = v.w;
  }
}

// Adds the additive key mask of these columns (rows padded with -inf past N).
template <int NX>
__device__ __forceinline__ void add_key_mask(float (&x)[NX], const float* mask, int t) {
#pragma unroll
  for (int c = 0; c < NX / 4; ++c) {
    const float2 m = *reinterpret_cast<const float2*>(mask + 8 * c + 2 * t);
    x[4 * c] += m.x, x[4 * c + 1] += m.y, x[4 * c + 2] += m.x, x[4 * c + 3] += m.y;
  }
}

// Whether tile `kt` of mask row (b, r) holds a masked key below N (TriangleAttentionParams::mask_tiles).
__device__ __forceinline__ bool tile_masked(const TriangleAttentionParams& p, int64_t b, int64_t r, int64_t kt) {
  return (p.mask_tiles[(b * p.R + r) * p.mask_words + kt / 32] >> (kt % 32)) & 1u;
}

// Keys past N get -inf (without a mask, whose padding does this).
template <int NX>
__device__ __forceinline__ void mask_tail(float (&x)[NX], int64_t j0, int64_t N, int t) {
  if (j0 + 2 * NX <= N) return;
#pragma unroll
  for (int i = 0; i < NX; ++i)
    if (j0 + 8 * (i / 4) + 2 * t + i % 2 >= N) x[i] = -INFINITY;
}

// dS = P * (dP - delta) with P = 2^(to_log2 x - lse2), in place in x (lse2 = +inf: P = 0);
// to_log2 is log2(e) for scaled logits, scale log2(e) for unscaled ones.
template <int NX>
__device__ __forceinline__ void to_ds(float (&x)[NX], const float (&dp)[NX], const float (&lse2)[2],
                                      const float (&delta)[2], float to_log2) {
#pragma unroll
  for (int i = 0; i < NX; ++i) {
    const int half = (i / 2) % 2;
    x[i] = exp2_approx(fmaf(x[i], to_log2, -lse2[half])) * (dp[i] - delta[half]);
  }
}

// A score block as the A fragments of its k-steps of 16 keys (chunk c = keys 8c..8c+7 goes
// to k-step c / 2, register (c % 2) * 2 + half).
template <typename T, int NX>
__device__ __forceinline__ void to_a_fragments(uint32_t (&a)[NX / 8][4], const float (&x)[NX]) {
#pragma unroll
  for (int i = 0; i < NX; i += 2) a[i / 8][((i / 4) % 2) * 2 + (i / 2) % 2] = pack2<T>(x[i], x[i + 1]);
}

// acc (64 x 32) += A (64 x 16 KS) B, B the rows of a 64-row tile read transposed (MN-major):
// P V, dS K, P^T dO, dS^T Q. Issued after a wgmma_fence, not committed.
template <typename T, int kSwizzle, int KS>
__device__ __forceinline__ void issue_rows_product(float (&acc)[16], const uint32_t (&a)[KS][4],
                                                   const unsigned char* rows) {
  const uint64_t desc = smem_desc<kSwizzle>(rows);
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) wgmma_64x32_rs<T>(acc, a[ks], desc_add(desc, ks * 16 * kSwizzle));
}

// The same, fenced, committed and waited for.
template <typename T, int kSwizzle, int KS>
__device__ __forceinline__ void gemm_rows(float (&acc)[16], const uint32_t (&a)[KS][4], const unsigned char* rows) {
  fence_registers(acc);
  wgmma_fence();
  issue_rows_product<T, kSwizzle, KS>(acc, a, rows);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(acc);
}

// x (64 x 64) = A B^T over d = 32 (two k-steps), A 64 rows, B 64 rows, both K-major; with
// add, x += A B^T (x's old values are not read otherwise). Issued, not waited for.
template <typename T, int kSwizzle>
__device__ __forceinline__ void issue_scores(float (&x)[32], const unsigned char* a, const unsigned char* b,
                                             bool add = false) {
  const uint64_t da = smem_desc<kSwizzle>(a), db = smem_desc<kSwizzle>(b);
  wgmma_64x64_ss<T>(x, da, db, add);
  wgmma_64x64_ss<T>(x, desc_add(da, 32), desc_add(db, 32), true);
}

// A resident 64-row tile of d = 32 (rows of kSwizzle = 64 bytes, the 16-byte chunk c of row r
// at chunk c ^ (r / 2) % 4) as the A fragments of its two k-steps, for products whose A operand
// stays for the whole kernel: warp w of the warpgroup gets rows 16w..16w+15, ldmatrix hands
// matrix m the rows 16w + 8 (m % 2) + (lane % 8) at chunk 2 ks + m / 2.
template <int kSwizzle>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[2][4], const unsigned char* tile, int warp16, int lane) {
  static_assert(kSwizzle == 64, "rows of d = 32");
  const int row = 16 * warp16 + lane % 16;
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    const int chunk = 2 * ks + lane / 16;
    mma::ldmatrix_x4(a[ks], tile + row * kSwizzle + ((chunk ^ (row / 2) % 4) * 16));
  }
}

// x (64 x 64) = A B^T over d = 32 as issue_scores, A from registers (load_a_fragments).
template <typename T, int kSwizzle, bool kAdd = false>
__device__ __forceinline__ void issue_scores(float (&x)[32], const uint32_t (&a)[2][4], const unsigned char* b) {
  const uint64_t db = smem_desc<kSwizzle>(b);
  wgmma_64x64_rs<T>(x, a[0], db, kAdd);
  wgmma_64x64_rs<T>(x, a[1], desc_add(db, 32), true);
}

// The lse (base 2) and delta of rows i and i + 8 of one (b, r, h) ([B, R, H, N] arrays);
// rows past N get lse = +inf (P = 0).
__device__ __forceinline__ void row_stats(const TriangleAttentionParams& p, int64_t bh_row, int64_t i,
                                          float (&lse2)[2], float (&delta)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool in = i + 8 * half < p.N;
    lse2[half] = in ? p.lse[bh_row + i + 8 * half] : INFINITY;
    delta[half] = in ? p.delta[bh_row + i + 8 * half] : 0.f;
  }
}

// Stores a 64 x 32 accumulator block (rows i, i + 8 of this thread) times mul[half] into a
// [B, R, N, H, d] tensor of T with strides `s`.
template <typename T>
__device__ __forceinline__ void store_rows(void* out, const int64_t (&s)[5], const TriangleAttentionParams& p, int b,
                                           int64_t r, int h, int64_t i_first, const float (&acc)[16],
                                           const float (&mul)[2], int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i_first + 8 * half;
    if (i >= p.N) continue;
    T* row = static_cast<T*>(out) + b * s[0] + r * s[1] + i * s[2] + h * s[3];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int col = 8 * c + 2 * t;
      *reinterpret_cast<uint32_t*>(row + col) =
          pack2<T>(acc[4 * c + 2 * half] * mul[half], acc[4 * c + 2 * half + 1] * mul[half]);
    }
  }
}

// The gate values of this thread's output elements (rows i, i + 8; columns 8c + 2t, + 1) as
// pairs. Read before the key loop, whose steps hide the latency that the epilogue used to wait
// out (the model's gate is a strided view of the projection: 4-byte pieces 1 KB apart).
template <typename T>
__device__ __forceinline__ void load_gate(uint32_t (&gate)[2][4], const TriangleAttentionParams& p, int b, int64_t r,
                                          int h, int64_t i_first, int t) {
  const int64_t(&s)[5] = p.gate_stride;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = min(i_first + 8 * half, p.N - 1);  // rows past N are never stored
    const T* row = static_cast<const T*>(p.gate) + b * s[0] + r * s[1] + i * s[2] + h * s[3];
#pragma unroll
    for (int c = 0; c < 4; ++c) gate[half][c] = *reinterpret_cast<const uint32_t*>(row + 8 * c + 2 * t);
  }
}

// store_rows into out through out_stride, times sigmoid(gate): the gate costs no extra pass over o.
template <typename T>
__device__ __forceinline__ void store_gated_rows(const TriangleAttentionParams& p, int b, int64_t r, int h,
                                                 int64_t i_first, const float (&acc)[16], const float (&mul)[2],
                                                 const uint32_t (&gate)[2][4], int t) {
  const int64_t(&s)[5] = p.out_stride;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i_first + 8 * half;
    if (i >= p.N) continue;
    T* row = static_cast<T*>(p.out) + b * s[0] + r * s[1] + i * s[2] + h * s[3];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float2 g = mma::unpack2<T>(gate[half][c]);
      const float v0 = acc[4 * c + 2 * half] * mul[half] / (1.f + __expf(-g.x));
      const float v1 = acc[4 * c + 2 * half + 1] * mul[half] / (1.f + __expf(-g.y));
      *reinterpret_cast<uint32_t*>(row + 8 * c + 2 * t) = pack2<T>(v0, v1);
    }
  }
}
#endif

// Forward and dQ share one schedule: block = (b, h, 64 queries, kRows rows r), the ring
// streams key tiles (keys and values of every row, the shared bias tile, the key masks).
//   forward: S = Q K^T, online softmax, O += P V
//   dQ:      S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K
template <typename T, int D, bool kBias, bool kMask, bool kGrad>
__global__ void __launch_bounds__(Traits<D>::kThreads) __maxnreg__(Traits<D>::kRegisters)
    tma_wgmma_key_loop_kernel(const __grid_constant__ Maps maps, const TriangleAttentionParams p) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  using Tr = Traits<D>;
  constexpr int kStages = Tr::key_loop_stages(kGrad, kMask);
  constexpr int kStage = Tr::key_stage(kMask);
  constexpr int kBiasBytes = Tr::kBiasFragments;
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* q_tiles = smem;                          // kRows tiles
  unsigned char* do_tiles = smem + Tr::kRows * Tr::kTile;  // kRows tiles (dQ only)
  unsigned char* ones_tile = do_tiles;                     // the forward's, in dO's place
  unsigned char* stages = smem + Tr::key_loop_resident(kGrad);
  auto& ring = *reinterpret_cast<KernelRing<kStages>*>(smem + Tr::key_loop_barriers(kGrad, kMask));
  uint64_t& resident = *reinterpret_cast<uint64_t*>(&ring + 1);
  static_assert(sizeof(ring) + sizeof(resident) <= Tr::kKeyLoopBarrierBytes, "the barriers' bytes");
  // The swizzled tiles need 1024-byte alignment; the block's dynamic shared memory, with no
  // static shared memory before it, starts there.
  if (threadIdx.x == 0 && smem_u32(smem) % 1024 != 0) __trap();
  auto k_tile = [&](int s, int w) { return stages + s * kStage + w * Tr::kTile; };
  auto v_tile = [&](int s, int w) { return stages + s * kStage + (Tr::kRows + w) * Tr::kTile; };
  auto bias_tile = [&](int s) { return stages + s * kStage + 2 * Tr::kRows * Tr::kTile; };
  auto mask_row = [&](int s, int w) { return reinterpret_cast<float*>(bias_tile(s) + kBiasBytes + w * Tr::kMaskRow); };

  const int warp = warp_index(), lane = threadIdx.x % 32;
  const int i0 = blockIdx.x * Tr::kBlockM, r0 = blockIdx.y * Tr::kRows;
  const int b = blockIdx.z / static_cast<int>(p.H), h = blockIdx.z % static_cast<int>(p.H);
  const int steps = static_cast<int>((p.N + Tr::kBlockN - 1) / Tr::kBlockN);

  if constexpr (!kGrad) {
    // The ones of the row sums' B operand (1.0 is 0x3f80 in bf16, 0x3c00 in fp16), written
    // through the generic proxy and fenced for the tensor cores' reads.
    constexpr uint32_t kOne = kIsBf16<T> ? 0x3f80u : 0x3c00u;
    static_assert(Tr::kOnesTile == 4 * Tr::kThreads, "one word per thread");
    reinterpret_cast<uint32_t*>(ones_tile)[threadIdx.x] = kOne | kOne << 16;
    fence_async_shared();
  }
  init_barriers(ring, resident);
  auto issue = [&](int step) {
    // The mask rows come with every step's tiles (256 bytes a row), though only the tiles with
    // a masked key add them: deciding here would put a global load of the tile bits in front
    // of every refill, and the warpgroup of the refilling thread would wait for it.
    const uint32_t bytes =
        2 * Tr::kRows * Tr::kTile + (kBias ? kBiasBytes : 0) + (kMask ? Tr::kRows * Tr::kMaskRow : 0);
    const int s = ring.arm(step, bytes), j0 = step * Tr::kBlockN;
    for (int w = 0; w < Tr::kRows; ++w) {
      tma_load_5d(k_tile(s, w), &maps.k, ring.filled(s), 0, h, j0, r0 + w, b);
      tma_load_5d(v_tile(s, w), &maps.v, ring.filled(s), 0, h, j0, r0 + w, b);
      if constexpr (kMask) tma_load_3d(mask_row(s, w), &maps.mask, ring.filled(s), j0, r0 + w, b);
    }
    if constexpr (kBias)
      bulk_load(bias_tile(s), bias_fragment_tile(p, blockIdx.z, blockIdx.x, step), Tr::kBiasFragments, ring.filled(s));
  };
  if (threadIdx.x == 0) {
    barrier_expect_bytes(&resident, (kGrad ? 2 : 1) * Tr::kRows * Tr::kTile);
    for (int w = 0; w < Tr::kRows; ++w) {
      tma_load_5d(q_tiles + w * Tr::kTile, &maps.q, &resident, 0, h, i0, r0 + w, b);
      if constexpr (kGrad) tma_load_5d(do_tiles + w * Tr::kTile, &maps.d_o, &resident, 0, h, i0, r0 + w, b);
    }
  }
  prefetch<kStages>(steps, issue);

  // Warpgroup wg computes row r of the block's queries.
  const int wg = warp / 4, g = lane / 4, t = lane % 4, row16 = 16 * (warp % 4);
  const int64_t r = r0 + wg;
  const bool live = r < p.R;
  const int64_t i_first = i0 + row16 + g;  // this thread's rows: i_first, i_first + 8
  const int64_t stat_row = ((static_cast<int64_t>(b) * p.R + r) * p.H + h) * p.N;
  float lse2[2] = {0.f, 0.f}, delta[2] = {0.f, 0.f};
  if (kGrad && live) row_stats(p, stat_row, i_first, lse2, delta);
  barrier_wait(&resident, 0);

  // This row's tile bits, 32 steps per word: tiles whose keys are all attended skip the mask.
  const uint32_t* tile_words =
      kMask && live ? p.mask_tiles + (static_cast<int64_t>(b) * p.R + r) * p.mask_words : nullptr;
  uint32_t tile_bits = kMask && live ? tile_words[0] : 0u;
  // The forward's gate, read now so that its latency hides under the key loop (see load_gate).
  uint32_t gate[2][4];
  if (!kGrad && live && p.gate != nullptr) load_gate<T>(gate, p, b, r, h, i_first, t);

  float acc[16];  // O, or dQ / scale
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // forward: running maxima of rows i_first, i_first + 8
  // Forward: the row sums of P (as the product sees it, rounded to T), accumulated with O by
  // the tensor cores as P times ones: rows i_first (sums[0], sums[1]) and i_first + 8 (sums[2],
  // sums[3]), every column the same sum.
  float sums[4] = {0.f, 0.f, 0.f, 0.f};
  // The scores of the step at hand: S = bias / scale + Q K^T (unscaled logits; the accumulators
  // start at the bias fragments), and for dQ dP = dO V^T.
  float x[32], dp[kGrad ? 32 : 1];
  // The resident queries (and dO) as A fragments in registers: the scores' products then read
  // only the keys (values) from shared memory, whose bandwidth the bias fragments' loads share.
  uint32_t q_frag[2][4], do_frag[kGrad ? 2 : 1][4];
  load_a_fragments<Tr::kSwizzle>(q_frag, q_tiles + wg * Tr::kTile, warp % 4, lane);
  if constexpr (kGrad) load_a_fragments<Tr::kSwizzle>(do_frag, do_tiles + wg * Tr::kTile, warp % 4, lane);
  // Issues the scores of the step in slot s (not committed).
  auto issue_step_scores = [&](int s) {
    issue_scores<T, Tr::kSwizzle, kBias>(x, q_frag, k_tile(s, wg));
    if constexpr (kGrad) issue_scores<T, Tr::kSwizzle>(dp, do_frag, v_tile(s, wg));
  };
  // Mask of the scores of `step` (in slot s): the key mask where the tile holds a masked key,
  // else -inf past N alone.
  auto mask_scores = [&](int step, int s) {
    if (kMask && step % 32 == 0 && step > 0) tile_bits = tile_words[step / 32];
    if (kMask && ((tile_bits >> (step % 32)) & 1u)) add_key_mask(x, mask_row(s, wg), t);
    else mask_tail(x, static_cast<int64_t>(step) * Tr::kBlockN, p.N, t);
  };
  const float to_log2 = p.scale * kLog2e;  // unscaled logits to base-2 exponents
  // dQ: the scores of `step` (in slot s) to the A fragments of dS = P (dP - delta).
  auto to_ds_operand = [&](int step, int s, uint32_t(&a)[4][4]) {
    mask_scores(step, s);
    if constexpr (kGrad) to_ds(x, dp, lse2, delta, to_log2);
    to_a_fragments<T, 32>(a, x);
  };
  // Forward: the online softmax (base 2) of `step`'s scores in place, P = 2^(c x - m') in x;
  // corr[half] the factor O and the row sums still need (applied by rescale_and_pack once the
  // product accumulating them is done).
  auto softmax_in_place = [&](int step, int s, float(&corr)[2]) {
    mask_scores(step, s);
    float off[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) mx[k] = fmaxf(x[4 * k + 2 * half], x[4 * k + 2 * half + 1]);
#pragma unroll
      for (int w = 4; w > 0; w /= 2)
#pragma unroll
        for (int k = 0; k < w; ++k) mx[k] = fmaxf(mx[k], mx[k + w]);
      const float m_new = fmaxf(m[half], quad_max(mx[0]));
      // A row with no valid key so far keeps max -inf; subtract 0 instead (all terms are 0).
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      corr[half] = exp2_approx((m[half] - m_use) * to_log2);
      m[half] = m_new;
      off[half] = -m_use * to_log2;
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) x[i] = exp2_approx(fmaf(x[i], to_log2, off[(i / 2) % 2]));
  };
  // O rescaled to the maxima of the step whose P is in x, and that P as the product's A fragments.
  auto rescale_and_pack = [&](const float(&corr)[2], uint32_t(&a)[4][4]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i] *= corr[(i / 2) % 2];
#pragma unroll
    for (int i = 0; i < 4; ++i) sums[i] *= corr[i / 2];
    to_a_fragments<T, 32>(a, x);
  };
  // Forward: O += P V and sums += P 1 for the step in slot s (issued, not committed).
  const uint64_t ones = smem_desc<Tr::kSwizzle>(ones_tile);
  auto issue_values_product = [&](const uint32_t(&a)[4][4], int s) {
    issue_rows_product<T, Tr::kSwizzle, 4>(acc, a, v_tile(s, wg));
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_64x8_rs<T>(sums, a[ks], ones);
  };
  // The scores of the step in slot s on their own, waited for.
  auto step_scores = [&](int s) {
    if constexpr (kBias) load_bias_fragments(x, bias_tile(s), warp % 4, lane);
    wgmma_fence();
    issue_step_scores(s);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(x);
    fence_registers(q_frag);  // read by the products until the wait (see fence_registers)
    if constexpr (kGrad) fence_registers(dp), fence_registers(do_frag);
  };
  if constexpr (kGrad) {
    // dQ: per step, the scores, then the product. (Issued in one group with the next step's
    // scores, as the forward does, dQ took 1.10 -> 1.35 ms at N = 768: with two slots the next
    // step's tiles are rarely there yet when this step's product is ready.)
    for (int step = 0; step < steps; ++step) {
      const int s = ring.wait(step);
      if (live) {
        step_scores(s);
        uint32_t a[4][4];
        to_ds_operand(step, s, a);
        gemm_rows<T, Tr::kSwizzle, 4>(acc, a, k_tile(s, wg));
      }
      release(ring, s, wg, step, steps, issue);
    }
  } else {
    // Forward, in FlashAttention-3's order within a warpgroup: step s's scores go to the tensor
    // cores, then step s - 1's O += P V behind them in a second group; the softmax of step s
    // runs once its scores are in, while that product still runs, and only O's rescaling and
    // the packing of the new P wait for it.
    uint32_t a[4][4];
    float corr[2];
    int s = ring.wait(0);
    if (live) {
      step_scores(s);
      softmax_in_place(0, s, corr);
      rescale_and_pack(corr, a);
    }
    for (int step = 1; step < steps; ++step) {
      const int next = ring.wait(step);
      if (live) {
        if constexpr (kBias) load_bias_fragments(x, bias_tile(next), warp % 4, lane);
        fence_registers(acc);
        fence_registers(sums);
        wgmma_fence();
        issue_step_scores(next);
        wgmma_commit();
        issue_values_product(a, s);
        wgmma_commit();
        wgmma_wait<1>();
        fence_registers(x);
        fence_registers(q_frag);
        softmax_in_place(step, next, corr);
        // ptxas schedules the wait as early as the block allows, above the softmax; a branch
        // on the last exponentials (never taken: they are not negative, NaN compares false)
        // ends the block after it, so the exponentials run under the product.
        if (x[30] + x[31] < 0.f) asm volatile("nanosleep.u32 0;\n");
        wgmma_wait<0>();
        fence_registers(acc);
        fence_registers(sums);
        fence_registers(a);
        rescale_and_pack(corr, a);
      }
      release(ring, s, wg, step - 1, steps, issue);
      s = next;
    }
    if (live) {
      fence_registers(acc);
      fence_registers(sums);
      wgmma_fence();
      issue_values_product(a, s);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc);
      fence_registers(sums);
    }
  }
  if (!live) return;

  if constexpr (kGrad) {
    const float mul[2] = {p.scale, p.scale};
    store_rows<T>(p.dq, p.dq_stride, p, b, r, h, i_first, acc, mul, t);
  } else {
    float inv[2], l[2] = {sums[0], sums[2]};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      inv[half] = l[half] > 0.f ? 1.f / l[half] : 0.f;  // a fully masked row gives zeros
      const int64_t i = i_first + 8 * half;
      if (t == 0 && i < p.N)
        p.lse[stat_row + i] = l[half] > 0.f ? fmaf(m[half], p.scale * kLog2e, log2f(l[half])) : INFINITY;
    }
    const int64_t dense[5] = {p.R * p.N * p.H * D, p.N * p.H * D, p.H * D, D, 1};
    store_rows<T>(p.o, dense, p, b, r, h, i_first, acc, inv, t);
    // The gated output straight from the registers: the gate costs no extra pass over o.
    if (p.gate != nullptr) store_gated_rows<T>(p, b, r, h, i_first, acc, inv, gate, t);
  }
#endif
}

// dK/dV: block = (b, h, 64 keys, kRows rows r); warpgroup w owns the keys of row r0 + w and
// the ring streams query tiles (queries and dO of every row, the shared bias tile, each row's
// (lse, delta) pairs). Queries past N arrive as zeros (TMA fills them): their P is finite and
// meets zero dO and zero queries, so they add nothing. The key mask is not added to the
// scores: a masked key's P, zero in the forward, only reaches that key's own rows of dK and
// dV, which are set to zero at the store.
template <typename T, int D, bool kBias, bool kMask>
__global__ void __launch_bounds__(Traits<D>::kThreads) __maxnreg__(Traits<D>::kRegisters)
    tma_wgmma_dkv_kernel(const __grid_constant__ Maps maps, const TriangleAttentionParams p) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  using Tr = Traits<D>;
  constexpr int kStages = Tr::kStages;
  constexpr int kStage = Tr::kQueryStage;
  constexpr int kBiasBytes = Tr::kBiasTile;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = aligned_1024(smem_raw);
  unsigned char* k_tiles = smem;                          // kRows tiles
  unsigned char* v_tiles = smem + Tr::kRows * Tr::kTile;  // kRows tiles
  unsigned char* stages = smem + 2 * Tr::kRows * Tr::kTile;
  __shared__ KernelRing<kStages> ring;
  __shared__ uint64_t resident;
  auto q_tile = [&](int s, int w) { return stages + s * kStage + w * Tr::kTile; };
  auto do_tile = [&](int s, int w) { return stages + s * kStage + (Tr::kRows + w) * Tr::kTile; };
  auto bias_tile = [&](int s) { return stages + s * kStage + 2 * Tr::kRows * Tr::kTile; };
  auto stat_row = [&](int s, int w) {
    return reinterpret_cast<const float4*>(bias_tile(s) + kBiasBytes + w * Tr::kStatRow);
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j0 = blockIdx.x * Tr::kBlockN, r0 = blockIdx.y * Tr::kRows;
  const int b = blockIdx.z / static_cast<int>(p.H), h = blockIdx.z % static_cast<int>(p.H);
  const int steps = static_cast<int>((p.N + Tr::kBlockM - 1) / Tr::kBlockM);

  init_barriers(ring, resident);
  auto issue = [&](int step) {
    constexpr uint32_t bytes = 2 * Tr::kRows * Tr::kTile + (kBias ? kBiasBytes : 0) + Tr::kRows * Tr::kStatRow;
    const int s = ring.arm(step, bytes), i0 = step * Tr::kBlockM;
    for (int w = 0; w < Tr::kRows; ++w) {
      tma_load_5d(q_tile(s, w), &maps.q, ring.filled(s), 0, h, i0, r0 + w, b);
      tma_load_5d(do_tile(s, w), &maps.d_o, ring.filled(s), 0, h, i0, r0 + w, b);
      tma_load_3d(const_cast<float4*>(stat_row(s, w)), &maps.stats, ring.filled(s), 2 * i0, h, b * p.R + r0 + w);
    }
    if constexpr (kBias) tma_load_3d(bias_tile(s), &maps.bias, ring.filled(s), j0, i0, blockIdx.z);
  };
  if (threadIdx.x == 0) {
    barrier_expect_bytes(&resident, 2 * Tr::kRows * Tr::kTile);
    for (int w = 0; w < Tr::kRows; ++w) {
      tma_load_5d(k_tiles + w * Tr::kTile, &maps.k, &resident, 0, h, j0, r0 + w, b);
      tma_load_5d(v_tiles + w * Tr::kTile, &maps.v, &resident, 0, h, j0, r0 + w, b);
    }
  }
  prefetch<kStages>(steps, issue);

  // Warpgroup wg: the keys of row r; scores transposed (rows keys, columns queries).
  const int wg = warp / 4, g = lane / 4, t = lane % 4, row16 = 16 * (warp % 4);
  const int64_t r = r0 + wg;
  const bool live = r < p.R;
  int bias_at[4];
  transposed_tile_offsets(bias_at, row16, lane);
  barrier_wait(&resident, 0);

  float dk[16], dv[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) dk[i] = dv[i] = 0.f;
  for (int step = 0; step < steps; ++step) {
    const int s = ring.wait(step);
    if (live) {
      float x[32], dp[32];
      wgmma_fence();
      issue_scores<T, Tr::kSwizzle>(x, k_tiles + wg * Tr::kTile, q_tile(s, wg));
      issue_scores<T, Tr::kSwizzle>(dp, v_tiles + wg * Tr::kTile, do_tile(s, wg));
      wgmma_commit();
      uint32_t bf[16];
      if constexpr (kBias) load_tile_transposed(bf, bias_tile(s), bias_at);
      wgmma_wait<0>();
      fence_registers(x);
      fence_registers(dp);
      if constexpr (kBias) scale_add_bias<T>(x, bf, p.scale);
      const float to_log2 = kBias ? kLog2e : p.scale * kLog2e;  // (un)scaled logits to base-2 exponents
      // P^T and dS^T straight into the A fragments of dV += P^T dO and dK += dS^T Q; the
      // statistics of columns 8c + 2t, +1 are one 16-byte (lse, delta, lse, delta) load.
      uint32_t ap[4][4], as[4][4];
      const float4* stats = stat_row(s, wg);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float4 st = stats[4 * c + t];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = 4 * c + 2 * half;
          const float p0 = exp2_approx(fmaf(x[i], to_log2, -st.x));
          const float p1 = exp2_approx(fmaf(x[i + 1], to_log2, -st.z));
          ap[c / 2][(c % 2) * 2 + half] = pack2<T>(p0, p1);
          as[c / 2][(c % 2) * 2 + half] = pack2<T>(p0 * (dp[i] - st.y), p1 * (dp[i + 1] - st.w));
        }
      }
      fence_registers(dv);
      fence_registers(dk);
      wgmma_fence();
      issue_rows_product<T, Tr::kSwizzle, 4>(dv, ap, do_tile(s, wg));
      issue_rows_product<T, Tr::kSwizzle, 4>(dk, as, q_tile(s, wg));
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(dv);
      fence_registers(dk);
    }
    release(ring, s, wg, step, steps, issue);
  }
  if (!live) return;

  const int64_t j_first = j0 + row16 + g;
  if constexpr (kMask) {
    // A masked key's rows are replaced, not multiplied by 0: its unmasked P can overflow to inf.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t j = j_first + 8 * half;
      if (j < p.N && p.mask[(static_cast<int64_t>(b) * p.R + r) * p.mask_ld + j] == -INFINITY) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          dk[4 * c + 2 * half] = dk[4 * c + 2 * half + 1] = dv[4 * c + 2 * half] = dv[4 * c + 2 * half + 1] = 0.f;
      }
    }
  }
  const float dk_mul[2] = {p.scale, p.scale}, dv_mul[2] = {1.f, 1.f};
  store_rows<T>(p.dk, p.dk_stride, p, b, r, h, j_first, dk, dk_mul, t);
  store_rows<T>(p.dv, p.dv_stride, p, b, r, h, j_first, dv, dv_mul, t);
#endif
}

// Bias gradient: block = (b, h, 128 queries x 64 keys, a chunk of rows r); warpgroup w owns
// queries i0 + 64w..+63 and keeps sum_r dS of them in registers while the ring streams each
// row's queries, dO, keys, values and key mask. The sum over a chunk's rows runs in row
// order; the chunks' partial sums are added in chunk order by dbias_reduce.
template <typename T, int D, bool kMask>
__global__ void __launch_bounds__(Traits<D>::kThreads) __maxnreg__(Traits<D>::kRegisters)
    tma_wgmma_dbias_kernel(const __grid_constant__ Maps maps, const TriangleAttentionParams p, int64_t chunks) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  using Tr = Traits<D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = aligned_1024(smem_raw);
  unsigned char* bias_tiles = smem;  // kRows tiles of fragments
  unsigned char* stages = smem + Tr::kRows * Tr::kBiasFragments;
  __shared__ KernelRing<Tr::kStages> ring;
  __shared__ uint64_t resident;
  auto q_tile = [&](int s, int w) { return stages + s * Tr::kRowStage + w * Tr::kTile; };
  auto do_tile = [&](int s, int w) { return stages + s * Tr::kRowStage + (Tr::kRows + w) * Tr::kTile; };
  auto k_tile = [&](int s) { return stages + s * Tr::kRowStage + 2 * Tr::kRows * Tr::kTile; };
  auto v_tile = [&](int s) { return k_tile(s) + Tr::kTile; };
  auto mask_row = [&](int s) { return reinterpret_cast<float*>(k_tile(s) + 2 * Tr::kTile); };
  auto stat_row = [&](int s, int w) {
    return reinterpret_cast<float2*>(k_tile(s) + 2 * Tr::kTile + Tr::kMaskRow + w * Tr::kStatRow);
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t key_tiles = (p.N + Tr::kBlockN - 1) / Tr::kBlockN;
  const int i0 = static_cast<int>(blockIdx.x / key_tiles) * Tr::kRows * Tr::kBlockM;
  const int j0 = static_cast<int>(blockIdx.x % key_tiles) * Tr::kBlockN;
  const int64_t chunk = blockIdx.y, bh = blockIdx.z;
  const int b = static_cast<int>(bh / p.H), h = static_cast<int>(bh % p.H);
  const int64_t rows_per = (p.R + chunks - 1) / chunks;
  const int r_begin = static_cast<int>(chunk * rows_per < p.R ? chunk * rows_per : p.R);
  const int r_end = static_cast<int>(r_begin + rows_per < p.R ? r_begin + rows_per : p.R);
  const int steps = r_end - r_begin;

  init_barriers(ring, resident);
  auto issue = [&](int step) {
    // The row's mask comes with every step, added only where the tile bits say (see the forward).
    const uint32_t bytes =
        2 * Tr::kRows * Tr::kTile + 2 * Tr::kTile + (kMask ? Tr::kMaskRow : 0) + Tr::kRows * Tr::kStatRow;
    const int s = ring.arm(step, bytes), r = r_begin + step;
    for (int w = 0; w < Tr::kRows; ++w) {
      tma_load_5d(q_tile(s, w), &maps.q, ring.filled(s), 0, h, i0 + w * Tr::kBlockM, r, b);
      tma_load_5d(do_tile(s, w), &maps.d_o, ring.filled(s), 0, h, i0 + w * Tr::kBlockM, r, b);
      tma_load_3d(stat_row(s, w), &maps.stats, ring.filled(s), 2 * (i0 + w * Tr::kBlockM), h, b * p.R + r);
    }
    tma_load_5d(k_tile(s), &maps.k, ring.filled(s), 0, h, j0, r, b);
    tma_load_5d(v_tile(s), &maps.v, ring.filled(s), 0, h, j0, r, b);
    if constexpr (kMask) tma_load_3d(mask_row(s), &maps.mask, ring.filled(s), j0, r, b);
  };
  if (threadIdx.x == 0) {
    // The second half's tile past N (N <= i0 + 64) is read from the last query tile instead:
    // those rows are never stored.
    barrier_expect_bytes(&resident, Tr::kRows * Tr::kBiasFragments);
    for (int w = 0; w < Tr::kRows; ++w) {
      const int64_t qt = min(static_cast<int64_t>(i0 / Tr::kBlockM + w), key_tiles - 1);
      bulk_load(bias_tiles + w * Tr::kBiasFragments, bias_fragment_tile(p, bh, qt, j0 / Tr::kBlockN),
                Tr::kBiasFragments, &resident);
    }
  }
  prefetch<Tr::kStages>(steps, issue);

  const int wg = warp / 4, g = lane / 4, t = lane % 4, row16 = 16 * (warp % 4);
  const int64_t i_first = i0 + wg * Tr::kBlockM + row16 + g;
  barrier_wait(&resident, 0);

  // The bias does not depend on the row r, so its factor comes out of the sum over rows:
  // dS = P (dP - delta) with P = 2^(c q.k - lse) e^bias, and sum_r dS = e^bias sum_r
  // 2^(c q.k - lse) (dP - delta). Where the block's bias is moderate the rows' scores need no
  // bias (no fragment reads per step; the factor is applied once at the end); where |bias| > 40
  // somewhere, e^-bias could leave the float range inside the sum, and every step starts its
  // scores at the bias as before.
  const float to_log2 = p.scale * kLog2e;  // unscaled logits to base-2 exponents
  // The fragments are read again for the factor at the end (held through the loop, they spill).
  auto bias_fragments = [&](float(&frag)[32]) {
    load_bias_fragments(frag, bias_tiles + wg * Tr::kBiasFragments, warp % 4, lane);
  };
  bool moderate = true;
  {
    float frag[32];
    bias_fragments(frag);
#pragma unroll
    for (int i = 0; i < 32; ++i) moderate = moderate && fabsf(frag[i]) * p.scale <= kFactoredBiasLimit;
  }
  const bool factored = __syncthreads_and(moderate);

  float acc[32];  // sum_r dS (factored: without the bias's factor)
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  for (int step = 0; step < steps; ++step) {
    const int s = ring.wait(step);
    // The rows' (lse, delta) pairs came with the step's tiles (zeros past N, whose rows are
    // never stored).
    float lse2[2], delta[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float2 st = stat_row(s, wg)[row16 + g + 8 * half];
      lse2[half] = st.x, delta[half] = st.y;
    }
    const bool masked = kMask && tile_masked(p, b, r_begin + step, j0 / Tr::kBlockN);
    // Unscaled logits (see load_bias_fragments): the product alone where factored (it does not
    // read x then), else added to the bias fragments. And dP.
    float x[32], dp[32];
    if (!factored) bias_fragments(x);
    wgmma_fence();
    issue_scores<T, Tr::kSwizzle>(x, q_tile(s, wg), k_tile(s), !factored);
    issue_scores<T, Tr::kSwizzle>(dp, do_tile(s, wg), v_tile(s));
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(x);
    fence_registers(dp);
    if (masked) add_key_mask(x, mask_row(s), t);
    else mask_tail(x, j0, p.N, t);
    to_ds(x, dp, lse2, delta, to_log2);
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] += x[i];
    release(ring, s, wg, step, steps, issue);
  }
  if (factored) {
    // e^bias = 2^(c bias / scale), the fragments being bias / scale.
    float frag[32];
    bias_fragments(frag);
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] *= exp2_approx(frag[i] * to_log2);
  }

  float* out = p.dbias_partial + (chunk * p.B * p.H + bh) * p.N * p.N;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int64_t row = i_first + 8 * ((i / 2) % 2), col = j0 + 8 * (i / 4) + 2 * t + i % 2;
    if (row < p.N && col < p.N) out[row * p.N + col] = acc[i];
  }
#endif
}

// bias_fragments[bh][qt][kt] = the 64 x 64 tile (queries qt, keys kt) of bias / scale in the
// order the score fragments hold it (load_bias_fragments), zeros past N. A thread per four
// values, one thread's x[4c..4c+3] (rows i, i + 8, two adjacent keys each): one 16-byte store,
// a warp's 512 bytes contiguous, and the index arithmetic once per four values in 32 bits (a
// thread per value with 64-bit divisions ran at 0.8 TB/s: 18 us at N = 768).
template <typename T>
__global__ void bias_fragments_kernel(const TriangleAttentionParams p) {
  const int n = static_cast<int>(p.N), tiles = (n + 63) / 64;
  const int quads = static_cast<int>(p.B * p.H) * tiles * tiles * 1024;  // checked on the host
  const float inv_scale = 1.f / p.scale;
  const T* bias = static_cast<const T*>(p.bias);
  for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += gridDim.x * blockDim.x) {
    const int lane = q % 32, c = (q / 32) % 8, w = (q / 256) % 4, tile = q / 1024;
    const int kt = tile % tiles, qt = (tile / tiles) % tiles, bh = tile / (tiles * tiles);
    const int i = qt * 64 + 16 * w + lane / 4, j = kt * 64 + 8 * c + 2 * (lane % 4);
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = i + 8 * (e / 2), col = j + e % 2;
      v[e] = row < n && col < n ? mma::to_float(bias[(static_cast<int64_t>(bh) * n + row) * n + col]) * inv_scale : 0.f;
    }
    reinterpret_cast<float4*>(p.bias_fragments)[q] = make_float4(v[0], v[1], v[2], v[3]);
  }
}

void make_bias_fragments(const TriangleAttentionParams& p, cudaStream_t stream) {
  MF_CHECK(p.bias_fragments != nullptr, "triangle_attention sm_90a kernels: no bias fragment workspace");
  constexpr int64_t kMaxBlocks = 65536;
  const int64_t tiles = (p.N + 63) / 64, quads = p.B * p.H * tiles * tiles * 1024;
  // The kernel's 32-bit index, stepped by the whole grid, stays below 2^31.
  MF_CHECK(quads + kMaxBlocks * 256 < (int64_t{1} << 31), "triangle_attention sm_90a kernels: ", quads,
           " bias fragment quads exceed the 32-bit index");
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((quads + 255) / 256, kMaxBlocks));
  if (p.dtype == DType::kBFloat16) launch_kernel(bias_fragments_kernel<__nv_bfloat16>, blocks, 256, 0, stream, p);
  else launch_kernel(bias_fragments_kernel<__half>, blocks, 256, 0, stream, p);
}

// ---- host side ----

// [B, R, N, H, d] through its strides as a 5-D map (d innermost), boxes of `rows` of N.
CUtensorMap operand_map(DType dtype, const void* ptr, const int64_t (&s)[5], const TriangleAttentionParams& p,
                        int rows, CUtensorMapSwizzle swizzle) {
  const uint64_t dims[5] = {static_cast<uint64_t>(p.d), static_cast<uint64_t>(p.H), static_cast<uint64_t>(p.N),
                            static_cast<uint64_t>(p.R), static_cast<uint64_t>(p.B)};
  const uint64_t strides[4] = {static_cast<uint64_t>(s[3] * 2), static_cast<uint64_t>(s[2] * 2),
                               static_cast<uint64_t>(s[1] * 2), static_cast<uint64_t>(s[0] * 2)};
  const uint32_t box[5] = {static_cast<uint32_t>(p.d), 1, static_cast<uint32_t>(rows), 1, 1};
  return sm90::tensor_map(sm90::map_type(dtype), 5, ptr, dims, strides, box, swizzle,
                          "triangle_attention's q/k/v [B, R, N, H, d] through its strides");
}

// The bias [B * H, N, N] with rows bias_ld elements apart, boxes of 64 x 64.
CUtensorMap bias_map(const TriangleAttentionParams& p) {
  const uint64_t dims[3] = {static_cast<uint64_t>(p.N), static_cast<uint64_t>(p.N), static_cast<uint64_t>(p.B * p.H)};
  const uint64_t strides[2] = {static_cast<uint64_t>(p.bias_ld * 2), static_cast<uint64_t>(p.N * p.bias_ld * 2)};
  const uint32_t box[3] = {64, 64, 1};
  return sm90::tensor_map(sm90::map_type(p.dtype), 3, p.bias_rows, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                          "triangle_attention's bias");
}

// The additive key mask [B, R, N] with rows mask_ld (a multiple of 64, -inf past N) apart.
CUtensorMap mask_map(const TriangleAttentionParams& p, int keys) {
  const uint64_t dims[3] = {static_cast<uint64_t>(p.mask_ld), static_cast<uint64_t>(p.R), static_cast<uint64_t>(p.B)};
  const uint64_t strides[2] = {static_cast<uint64_t>(p.mask_ld * 4), static_cast<uint64_t>(p.R * p.mask_ld * 4)};
  const uint32_t box[3] = {static_cast<uint32_t>(keys), 1, 1};
  return sm90::tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, p.mask, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                          "triangle_attention's key mask");
}

// The backward's (lse, delta) pairs [B, R, H, stats_ld, 2] as [B * R, H, 2 N] floats, boxes of
// 64 queries (pairs past N read as zeros).
CUtensorMap stats_map(const TriangleAttentionParams& p) {
  const uint64_t dims[3] = {static_cast<uint64_t>(2 * p.N), static_cast<uint64_t>(p.H),
                            static_cast<uint64_t>(p.B * p.R)};
  const uint64_t strides[2] = {static_cast<uint64_t>(p.stats_ld * 8), static_cast<uint64_t>(p.H * p.stats_ld * 8)};
  const uint32_t box[3] = {128, 1, 1};
  return sm90::tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, p.stats, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                          "triangle_attention's softmax statistics");
}

// The maps of one call; tiles of 64 rows of q, k, v and dO.
template <int D>
Maps make_maps(const TriangleAttentionParams& p, bool grad) {
  using Tr = Traits<D>;
  const auto swizzle = Tr::kSwizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  Maps maps{};
  maps.q = operand_map(p.dtype, p.q, p.q_stride, p, 64, swizzle);
  maps.k = operand_map(p.dtype, p.k, p.k_stride, p, 64, swizzle);
  maps.v = operand_map(p.dtype, p.v, p.v_stride, p, 64, swizzle);
  if (grad) {
    const int64_t dense[5] = {p.R * p.N * p.H * p.d, p.N * p.H * p.d, p.H * p.d, p.d, 1};
    maps.d_o = operand_map(p.dtype, p.d_o, dense, p, 64, swizzle);
    maps.stats = stats_map(p);
  }
  if (p.bias_rows != nullptr) maps.bias = bias_map(p);  // dK/dV's bf16 tiles
  if (p.mask != nullptr) {
    MF_CHECK(p.mask_ld % Tr::kBlockN == 0, "triangle_attention sm_90a kernels: mask rows must be padded to ",
             Tr::kBlockN, " keys");
    maps.mask = mask_map(p, Tr::kBlockN);
  }
  return maps;
}

// Launches with `smem` bytes of dynamic shared memory; after the first launch (which set the
// kernel's shared-memory limit), checks that two blocks fit per SM as the tile choices assume
// (warns once, naming the kernel, if not).
template <typename Kernel, typename... Args>
void launch(const char* name, Kernel kernel, dim3 grid, int threads, int smem, cudaStream_t stream, Args... args) {
  launch_kernel(kernel, grid, threads, smem, stream, args...);  // sets the shared-memory limit
  sm90::check_blocks_per_sm("triangle_attention", name, reinterpret_cast<const void*>(kernel), threads, smem, 2);
}

void check_grid(int64_t x, int64_t y, int64_t z) {
  MF_CHECK(x <= 0x7fffffff && y <= 65535 && z <= 65535, "triangle_attention sm_90a kernels: grid ", x, " x ", y,
           " x ", z, " exceeds the launch limits");
}

// Calls f(has_bias, has_mask) with each a std::bool_constant, so that one call picks the
// kernel instantiation for the inputs at hand.
template <typename F>
void with_bias_and_mask(const TriangleAttentionParams& p, F&& f) {
  auto with_mask = [&](auto bias) {
    p.mask != nullptr ? f(bias, std::true_type{}) : f(bias, std::false_type{});
  };
  p.bias != nullptr ? with_mask(std::true_type{}) : with_mask(std::false_type{});
}

// Forward (kGrad false) or dQ (kGrad true).
template <typename T, int D, bool kGrad>
void launch_key_loop(const TriangleAttentionParams& p, cudaStream_t stream) {
  using Tr = Traits<D>;
  const Maps maps = make_maps<D>(p, kGrad);
  const int64_t x = (p.N + Tr::kBlockM - 1) / Tr::kBlockM, y = (p.R + Tr::kRows - 1) / Tr::kRows, z = p.B * p.H;
  check_grid(x, y, z);
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z));
  const char* name = kGrad ? "sm_90a dQ kernel" : "sm_90a forward kernel";
  with_bias_and_mask(p, [&](auto bias, auto mask) {
    launch(name, tma_wgmma_key_loop_kernel<T, D, decltype(bias)::value, decltype(mask)::value, kGrad>, grid,
           Tr::kThreads, Tr::key_loop_smem(kGrad, decltype(mask)::value), stream, maps, p);
  });
}

// dK/dV: a block per (b, h, 64 keys, kRows rows).
template <typename T, int D>
void launch_dkv(const TriangleAttentionParams& p, cudaStream_t stream) {
  using Tr = Traits<D>;
  const Maps maps = make_maps<D>(p, true);
  const int64_t x = (p.N + Tr::kBlockN - 1) / Tr::kBlockN, y = (p.R + Tr::kRows - 1) / Tr::kRows, z = p.B * p.H;
  check_grid(x, y, z);
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z));
  const char* name = "sm_90a dK/dV kernel";
  with_bias_and_mask(p, [&](auto bias, auto mask) {
    launch(name, tma_wgmma_dkv_kernel<T, D, decltype(bias)::value, decltype(mask)::value>, grid, Tr::kThreads,
           Tr::kQuerySmem, stream, maps, p);
  });
}

template <typename T, int D>
void launch_dbias(const TriangleAttentionParams& p, cudaStream_t stream) {
  using Tr = Traits<D>;
  const Maps maps = make_maps<D>(p, true);
  const int64_t chunks = dbias_partials(p);
  const int64_t x = (p.N + 2 * Tr::kBlockM - 1) / (2 * Tr::kBlockM) * ((p.N + Tr::kBlockN - 1) / Tr::kBlockN);
  check_grid(x, chunks, p.B * p.H);
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(chunks), static_cast<unsigned>(p.B * p.H));
  const char* name = "sm_90a bias-gradient kernel";
  if (p.mask != nullptr)
    launch(name, tma_wgmma_dbias_kernel<T, D, true>, grid, Tr::kThreads, Tr::kRowSmem, stream, maps, p, chunks);
  else
    launch(name, tma_wgmma_dbias_kernel<T, D, false>, grid, Tr::kThreads, Tr::kRowSmem, stream, maps, p, chunks);
  dbias_reduce(p, chunks, stream);
}

}  // namespace

bool tma_operand(const void* ptr, const int64_t (&stride)[5], int64_t elem_bytes) {
  if (ptr == nullptr) return true;
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0 || stride[4] != 1) return false;
  for (int i = 0; i < 4; ++i)
    if (stride[i] <= 0 || (stride[i] * elem_bytes) % 16 != 0) return false;
  return true;
}

void forward_wgmma(const TriangleAttentionParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MF_CHECK(p.d == 32, "triangle_attention sm_90a kernels: head dim ", p.d, " is not instantiated");
  if (p.bias != nullptr) make_bias_fragments(p, s);
  if (p.dtype == DType::kBFloat16) return launch_key_loop<__nv_bfloat16, 32, false>(p, s);
  MF_CHECK(p.dtype == DType::kFloat16, "triangle_attention sm_90a kernels take fp16/bf16");
  launch_key_loop<__half, 32, false>(p, s);
}

void backward_wgmma(const TriangleAttentionParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MF_CHECK(p.d == 32, "triangle_attention sm_90a kernels: head dim ", p.d, " is not instantiated");
  MF_CHECK(p.dtype != DType::kFloat32, "triangle_attention sm_90a kernels take fp16/bf16");
  const bool bf16 = p.dtype == DType::kBFloat16;
  MF_CHECK(p.stats != nullptr && p.stats_ld % 2 == 0, "triangle_attention sm_90a backward: no (lse, delta) pairs");
  // For dQ and the bias gradient: made again rather than kept from the forward, whose copy
  // (twice the bias's bytes) would then live from forward to backward in every block.
  if (p.bias != nullptr) make_bias_fragments(p, s);
  bf16 ? launch_key_loop<__nv_bfloat16, 32, true>(p, s) : launch_key_loop<__half, 32, true>(p, s);
  bf16 ? launch_dkv<__nv_bfloat16, 32>(p, s) : launch_dkv<__half, 32>(p, s);
  if (p.bias == nullptr) return;
  bf16 ? launch_dbias<__nv_bfloat16, 32>(p, s) : launch_dbias<__half, 32>(p, s);
}

}  // namespace megafold::ops::cuda
