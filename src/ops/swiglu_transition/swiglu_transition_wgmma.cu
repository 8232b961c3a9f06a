// SwiGLU transition for Hopper (sm_90a), c = 128: the fused forward and the fused backward on
// wgmma over weight tiles that TMA brings from L2 (see swiglu_transition_cuda.h for the maths,
// swiglu_transition_mma.cu for the sm_80 kernel).
//
// Both kernels: tiles of 128 rows, two warpgroups of 64 rows each and no producer warp; a
// ring of weight slots, each holding one chunk of 64 hidden features: w_in's a rows and b rows
// (64 x 128 each) and w_out's columns (128 x 64), six 8 KB panels.
//   forward   persistent (a block per SM loops over row tiles; the last warpgroup done with a
//             slot refills it, so the warpgroups drift apart instead of waiting for each
//             other, and the next tile's weights arrive during this one); LayerNorm in
//             registers, the rows in shared memory as the A operand; per chunk
//             a, b = A w_in[chunk]^T (m64n64k16 x 16), h = silu(a) * b packed to 16-bit A
//             fragments in registers, y += h w_out[:, chunk]^T (m64n64k16 from registers x 8).
//             The next chunk's a, b are issued together with this chunk's y product, so the
//             tensor cores hold work while the warpgroup computes its next gate (and the other
//             warpgroup covers the rest). y leaves through the A tile and TMA stores.
//   backward  persistent as well (the ring and each warpgroup's dy run on into the next tile
//             during this one's last chunk and epilogue); the same rows, and dy by TMA; per
//             chunk a, b and dh = dy w_out[:, chunk] (w_out's panels read MN-major), then h,
//             da and db in registers: they leave through staging tiles and TMA stores for the
//             weight gradients, while
//             dxhat' += [da | db] w_in[chunk] accumulates on chip (A from registers, w_in's
//             panels read MN-major) and ends in the LayerNorm backward: dx.
// Why: the mma.sync kernel ran at ~165 TFLOP/s, and the backward it left to the unfused ops
// wrote and re-read the 2h-wide projection, dh and d ab once more each. Notes:
// bench/notes/fused_ops.md.
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
#include "ops/launch.cuh"
#include "ops/swiglu_transition/swiglu_transition_cuda.h"

namespace megafold::ops::cuda {
namespace {

// Tile choices (c = 128, 16-bit products).
struct Traits {
  static constexpr int kC = 128;
  static constexpr int kChunk = 64;  // hidden features per step
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockRows = 64 * kWarpgroups;
  // A panel: 64 rows of 128 bytes (64 16-bit values) in the 128-byte swizzle, 8 KB.
  static constexpr int kPanel = 64 * 128;
  // Slot panels: w_in a rows (columns 0..63, 64..127), b rows (likewise), w_out rows 0..63,
  // 64..127 (the chunk's 64 columns).
  static constexpr int kSlotPanels = 6;
  static constexpr int kSlot = kSlotPanels * kPanel;
  // Forward: the LayerNorm'd rows (two panels per warpgroup, later the output staging) and
  // three slots (176 KB): one block per SM, its two warpgroups overlapping each other.
  static constexpr int kForwardStages = 3;
  static constexpr int kForwardSmem = kWarpgroups * 2 * kPanel + kForwardStages * kSlot + 1024;
  // Backward: the rows, dy (two panels each per warpgroup), staging for h, da, db (three
  // panels per warpgroup) and two slots: 208 KB.
  static constexpr int kBackwardStages = 2;
  static constexpr int kBackwardSmem = kWarpgroups * 7 * kPanel + kBackwardStages * kSlot + 1024;
  static_assert(kForwardSmem <= 227 * 1024 && kBackwardSmem <= 227 * 1024, "shared memory per block");
};
using Tr = Traits;

struct Maps {
  CUtensorMap w_in;   // [2h, 128], boxes 64 rows x 64 columns
  CUtensorMap w_out;  // [128, h], boxes 64 rows x 64 columns
  CUtensorMap y;      // forward: [M, 128] output; backward: dy. Boxes 64 x 64
  CUtensorMap h;      // backward: [M, h] 16-bit hidden layer
  CUtensorMap dab;    // backward: [M, 2h] 16-bit d ab
};

#if defined(MEGAFOLD_SM90A_DEVICE)
using namespace megafold::hopper;
using mma::pack2;

__device__ __forceinline__ float sigmoid(float a) { return 1.f / (1.f + __expf(-a)); }

// Issues the copies of hidden chunk j's weights into `slot` (completing on `bar`).
__device__ __forceinline__ void load_weights(unsigned char* slot, const Maps& maps, uint64_t* bar, int64_t h, int j) {
  const int a_row = j * Tr::kChunk, b_row = static_cast<int>(h) + j * Tr::kChunk;
  tma_load_2d(slot + 0 * Tr::kPanel, &maps.w_in, bar, 0, a_row);
  tma_load_2d(slot + 1 * Tr::kPanel, &maps.w_in, bar, 64, a_row);
  tma_load_2d(slot + 2 * Tr::kPanel, &maps.w_in, bar, 0, b_row);
  tma_load_2d(slot + 3 * Tr::kPanel, &maps.w_in, bar, 64, b_row);
  tma_load_2d(slot + 4 * Tr::kPanel, &maps.w_out, bar, j * Tr::kChunk, 0);
  tma_load_2d(slot + 5 * Tr::kPanel, &maps.w_out, bar, j * Tr::kChunk, 64);
}

#endif

template <typename Tin, typename T>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    tma_wgmma_forward_kernel(const __grid_constant__ Maps maps, const SwigluTransitionParams p) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  extern __shared__ unsigned char raw[];
  __shared__ SelfFilledRing<Tr::kForwardStages, Tr::kWarpgroups> ring;
  unsigned char* a_s = aligned_1024(raw);                       // [warpgroup][2 panels]
  unsigned char* slots = a_s + Tr::kWarpgroups * 2 * Tr::kPanel;  // [slot][6 panels]
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  const int chunks = static_cast<int>(p.h / Tr::kChunk);
  // Persistent: this block takes row tiles blockIdx.x, + gridDim.x, ...; its ring steps run
  // through every chunk of every tile, so the next tile's first weights arrive during this
  // tile's last chunks.
  const int64_t tiles = (p.M + Tr::kBlockRows - 1) / Tr::kBlockRows;
  const int steps = block_tiles(tiles) * chunks;
  if (threadIdx.x == 0) {
    ring.init();
    barrier_init_fence();
  }
  __syncthreads();
  auto load = [&](int step) {
    const int s = ring.arm(step, Tr::kSlot);
    load_weights(slots + s * Tr::kSlot, maps, ring.filled(s), p.h, step % chunks);
  };
  if (threadIdx.x == 0)
    for (int step = 0; step < Tr::kForwardStages && step < steps; ++step) load(step);

  unsigned char* a_tile = a_s + wg * 2 * Tr::kPanel;
  const uint64_t a_lo = smem_desc<128>(a_tile), a_hi = smem_desc<128>(a_tile + Tr::kPanel);
  float acc_a[32], acc_b[32], y[2][32];
  // acc_a, acc_b (+)= A w_in[chunk]^T: the slot's a rows (panels 0, 1) and b rows (2, 3).
  // Issued after a wgmma_fence, not committed.
  auto issue_projection = [&](const unsigned char* slot) {
    issue_row_projections<T>(acc_a, acc_b, a_lo, a_hi, slot, slot + 2 * Tr::kPanel);
  };
  uint32_t hf[4][4];
  // h = silu(a) * b of the chunk in acc_a, acc_b, as A fragments.
  auto gate = [&] {
#pragma unroll
    for (int i = 0; i < 32; i += 2)
      to_fragment<T>(hf, i, acc_a[i] * sigmoid(acc_a[i]) * acc_b[i], acc_a[i + 1] * sigmoid(acc_a[i + 1]) * acc_b[i + 1]);
    fence_registers(acc_a);
    fence_registers(acc_b);
    fence_registers(y[0]);
    fence_registers(y[1]);
  };
  // y += h w_out[:, chunk]^T with the chunk's w_out panels (rows 64 nh .., K-major).
  auto issue_down = [&](const unsigned char* slot) {
#pragma unroll
    for (int nh = 0; nh < 2; ++nh) {
      const uint64_t b = smem_desc<128>(slot + (4 + nh) * Tr::kPanel);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) wgmma_64x64_rs<T>(y[nh], hf[ks], desc_add(b, 32 * ks), true);
    }
  };
  // Waits for the step's products; the last warpgroup done with its slot refills it for the
  // step kForwardStages ahead, so neither warpgroup waits for the other.
  auto finish = [&](int step) {
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(hf);
    fence_registers(acc_a);
    fence_registers(acc_b);
    fence_registers(y[0]);
    fence_registers(y[1]);
    if (ring.release(step % Tr::kForwardStages, wg) && step + Tr::kForwardStages < steps)
      load(step + Tr::kForwardStages);
  };

  int step = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row0 = tile * Tr::kBlockRows + wg * 64;
    // The A tile carried the previous tile's y: its store must have read it.
    if (leader) tma_store_wait_read<0>();
    named_barrier(1 + wg, 128);
    layer_norm_rows<Tin, T, RowStats::kNone>(a_tile, static_cast<const Tin*>(p.x), p.M, row0, p.ln_w, p.ln_b,
                                             p.eps, nullptr, nullptr);
    fence_async_shared();  // wgmma reads the tile through the async proxy
    named_barrier(1 + wg, 128);
    // (acc_a, acc_b zeroed too: ptxas fences registers it sees defined nowhere, C7519.)
#pragma unroll
    for (int i = 0; i < 32; ++i) y[0][i] = y[1][i] = acc_a[i] = acc_b[i] = 0.f;
    wgmma_fence();
    issue_projection(slots + ring.wait(step) * Tr::kSlot);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(acc_a);
    fence_registers(acc_b);
    // Chunk j's y product goes out together with chunk j + 1's projections; the last chunk's
    // alone (no wgmma under a branch: ptxas would serialise them all, C7520).
    for (int j = 0; j + 1 < chunks; ++j, ++step) {
      gate();
      const unsigned char* next = slots + ring.wait(step + 1) * Tr::kSlot;
      wgmma_fence();
      issue_down(slots + (step % Tr::kForwardStages) * Tr::kSlot);
      issue_projection(next);
      finish(step);
    }
    gate();
    wgmma_fence();
    issue_down(slots + (step % Tr::kForwardStages) * Tr::kSlot);
    finish(step);
    ++step;

    // y through the A tile (its last reader has completed) and two TMA stores of 64 x 64,
    // left in flight under the next tile's LayerNorm loads.
#pragma unroll
    for (int nh = 0; nh < 2; ++nh)
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          *reinterpret_cast<uint32_t*>(a_tile + nh * Tr::kPanel + swizzled_pair(16 * warp + g + 8 * hh, c, t)) =
              pack2<T>(y[nh][4 * c + 2 * hh], y[nh][4 * c + 2 * hh + 1]);
    fence_async_shared();
    named_barrier(1 + wg, 128);
    if (leader) {
      tma_store_2d(&maps.y, a_tile, 0, static_cast<int>(row0));
      tma_store_2d(&maps.y, a_tile + Tr::kPanel, 64, static_cast<int>(row0));
      tma_store_commit();
    }
  }
  if (leader) tma_store_wait_read<0>();  // the staging tiles stay until the copies have read them
#endif
}

template <typename Tin, typename T>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    tma_wgmma_backward_kernel(const __grid_constant__ Maps maps, const SwigluTransitionBackwardParams bp) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  const SwigluTransitionParams& p = bp.f;
  extern __shared__ unsigned char raw[];
  __shared__ SelfFilledRing<Tr::kBackwardStages, Tr::kWarpgroups> ring;
  __shared__ uint64_t dy_full[Tr::kWarpgroups];  // per warpgroup: its rows of dy, once per tile
  __shared__ float stats[Tr::kWarpgroups][128];  // per warpgroup: mean of rows 0..63, then rstd
  unsigned char* a_s = aligned_1024(raw);                            // [warpgroup][2 panels]
  unsigned char* dy_s = a_s + Tr::kWarpgroups * 2 * Tr::kPanel;      // [warpgroup][2 panels]
  unsigned char* st_s = dy_s + Tr::kWarpgroups * 2 * Tr::kPanel;     // [warpgroup][h, da, db]
  unsigned char* slots = st_s + Tr::kWarpgroups * 3 * Tr::kPanel;    // [slot][6 panels]
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  const int chunks = static_cast<int>(p.h / Tr::kChunk);
  // This block's row tiles: blockIdx.x, + gridDim.x, ...; the ring's steps run through every
  // chunk of every one of them.
  const int64_t tiles = (p.M + Tr::kBlockRows - 1) / Tr::kBlockRows;
  const int steps = block_tiles(tiles) * chunks;
  if (threadIdx.x == 0) {
    ring.init();
    for (int w = 0; w < Tr::kWarpgroups; ++w) barrier_init(&dy_full[w], 1);
    barrier_init_fence();
  }
  __syncthreads();
  auto load = [&](int step) {
    const int s = ring.arm(step, Tr::kSlot);
    load_weights(slots + s * Tr::kSlot, maps, ring.filled(s), p.h, step % chunks);
  };
  unsigned char* dy_tile = dy_s + wg * 2 * Tr::kPanel;
  // The warpgroup's 64 rows of dy in the tile starting at block_row (its leader issues them).
  auto load_dy = [&](int64_t block_row) {
    barrier_expect_bytes(&dy_full[wg], 2 * Tr::kPanel);
    for (int half = 0; half < 2; ++half)
      tma_load_2d(dy_tile + half * Tr::kPanel, &maps.y, &dy_full[wg], 64 * half, static_cast<int>(block_row + 64 * wg));
  };
  if (threadIdx.x == 0)
    for (int step = 0; step < Tr::kBackwardStages && step < steps; ++step) load(step);
  if (leader) load_dy(static_cast<int64_t>(blockIdx.x) * Tr::kBlockRows);

  unsigned char* a_tile = a_s + wg * 2 * Tr::kPanel;
  float* st = stats[wg];
  const Tin* x = static_cast<const Tin*>(p.x);
  const uint64_t a_lo = smem_desc<128>(a_tile), a_hi = smem_desc<128>(a_tile + Tr::kPanel);
  const uint64_t dy_lo = smem_desc<128>(dy_tile), dy_hi = smem_desc<128>(dy_tile + Tr::kPanel);
  unsigned char* staging = st_s + wg * 3 * Tr::kPanel;  // h, da, db of the chunk
  // dx_acc[nh] = dxhat' columns 64 nh .. +63.
  float acc_a[32], acc_b[32], acc_dh[32], dx_acc[2][32];
  // acc_a, acc_b (+)= A w_in[chunk]^T: the slot's a rows (panels 0, 1) and b rows (2, 3).
  // Issued after a wgmma_fence, not committed.
  auto issue_projection = [&](const unsigned char* slot) {
    issue_row_projections<T>(acc_a, acc_b, a_lo, a_hi, slot, slot + 2 * Tr::kPanel);
  };
  uint32_t da_f[4][4], db_f[4][4];

  int step = 0, round = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++round) {
    const int64_t block_row = tile * Tr::kBlockRows, row0 = block_row + wg * 64;
    const int64_t next_row = block_row + static_cast<int64_t>(gridDim.x) * Tr::kBlockRows;
    prefetch_rows_l2(x, next_row + 64 * wg, p.M, leader);  // the next tile's LayerNorm reads them
    // The previous tile's epilogue has read the statistics this LayerNorm overwrites.
    named_barrier(1 + wg, 128);
    layer_norm_rows<Tin, T, RowStats::kWrite>(a_tile, x, p.M, row0, p.ln_w, p.ln_b, p.eps, bp.mean, bp.rstd, st);
    fence_async_shared();
    named_barrier(1 + wg, 128);
    barrier_wait(&dy_full[wg], round & 1);
#pragma unroll
    for (int i = 0; i < 32; ++i) dx_acc[0][i] = dx_acc[1][i] = acc_a[i] = acc_b[i] = acc_dh[i] = 0.f;
    for (int j = 0; j < chunks; ++j, ++step) {
      const int s = ring.wait(step);
      const unsigned char* slot = slots + s * Tr::kSlot;
      wgmma_fence();
      issue_projection(slot);
      // dh = dy w_out[:, chunk]: w_out's two panels are one 128-row tile read MN-major (rows
      // along the reduction over c).
      const uint64_t wo = smem_desc<128>(slot + 4 * Tr::kPanel);
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
        wgmma_64x64_ss<T, 0, 1>(acc_dh, desc_add(ks < 4 ? dy_lo : dy_hi, 32 * (ks % 4)), desc_add(wo, 2048 * ks), ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc_a);
      fence_registers(acc_b);
      fence_registers(acc_dh);

      // The previous chunk's stores have read the staging tiles.
      if (leader) tma_store_wait_read<0>();
      named_barrier(1 + wg, 128);
      // After the last chunk's dh the warpgroup is done with this tile's dy: the next one's
      // comes in under the rest of this tile.
      if (leader && j == chunks - 1 && next_row < p.M) load_dy(next_row);
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        float hv[2], da[2], db[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float a = acc_a[i + e], b = acc_b[i + e], dh = acc_dh[i + e];
          const float sg = sigmoid(a), silu = a * sg;
          hv[e] = silu * b;
          da[e] = dh * b * sg * (1.f + a * (1.f - sg));
          db[e] = dh * silu;
        }
        to_fragment<T>(da_f, i, da[0], da[1]);
        to_fragment<T>(db_f, i, db[0], db[1]);
        const int r = 16 * warp + g + 8 * ((i / 2) % 2), c = i / 4;
        *reinterpret_cast<uint32_t*>(staging + swizzled_pair(r, c, t)) = pack2<T>(hv[0], hv[1]);
        *reinterpret_cast<uint32_t*>(staging + Tr::kPanel + swizzled_pair(r, c, t)) = da_f[i / 8][((i / 4) % 2) * 2 + (i / 2) % 2];
        *reinterpret_cast<uint32_t*>(staging + 2 * Tr::kPanel + swizzled_pair(r, c, t)) = db_f[i / 8][((i / 4) % 2) * 2 + (i / 2) % 2];
      }
      fence_async_shared();
      named_barrier(1 + wg, 128);
      if (leader) {
        const int hcol = j * Tr::kChunk, r = static_cast<int>(row0);
        tma_store_2d(&maps.h, staging, hcol, r);
        tma_store_2d(&maps.dab, staging + Tr::kPanel, hcol, r);
        tma_store_2d(&maps.dab, staging + 2 * Tr::kPanel, static_cast<int>(p.h) + hcol, r);
        tma_store_commit();
      }

      // dxhat' += da w_in[a rows] + db w_in[b rows]: each panel (64 hidden rows x 64 columns of
      // c) read MN-major, its rows along the reduction over the chunk.
      fence_registers(dx_acc[0]);  // their zeros are set before the products start
      fence_registers(dx_acc[1]);
      wgmma_fence();
      issue_dx_products<T>(dx_acc, da_f, db_f, slot, slot + 2 * Tr::kPanel);
      // Waited for here rather than under the next chunk's products: ptxas serialises every
      // wgmma of the kernel when these stay in flight across the staging code (C7515).
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(da_f);
      fence_registers(db_f);
      fence_registers(dx_acc[0]);
      fence_registers(dx_acc[1]);
      // The last warpgroup done with the slot refills it for the step kBackwardStages ahead.
      if (ring.release(s, wg) && step + Tr::kBackwardStages < steps) load(step + Tr::kBackwardStages);
      // The residual gradient's rows, added in the epilogue.
      prefetch_addend_rows_l2(static_cast<const Tin*>(bp.dx_add), row0, p.M, j, chunks, leader);
    }

    // LayerNorm backward of the warp's rows by rows, x from L2 again, through its A-tile rows.
    float mean[2], rstd[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = 16 * warp + g + 8 * hh;
      mean[hh] = st[r];
      rstd[hh] = st[64 + r];
    }
    layernorm_backward_through_a_tile<Tin>(dx_acc, a_tile, warp, row0, p.M, mean, rstd, p.ln_w, x,
                                           static_cast<Tin*>(bp.dx), static_cast<const Tin*>(bp.dx_add));
  }
  if (leader) tma_store_wait_read<0>();  // the staging tiles stay until the copies have read them
#endif
}

// ---- host side ----

Maps weight_maps(const SwigluTransitionParams& p) {
  Maps maps{};
  maps.w_in = sm90::rows_map(p.dtype, p.w_in, 2 * p.h, Tr::kC, "swiglu_transition's w_in");
  maps.w_out = sm90::rows_map(p.dtype, p.w_out, Tr::kC, p.h, "swiglu_transition's w_out");
  return maps;
}

dim3 grid_rows(int64_t M) {
  MF_CHECK(M < (int64_t{1} << 31), "swiglu_transition sm_90a kernels: ", M, " rows exceed TMA's 32-bit coordinates");
  return dim3(static_cast<unsigned>((M + Tr::kBlockRows - 1) / Tr::kBlockRows));
}

// One block per multiprocessor (the shared memory allows no second), each looping over row tiles.
dim3 persistent_grid(int64_t M) { return dim3(sm90::persistent_blocks(grid_rows(M).x)); }

template <typename Kernel, typename... Args>
void launch(const char* name, Kernel kernel, dim3 grid, int smem, cudaStream_t stream, Args... args) {
  launch_kernel(kernel, grid, Tr::kThreads, smem, stream, args...);  // sets the shared-memory limit
  sm90::check_blocks_per_sm("swiglu_transition", name, reinterpret_cast<const void*>(kernel), Tr::kThreads, smem, 1);
}

}  // namespace

bool swiglu_transition_use_sm90(int64_t c, int major, int minor) { return c == Tr::kC && sm90::runs_on(major, minor); }

void swiglu_transition_forward_wgmma(const SwigluTransitionParams& p, void* stream) {
  MF_CHECK(p.c == Tr::kC && p.h > 0 && p.h % Tr::kChunk == 0,
           "swiglu_transition sm_90a forward: c must be 128 and h a positive multiple of 64");
  if (p.M == 0) return;
  Maps maps = weight_maps(p);
  maps.y = sm90::rows_map(p.dtype, p.y, p.M, Tr::kC, "swiglu_transition's output");
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    launch("sm_90a forward kernel", tma_wgmma_forward_kernel<decltype(tin), decltype(t)>, persistent_grid(p.M),
           Tr::kForwardSmem, static_cast<cudaStream_t>(stream), maps, p);
  });
}

void swiglu_transition_backward_wgmma(const SwigluTransitionBackwardParams& bp, void* stream) {
  const SwigluTransitionParams& p = bp.f;
  MF_CHECK(p.c == Tr::kC && p.h > 0 && p.h % Tr::kChunk == 0,
           "swiglu_transition sm_90a backward: c must be 128 and h a positive multiple of 64");
  if (p.M == 0) return;
  Maps maps = weight_maps(p);
  maps.y = sm90::rows_map(p.dtype, bp.dy, p.M, Tr::kC, "swiglu_transition's output gradient");
  maps.h = sm90::rows_map(p.dtype, bp.h, p.M, p.h, "swiglu_transition's hidden layer");
  maps.dab = sm90::rows_map(p.dtype, bp.dab, p.M, 2 * p.h, "swiglu_transition's projection gradient");
  // x, dx and the addend are read and written by plain 8- and 16-byte row pieces.
  sm90::check_rows_aligned("swiglu_transition", "x", p.x);
  sm90::check_rows_aligned("swiglu_transition", "dx", bp.dx);
  sm90::check_rows_aligned("swiglu_transition", "the gradient added to dx", bp.dx_add);
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    launch("sm_90a backward kernel", tma_wgmma_backward_kernel<decltype(tin), decltype(t)>, persistent_grid(p.M),
           Tr::kBackwardSmem, static_cast<cudaStream_t>(stream), maps, bp);
  });
}

}  // namespace megafold::ops::cuda
