// LayerNorm + Linear for Hopper (sm_90a): the forward, dx and the weight-gradient kernels on
// wgmma over shared-memory tiles that TMA fills, and TMA stores of the output (see
// layernorm_linear_cuda.h for the maths and layernorm_linear_mma.cu for the sm_80 kernels).
//
// All three: two consumer warpgroups and no producer warp, so a block is 8 warps and two
// blocks per SM get 128 registers a thread (a ninth, producer warp would cap them at 96).
// Forward: blocks loop over tiles of 128 rows (64 per warpgroup), and the ring of weight tiles
// runs on across them, refilled by the last warpgroup done with a slot, so a tile's first
// weights arrive during the previous tile's last steps and epilogue. With the triangle-
// multiplication epilogue two blocks per SM take all the tiles (persistent); the plain forward
// gets one tile per block (faster there). dx: the ring refilled by the last warp done with a
// slot. G: thread 0 keeps a ring of kStages slots filled (each refill issued after its own step,
// for the step kStages ahead; the xhat build meets every warp at each step anyway); its grid of
// row chunks is a function of the shape (the order of the chunk sums, hence the bits, must not
// depend on the GPU).
//   forward  LayerNorm in registers, the rows in shared memory as the A operand; per 64 output
//            features the weight tile arrives by TMA, y += A W^T (m64n64k16 x 8), + bias,
//            packed to 16 bits in a swizzled staging tile that one thread stores by TMA while
//            the next tile runs.
//   dx       block = 128 rows: dxhat' = dy W over c_out in 64-feature steps (dy and weight
//            tiles by TMA, the weight read MN-major), then the LayerNorm backward by rows
//            (the accumulators exchanged through the last dy slot; rows128.cuh).
//   G        block = 128 output features x a chunk of rows: G = dy^T xhat (dy tiles by TMA,
//            read MN-major as A; xhat rebuilt from x, mean and rstd by all threads into a
//            double buffer while the previous step's products run) and colsum(dy) as one
//            more m64n8 product against a tile of ones. Chunk partials are summed in chunk
//            order afterwards: no atomics, bitwise repeatable.
// Why: the mma.sync kernels were latency- and issue-bound (loader address arithmetic, ldmatrix,
// a block barrier per step) at 1.6-2.0 TB/s of a 4.3 TB/s copy; here the tile loads are one
// instruction and the products read shared memory directly. Notes: bench/notes/fused_ops.md.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/hopper.cuh"
#include "core/mma.cuh"
#include "ops/hopper/rows128.cuh"
#include "ops/hopper/sm90.h"
#include "ops/kernel_dispatch.cuh"
#include "ops/layernorm_linear/layernorm_linear_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

// Tile choices (c_in = 128, 16-bit products).
struct Traits {
  static constexpr int kK = static_cast<int>(kLayerNormLinearCin);
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockRows = 64 * kWarpgroups;  // rows of x (forward, dx) or features (G)
  static constexpr int kTileN = 64;                    // features per step (forward, dx)
  static constexpr int kStepM = 64;                    // rows per step (G)
  static constexpr int kStages = 3;         // dx, G: dy tiles from DRAM
  // Forward: weight tiles from L2, three slots. One output staging tile per warpgroup: a
  // second (with two weight slots) measured no faster, and so did a second accumulator set
  // that let tile j + 1's products run under tile j's epilogue (0.40 against 0.37 ms).
  static constexpr int kForwardStages = 3;
  static constexpr int kStaging = 1;
  // A panel: 64 rows of 128 bytes (64 16-bit values) in the 128-byte swizzle, 8 KB. A 128-wide
  // row (c_in) spans two panels.
  static constexpr int kPanel = 64 * 128;
  // forward: A (2 panels per warpgroup), weight tiles (2 panels a slot), output staging
  static constexpr int kForwardSmem = (kWarpgroups * 2 + kForwardStages * 2 + kWarpgroups * kStaging) * kPanel + 1024;
  // dx: a slot holds both warpgroups' dy tiles and the weight tile (2 panels), or, as the two
  // steps after the last, one warpgroup's 64 rows of x (up to 4 panels when x is fp32)
  static constexpr int kDxSlot = (kWarpgroups + 2) * kPanel;
  static constexpr int kDxSmem = kStages * kDxSlot + 1024;
  // G: a slot holds dy for both warpgroups' features, 64 rows of x (xhat is rebuilt over them in
  // place) and their mean and rstd; fp32 x fits two slots, 16-bit x three. Plus 1 KB of ones.
  __host__ __device__ static constexpr int gx_bytes(int x_bytes) { return 64 * kK * x_bytes; }
  // (slots start on 1024-byte boundaries, where the swizzle pattern starts)
  __host__ __device__ static constexpr int g_slot(int x_bytes) {
    return (kWarpgroups * kPanel + gx_bytes(x_bytes) + 2 * 64 * 4 + 1023) / 1024 * 1024;
  }
  __host__ __device__ static constexpr int g_stages(int x_bytes) { return x_bytes == 4 ? 2 : 3; }
  __host__ __device__ static constexpr int g_smem(int x_bytes) { return g_stages(x_bytes) * g_slot(x_bytes) + 1024 + 1024; }
  static constexpr int kBlocksPerSm = 2;
  static_assert(kK == 128 && kTileN == 64 && kStepM == 64, "the panel arithmetic below assumes these");
  static_assert(kDxSlot >= kThreads / 32 * 8 * kK * 4, "dx's row exchange: 8 rows of fp32 per warp in one slot");
  static_assert(kStages > kWarpgroups, "dx's x tiles must not land in the last dy step's slot (the row exchange)");
};

using Tr = Traits;

// The triangle-multiplication epilogue's outputs (see TrimulEpilogue): a and b channel-major
// [B, c, plane] in boxes of 64 rows x 64 channels, the output gate as rows.
struct TrimulMaps {
  CUtensorMap a, b, gate;
  const float* mask;
  int c_tiles;  // 64-wide tiles per operand (c / 64); the gate's follow them up to N
  int64_t plane;
};

struct Maps {
  CUtensorMap w;     // [N, 128], boxes 64 features x 64 columns
  CUtensorMap dy;    // [M, N], boxes 64 rows x 64 features (also y for the forward's stores)
  CUtensorMap x;     // [M, 128], boxes 64 rows x 128 bytes (x_panel_cols(Tin) columns)
  CUtensorMap mean;  // [M], boxes of 64
  CUtensorMap rstd;  // [M], boxes of 64
};

#if defined(MEGAFOLD_SM90A_DEVICE)
using namespace megafold::hopper;
using mma::load4;
using mma::pack2;

template <int kStages>
__device__ __forceinline__ void init_ring(Ring<kStages>& ring) {
  if (threadIdx.x == 0) {
    ring.init(Tr::kThreads);
    barrier_init_fence();
  }
  __syncthreads();
}

template <int kStages>
__device__ __forceinline__ void init_ring(SelfFilledRing<kStages, Tr::kWarpgroups>& ring) {
  if (threadIdx.x == 0) {
    ring.init();
    barrier_init_fence();
  }
  __syncthreads();
}

// x tiles arrive as panels of 64 rows x 128 bytes (128-byte swizzle): 32 fp32 or 64 16-bit
// columns per panel.
template <typename Tin>
constexpr int kXPanelCols = 128 / static_cast<int>(sizeof(Tin));

// Byte offset of column `col` (a 4- or 8-byte aligned group inside one 16-byte chunk) of row r.
template <typename Tin>
__device__ __forceinline__ int x_offset(int r, int col) {
  const int byte = (col % kXPanelCols<Tin>) * static_cast<int>(sizeof(Tin));
  return (col / kXPanelCols<Tin>) * Tr::kPanel + r * 128 + (((byte / 16) ^ (r % 8)) * 16) + byte % 16;
}

template <typename Tin>
__device__ __forceinline__ float4 x_quad(const unsigned char* tile, int r, int col) {
  return load4(reinterpret_cast<const Tin*>(tile + x_offset<Tin>(r, col)));
}

// Issues the TMA copies of rows row0 .. row0 + 63 of x into `tile` (completing on `bar`).
template <typename Tin>
__device__ __forceinline__ void load_x_rows(unsigned char* tile, const CUtensorMap* map, uint64_t* bar, int64_t row0) {
#pragma unroll
  for (int c = 0; c < Tr::kK / kXPanelCols<Tin>; ++c)
    tma_load_2d(tile + c * Tr::kPanel, map, bar, c * kXPanelCols<Tin>, static_cast<int>(row0));
}

// Four 16-bit values at 8-byte piece `piece` of row r of a two-panel (128-wide) tile.
template <typename T>
__device__ __forceinline__ void store_piece(unsigned char* tile, int r, int lane, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(tile + (lane / 16) * Tr::kPanel + swizzled(r, lane % 16)) =
      make_uint2(pack2<T>(a, b), pack2<T>(c, d));
}
#endif

// kTrimul: the weight tiles run in the order p_a0, g_a0, p_a1, g_a1, p_b0, g_b0, ..., then the
// output gate's (column tiles of y = [p_a | p_b | g_a | g_b | gate logits], 64 wide), and
// instead of y the epilogue writes a = p_a * sigmoid(g_a) * mask (b alike) channel-major from
// the p tile's rounded values kept in registers and the g tile's, and the output gate
// sigmoid(logits) as rows: what triangle_multiplication_operands computes from y, with the
// same roundings. y itself never leaves the chip (the backward recomputes it).
template <typename Tin, typename T, bool kTrimul>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kBlocksPerSm)
    tma_wgmma_forward_kernel(const __grid_constant__ Maps maps, const __grid_constant__ CUtensorMap y_map,
                             const __grid_constant__ TrimulMaps tm, const LayerNormLinearParams p) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  constexpr int kStages = Tr::kForwardStages;
  // 16-bit x arrives by TMA straight into the A tiles, issued before the first weight copies, and
  // is normalised in place (one DRAM round trip a block instead of two passes of loads a warp);
  // fp32 x is twice the tiles' size, and the persistent TriMul form would need its next tile's
  // rows elsewhere.
  constexpr bool kXByTma = !kTrimul && sizeof(Tin) == 2;
  extern __shared__ unsigned char raw[];
  __shared__ SelfFilledRing<kStages, Tr::kWarpgroups> ring;
  __shared__ uint64_t x_landed[Tr::kWarpgroups];
  unsigned char* a_s = aligned_1024(raw);                            // [warpgroup][2 panels]
  unsigned char* w_s = a_s + Tr::kWarpgroups * 2 * Tr::kPanel;       // [slot][2 panels]
  unsigned char* o_s = w_s + kStages * 2 * Tr::kPanel;               // [warpgroup] one staging panel
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int n_tiles = static_cast<int>((p.N + Tr::kTileN - 1) / Tr::kTileN);
  // Step j's weight tile (output columns 64 tile(j) ..).
  const int pair_tiles = kTrimul ? 4 * tm.c_tiles : 0;
  auto tile = [&](int j) { return j >= pair_tiles ? j : j % 2 == 0 ? j / 2 : 2 * tm.c_tiles + j / 2; };
  // This block's row tiles: blockIdx.x, + gridDim.x, ...; n_tiles ring steps each.
  const int64_t row_tiles = (p.M + Tr::kBlockRows - 1) / Tr::kBlockRows;
  const int steps = block_tiles(row_tiles) * n_tiles;
  if (kXByTma && threadIdx.x == 0)
    for (int w = 0; w < Tr::kWarpgroups; ++w) barrier_init(&x_landed[w], 1);  // fenced by init_ring
  init_ring(ring);
  if (kXByTma && threadIdx.x == 0) {  // the plain forward's grid: one row tile per block
    for (int w = 0; w < Tr::kWarpgroups; ++w) {
      barrier_expect_bytes(&x_landed[w], 2 * Tr::kPanel);  // rows past M arrive as zeros
      load_x_rows<Tin>(a_s + w * 2 * Tr::kPanel, &maps.x, &x_landed[w],
                       static_cast<int64_t>(blockIdx.x) * Tr::kBlockRows + 64 * w);
    }
  }
  auto load_w = [&](int step) {
    const int s = ring.arm(step, 2 * Tr::kPanel), n0 = tile(step % n_tiles) * Tr::kTileN;
    tma_load_2d(w_s + s * 2 * Tr::kPanel, &maps.w, ring.filled(s), 0, n0);
    tma_load_2d(w_s + s * 2 * Tr::kPanel + Tr::kPanel, &maps.w, ring.filled(s), 64, n0);
  };
  if (threadIdx.x == 0)
    for (int step = 0; step < kStages && step < steps; ++step) load_w(step);

  unsigned char* a_tile = a_s + wg * 2 * Tr::kPanel;
  const Tin* x = static_cast<const Tin*>(p.x);
  const uint64_t a_lo = smem_desc<128>(a_tile), a_hi = smem_desc<128>(a_tile + Tr::kPanel);
  const bool leader = threadIdx.x % 128 == 0;
  unsigned char* staging = o_s + wg * Tr::kPanel;  // y, or with kTrimul the operand or gate tile
  uint32_t kept[8][2];                               // kTrimul: the p tile's rounded values
  int step = 0;
  for (int64_t row_tile = blockIdx.x; row_tile < row_tiles; row_tile += gridDim.x) {
    const int64_t row0 = row_tile * Tr::kBlockRows + wg * 64;
    prefetch_rows_l2(x, row0 + static_cast<int64_t>(gridDim.x) * Tr::kBlockRows, p.M, leader);  // the next tile
    // The previous tile's products read the A tile and were waited for.
    if constexpr (kXByTma) {
      barrier_wait(&x_landed[wg], 0);
      __syncwarp();  // converged again for the LayerNorm's shuffles (else ptxas emits a second, divergent copy)
    }
    layer_norm_rows<Tin, T, RowStats::kWrite, kXByTma>(a_tile, x, p.M, row0, p.ln_w, p.ln_b, p.eps, p.mean, p.rstd);
    fence_async_shared();  // wgmma reads the tile through the async proxy
    named_barrier(1 + wg, 128);
    float mask[2] = {1.f, 1.f};
    if constexpr (kTrimul) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + 16 * warp + g + 8 * h;
        if (tm.mask != nullptr && row < p.M) mask[h] = tm.mask[row];
      }
    }
    for (int j = 0; j < n_tiles; ++j, ++step) {
      const unsigned char* wt = w_s + ring.wait(step) * 2 * Tr::kPanel;
      const uint64_t b_lo = smem_desc<128>(wt), b_hi = smem_desc<128>(wt + Tr::kPanel);
      float acc[32];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
        wgmma_64x64_ss<T>(acc, desc_add(ks < 4 ? a_lo : a_hi, 32 * (ks % 4)),
                          desc_add(ks < 4 ? b_lo : b_hi, 32 * (ks % 4)), ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc);
      // The previous tiles' stores have read the staging tiles (they had this tile's products to
      // do it in): waited for before the release's barrier, which then frees the staging tile too.
      if (leader) tma_store_wait_read<0>();
      // The last warpgroup done with the slot refills it for the step kStages ahead.
      if (ring.release(step % kStages, wg) && step + kStages < steps) load_w(step + kStages);

      const int64_t n0 = static_cast<int64_t>(tile(j)) * Tr::kTileN;
      float2 bias[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int64_t col = n0 + 8 * c + 2 * t;  // N % 8 == 0: col < N covers col + 1
        bias[c] = p.bias != nullptr && col < p.N ? *reinterpret_cast<const float2*>(p.bias + col)
                                                 : make_float2(0.f, 0.f);
      }
      uint32_t y_pairs[8][2];
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * warp + g + 8 * h;
          y_pairs[c][h] = pack2<T>(acc[4 * c + 2 * h] + bias[c].x, acc[4 * c + 2 * h + 1] + bias[c].y);
          if constexpr (!kTrimul) *reinterpret_cast<uint32_t*>(staging + swizzled_pair(r, c, t)) = y_pairs[c][h];
        }
      if constexpr (kTrimul) {
        if (j < pair_tiles && j % 2 == 0) {
#pragma unroll
          for (int c = 0; c < 8; ++c) kept[c][0] = y_pairs[c][0], kept[c][1] = y_pairs[c][1];
        } else if (j < pair_tiles) {
          // a (or b) = p * sigmoid(g) * mask, channel-major: row r of channel ch at
          // ch * 128 + the 16-byte chunk r / 8 (swizzled by ch % 8) + 2 (r % 8).
#pragma unroll
          for (int c = 0; c < 8; ++c)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = 16 * warp + g + 8 * h;
              const float2 pv = mma::unpack2<T>(kept[c][h]), gv = mma::unpack2<T>(y_pairs[c][h]);
              const float v[2] = {pv.x * (1.f / (1.f + __expf(-gv.x))) * mask[h],
                                  pv.y * (1.f / (1.f + __expf(-gv.y))) * mask[h]};
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int ch = 8 * c + 2 * t + e;
                *reinterpret_cast<T*>(staging + ch * 128 + (((r / 8) ^ (ch % 8)) * 16) + (r % 8) * 2) =
                    mma::from_float<T>(v[e]);
              }
            }
        } else {
          // The output gate, sigmoid of the rounded logits, as rows.
#pragma unroll
          for (int c = 0; c < 8; ++c)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = 16 * warp + g + 8 * h;
              const float2 gv = mma::unpack2<T>(y_pairs[c][h]);
              *reinterpret_cast<uint32_t*>(staging + swizzled_pair(r, c, t)) =
                  pack2<T>(1.f / (1.f + __expf(-gv.x)), 1.f / (1.f + __expf(-gv.y)));
            }
        }
      }
      fence_async_shared();
      named_barrier(1 + wg, 128);
      if (leader) {
        if constexpr (!kTrimul) {
          tma_store_2d(&y_map, staging, static_cast<int>(n0), static_cast<int>(row0));
        } else if (j < pair_tiles && j % 2 == 1) {
          const int q = j / 2;  // operand tile: a's channel tiles, then b's
          const int64_t b = row0 / tm.plane;
          tma_store_3d(q < tm.c_tiles ? &tm.a : &tm.b, staging, static_cast<int>(row0 - b * tm.plane),
                       64 * (q % tm.c_tiles), static_cast<int>(b));
        } else if (j >= pair_tiles) {
          tma_store_2d(&tm.gate, staging, 64 * (j - pair_tiles), static_cast<int>(row0));
        }
        tma_store_commit();
      }
    }
  }
  if (leader) tma_store_wait_read<0>();  // the staging tiles stay until the copies have read them
#endif
}

template <typename Tin, typename T>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kBlocksPerSm)
    tma_wgmma_dx_kernel(const __grid_constant__ Maps maps, const LayerNormLinearParams p) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  extern __shared__ unsigned char raw[];
  __shared__ SelfFilledRing<Tr::kStages, Tr::kWarpgroups> ring;
  unsigned char* slots = aligned_1024(raw);  // [slot][dy of warpgroup 0, 1; weight columns 0..63, 64..127]
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int64_t block_row = static_cast<int64_t>(blockIdx.x) * Tr::kBlockRows;
  const int k_tiles = static_cast<int>((p.N + Tr::kTileN - 1) / Tr::kTileN);
  // Steps 0 .. k_tiles - 1 bring dy and the weight; steps k_tiles + w bring warpgroup w's rows
  // of x for the LayerNorm backward, into slots the last products have freed.
  const int steps = k_tiles + Tr::kWarpgroups;
  init_ring(ring);
  auto load = [&](int j) {
    if (j >= k_tiles) {
      const int w = j - k_tiles, s = ring.arm(j, Tr::gx_bytes(sizeof(Tin)));
      load_x_rows<Tin>(slots + s * Tr::kDxSlot, &maps.x, ring.filled(s), block_row + 64 * w);
      return;
    }
    const int s = ring.arm(j, Tr::kDxSlot);
    unsigned char* slot = slots + s * Tr::kDxSlot;
    for (int w = 0; w < Tr::kWarpgroups; ++w)
      tma_load_2d(slot + w * Tr::kPanel, &maps.dy, ring.filled(s), j * Tr::kTileN, static_cast<int>(block_row + 64 * w));
    tma_load_2d(slot + Tr::kWarpgroups * Tr::kPanel, &maps.w, ring.filled(s), 0, j * Tr::kTileN);
    tma_load_2d(slot + (Tr::kWarpgroups + 1) * Tr::kPanel, &maps.w, ring.filled(s), 64, j * Tr::kTileN);
  };
  if (threadIdx.x == 0)
    for (int j = 0; j < Tr::kStages && j < steps; ++j) load(j);

  // The statistics of this thread's rows 16 warp + g + 8 h, loaded now so that their DRAM
  // latency passes under the products.
  const int64_t warp_row0 = block_row + wg * 64 + 16 * warp;
  float mean[2], rstd[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = warp_row0 + g + 8 * h;
    mean[h] = row < p.M ? p.mean[row] : 0.f;
    rstd[h] = row < p.M ? p.rstd[row] : 0.f;
  }
  // acc[half] = dxhat' columns 64 half .. +63: dy (64 rows x 64 features, K-major) times the
  // weight tile (64 features x 64 columns, read MN-major: its rows run along the reduction).
  float acc[2][32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[0][i] = acc[1][i] = 0.f;
  for (int j = 0; j < k_tiles; ++j) {
    const int s = ring.wait(j);
    const unsigned char* slot = slots + s * Tr::kDxSlot;
    const uint64_t a = smem_desc<128>(slot + wg * Tr::kPanel);
    const uint64_t b_lo = smem_desc<128>(slot + Tr::kWarpgroups * Tr::kPanel);
    const uint64_t b_hi = smem_desc<128>(slot + (Tr::kWarpgroups + 1) * Tr::kPanel);
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      wgmma_64x64_ss<T, 0, 1>(acc[0], desc_add(a, 32 * ks), desc_add(b_lo, 2048 * ks), true);
      wgmma_64x64_ss<T, 0, 1>(acc[1], desc_add(a, 32 * ks), desc_add(b_hi, 2048 * ks), true);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    // The last warp done with the slot refills it: no warp waits for another (thread 0 waiting
    // for the slot to empty held its warpgroup back whenever the other ran behind).
    if (ring.release_warp(s) && j + Tr::kStages < steps) load(j + Tr::kStages);
  }

  // The LayerNorm backward by rows, through 4 KB of the last dy step's slot per warp (32 KB: the
  // whole slot, free once all 8 warps have released it; no refill follows its last use), x
  // from the warpgroup's x tile.
  const int last = ring.wait_released(k_tiles - 1);  // k_tiles >= 1: the host returns early for N = 0
  float* rows_s = reinterpret_cast<float*>(slots + last * Tr::kDxSlot) + (threadIdx.x / 32) * 1024;
  const unsigned char* x_tile = slots + ring.wait(k_tiles + wg) * Tr::kDxSlot;
  auto x4 = [&](int r, int col) { return x_quad<Tin>(x_tile, 16 * warp + r, col); };
  layernorm_backward_by_rows<Tin, false>(acc, rows_s, rows_s + 512, warp_row0, p.M, mean, rstd, p.ln_w, x4,
                                         static_cast<Tin*>(p.dx), static_cast<const Tin*>(nullptr));
#endif
}

template <typename Tin, typename T>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kBlocksPerSm)
    tma_wgmma_g_kernel(const __grid_constant__ Maps maps, const LayerNormLinearParams p, int64_t rows_per_chunk) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  constexpr int kXBytes = sizeof(Tin), kStages = Tr::g_stages(kXBytes), kSlot = Tr::g_slot(kXBytes);
  constexpr int kX = Tr::kWarpgroups * Tr::kPanel, kStats = kX + Tr::gx_bytes(kXBytes);  // offsets in a slot
  extern __shared__ unsigned char raw[];
  __shared__ Ring<kStages> ring;
  unsigned char* slots = aligned_1024(raw);     // [slot][dy features 0..63, 64..127; x; mean; rstd]
  unsigned char* ones = slots + kStages * kSlot;  // 1 KB of ones
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * Tr::kBlockRows;
  const int64_t chunk = blockIdx.y;
  const int64_t m_begin = chunk * rows_per_chunk;
  const int64_t m_end = m_begin + rows_per_chunk < p.M ? m_begin + rows_per_chunk : p.M;
  const int steps = static_cast<int>((m_end - m_begin + Tr::kStepM - 1) / Tr::kStepM);
  init_ring(ring);
  constexpr uint32_t kBytes = kStats + 2 * 64 * 4;  // what the copies bring (the slot is padded)
  auto load = [&](int i) {
    const int s = ring.acquire(i, kBytes);
    unsigned char* slot = slots + s * kSlot;
    const int64_t m = m_begin + static_cast<int64_t>(i) * Tr::kStepM;
    for (int w = 0; w < Tr::kWarpgroups; ++w)
      tma_load_2d(slot + w * Tr::kPanel, &maps.dy, ring.filled(s), static_cast<int>(n0 + 64 * w), static_cast<int>(m));
    load_x_rows<Tin>(slot + kX, &maps.x, ring.filled(s), m);
    tma_load_1d(slot + kStats, &maps.mean, ring.filled(s), static_cast<int>(m));
    tma_load_1d(slot + kStats + 256, &maps.rstd, ring.filled(s), static_cast<int>(m));
  };
  if (threadIdx.x == 0)
    for (int i = 0; i < kStages && i < steps; ++i) load(i);
  for (int i = threadIdx.x; i < 1024 / 4; i += Tr::kThreads)
    reinterpret_cast<uint32_t*>(ones)[i] = pack2<T>(1.f, 1.f);

  // xhat of step i, in place over its x: warp w8 (0..7) rows 8 w8 .. +7, lane columns
  // 4 lane .. +3; every x value is read (and the barrier passed) before any xhat is written.
  // Rows past M arrive as zeros with zero statistics, so their xhat is 0.
  const int w8 = threadIdx.x / 32;
  auto build_xhat = [&](int i) {
    unsigned char* slot = slots + ring.wait(i) * kSlot;
    const float* stats = reinterpret_cast<const float*>(slot + kStats);
    float4 v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int r = 8 * w8 + k;
      const float4 xv = x_quad<Tin>(slot + kX, r, 4 * lane);
      const float mean = stats[r], rstd = stats[64 + r];
      v[k] = make_float4((xv.x - mean) * rstd, (xv.y - mean) * rstd, (xv.z - mean) * rstd, (xv.w - mean) * rstd);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 8; ++k) store_piece<T>(slot + kX, 8 * w8 + k, lane, v[k].x, v[k].y, v[k].z, v[k].w);
  };
  if (steps > 0) build_xhat(0);
  fence_async_shared();
  __syncthreads();

  // acc[half] = G rows (features) 64 wg + .., columns 64 half .. +63; acc_db: colsum(dy).
  float acc[2][32], acc_db[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[0][i] = acc[1][i] = 0.f;
  const uint64_t ones_desc = smem_desc<128>(ones);
  for (int i = 0; i < steps; ++i) {
    const int s = i % kStages;  // full: waited for by build_xhat
    unsigned char* slot = slots + s * kSlot;
    const uint64_t a = smem_desc<128>(slot + wg * Tr::kPanel);  // dy^T: MN-major
    const uint64_t b_lo = smem_desc<128>(slot + kX), b_hi = smem_desc<128>(slot + kX + Tr::kPanel);
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    fence_registers(acc_db);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint64_t ak = desc_add(a, 2048 * ks);
      wgmma_64x64_ss<T, 1, 1>(acc[0], ak, desc_add(b_lo, 2048 * ks), true);
      wgmma_64x64_ss<T, 1, 1>(acc[1], ak, desc_add(b_hi, 2048 * ks), true);
      wgmma_64x8_ss<T, 1, 0>(acc_db, ak, ones_desc, true);
    }
    wgmma_commit();
    if (i + 1 < steps) build_xhat(i + 1);  // another slot, while this step's products run
    wgmma_wait<0>();
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    fence_registers(acc_db);
    ring.release(s);
    if (threadIdx.x == 0 && i + kStages < steps) load(i + kStages);
    fence_async_shared();
    __syncthreads();
  }

  float* gp = p.g_partial + chunk * p.N * Tr::kK;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t n = n0 + wg * 64 + 16 * warp + g + 8 * h;
    if (n >= p.N) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int c = 0; c < 8; ++c)
        *reinterpret_cast<float2*>(gp + n * Tr::kK + 64 * half + 8 * c + 2 * t) =
            make_float2(acc[half][4 * c + 2 * h], acc[half][4 * c + 2 * h + 1]);
    if (t == 0) p.db_partial[chunk * p.N + n] = acc_db[2 * h];
  }
#endif
}

// ---- host side ----

// x [M, 128] in boxes of 64 rows x 128 bytes (kXPanelCols columns).
CUtensorMap x_map(const LayerNormLinearParams& p) {
  const uint64_t bytes = p.x_dtype == DType::kFloat32 ? 4 : 2;
  const uint64_t dims[2] = {static_cast<uint64_t>(Tr::kK), static_cast<uint64_t>(p.M)};
  const uint64_t strides[1] = {Tr::kK * bytes};
  const uint32_t box[2] = {static_cast<uint32_t>(128 / bytes), 64};
  return sm90::tensor_map(sm90::map_type(p.x_dtype), 2, p.x, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                          "layernorm_linear's input");
}

// x and its row statistics, for the backward kernels.
void add_x_maps(Maps& maps, const LayerNormLinearParams& p) {
  maps.x = x_map(p);
  const uint64_t rows[1] = {static_cast<uint64_t>(p.M)};
  const uint32_t stat_box[1] = {64};
  maps.mean = sm90::tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, p.mean, rows, nullptr, stat_box,
                               CU_TENSOR_MAP_SWIZZLE_NONE, "layernorm_linear's row means");
  maps.rstd = sm90::tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, p.rstd, rows, nullptr, stat_box,
                               CU_TENSOR_MAP_SWIZZLE_NONE, "layernorm_linear's row scales");
}

template <typename Kernel, typename... Args>
void launch(const char* name, Kernel kernel, dim3 grid, int smem, cudaStream_t stream, Args... args) {
  launch_kernel(kernel, grid, Tr::kThreads, smem, stream, args...);  // sets the shared-memory limit
  sm90::check_blocks_per_sm("layernorm_linear", name, reinterpret_cast<const void*>(kernel), Tr::kThreads, smem,
                            Tr::kBlocksPerSm);
}

unsigned grid_rows(int64_t M) {
  const int64_t blocks = (M + Tr::kBlockRows - 1) / Tr::kBlockRows;
  MF_CHECK(M < (int64_t{1} << 31), "layernorm_linear sm_90a kernels: ", M, " rows exceed TMA's 32-bit coordinates");
  return static_cast<unsigned>(blocks);
}

}  // namespace

bool layernorm_linear_use_sm90(int64_t N, int major, int minor) { return sm90::runs_on(major, minor) && N % 8 == 0; }

void layernorm_linear_forward_wgmma(const LayerNormLinearParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  Maps maps{};
  maps.w = sm90::rows_map(p.dtype, p.w, p.N, Tr::kK, "layernorm_linear's weight");
  if (p.x_dtype != DType::kFloat32) maps.x = x_map(p);  // the kernel's 16-bit x arrives by TMA
  const CUtensorMap y_map = sm90::rows_map(p.dtype, p.y, p.M, p.N, "layernorm_linear's output");
  // One row tile per block: persistent blocks measured slower here (0.39 -> 0.43 ms at N = 768,
  // c_out 640 on an H100), where the triangle-multiplication epilogue gains from them.
  const dim3 grid(grid_rows(p.M));
  const TrimulMaps none{};
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    launch("sm_90a forward kernel", tma_wgmma_forward_kernel<decltype(tin), decltype(t), false>, grid,
           Tr::kForwardSmem, s, maps, y_map, none, p);
  });
}

bool layernorm_linear_trimul_epilogue_fits(const LayerNormLinearParams& p, const TrimulEpilogue& e, int major,
                                           int minor) {
  return layernorm_linear_use_sm90(p.N, major, minor) && e.c > 0 && e.c % 64 == 0 && e.c_gate >= 0 &&
         e.c_gate % 64 == 0 && p.N == 4 * e.c + e.c_gate && p.bias == nullptr && e.plane % 8 == 0 &&
         (e.batch == 1 || e.plane % 64 == 0) && p.M == e.batch * e.plane;
}

void layernorm_linear_forward_trimul(const LayerNormLinearParams& p, const TrimulEpilogue& e, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  Maps maps{};
  maps.w = sm90::rows_map(p.dtype, p.w, p.N, Tr::kK, "layernorm_linear's weight");
  const CUtensorMap no_y{};
  TrimulMaps tm{};
  // a and b: [B, c, plane], boxes of 64 rows (innermost) x 64 channels of one batch element.
  const uint64_t dims[3] = {static_cast<uint64_t>(e.plane), static_cast<uint64_t>(e.c), static_cast<uint64_t>(e.batch)};
  const uint64_t strides[2] = {static_cast<uint64_t>(e.plane) * 2, static_cast<uint64_t>(e.c * e.plane) * 2};
  const uint32_t box[3] = {64, 64, 1};
  tm.a = sm90::tensor_map(sm90::map_type(p.dtype), 3, e.a, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                          "triangle_multiplication's operand a");
  tm.b = sm90::tensor_map(sm90::map_type(p.dtype), 3, e.b, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                          "triangle_multiplication's operand b");
  if (e.c_gate > 0) tm.gate = sm90::rows_map(p.dtype, e.gate, p.M, e.c_gate, "triangle_multiplication's output gate");
  tm.mask = e.mask;
  tm.c_tiles = static_cast<int>(e.c / 64);
  tm.plane = e.plane;
  const dim3 grid(sm90::persistent_blocks(grid_rows(p.M), Tr::kBlocksPerSm));
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    launch("sm_90a forward kernel with the triangle-multiplication epilogue",
           tma_wgmma_forward_kernel<decltype(tin), decltype(t), true>, grid, Tr::kForwardSmem, s, maps, no_y, tm, p);
  });
}

void layernorm_linear_backward_wgmma(const LayerNormLinearParams& p, int64_t rows_per_chunk, int64_t chunks,
                                     void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MF_CHECK(rows_per_chunk % Tr::kStepM == 0, "layernorm_linear: weight-gradient chunks must be whole 64-row steps");
  Maps maps{};
  maps.w = sm90::rows_map(p.dtype, p.w, p.N, Tr::kK, "layernorm_linear's weight");
  maps.dy = sm90::rows_map(p.dtype, p.dy, p.M, p.N, "layernorm_linear's output gradient");
  add_x_maps(maps, p);
  const dim3 dx_grid(grid_rows(p.M));
  const dim3 g_grid(static_cast<unsigned>((p.N + Tr::kBlockRows - 1) / Tr::kBlockRows), static_cast<unsigned>(chunks));
  MF_CHECK(chunks <= 65535, "layernorm_linear: ", chunks, " weight-gradient chunks exceed the grid");
  sm90::check_rows_aligned("layernorm_linear", "dx", p.dx);  // its rows leave in 16-byte pieces
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    using Tin = decltype(tin);
    using T = decltype(t);
    if (p.dx != nullptr) launch("sm_90a dx kernel", tma_wgmma_dx_kernel<Tin, T>, dx_grid, Tr::kDxSmem, s, maps, p);
    launch("sm_90a weight-gradient kernel", tma_wgmma_g_kernel<Tin, T>, g_grid, Tr::g_smem(sizeof(Tin)), s, maps, p,
           rows_per_chunk);
  });
}

}  // namespace megafold::ops::cuda
