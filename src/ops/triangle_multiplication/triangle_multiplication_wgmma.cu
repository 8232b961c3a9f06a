// Triangle multiplication's projection backward for Hopper (sm_90a), c_z = 128: one kernel
// from z and the gradients of a, b and the output gate to the projection's gradient and dz
// (see TrimulProjectionBackwardParams in triangle_multiplication_cuda.h).
//
// Persistent: one block per SM loops over tiles of 128 rows (two warpgroups of 64 rows each);
// its ring of slots (weight rows from L2, the incoming gradients' tiles from DRAM) runs on
// across tiles, refilled by the last warpgroup done with a slot, so the next tile's first
// slots arrive during this tile's last steps and its epilogue. The rows are LayerNorm'd once
// into shared memory (the A operand) from the forward's statistics. Per 64 channels of one
// operand:
//   p, g  = A w[p rows]^T, A w[g rows]^T   m64n64k16 x 16, in the forward's k order: once
//                                           rounded, the forward's bits
//   d     = d operand * mask               the slot's 64 channels x 64 rows tile of da or db,
//                                           read transposed by ldmatrix
//   dp, dg                                 operand_gradients.cuh; staged, stored by TMA into
//                                           dproj, and packed as A fragments for
//   dxhat' += dp w[p rows] + dg w[g rows]  w's panels read MN-major
// then per 64 columns of the output gate the same with its logits alone. After the last step
// the LayerNorm backward of dxhat' gives dz, plus the residual stream's gradient when z passed
// through the op (added before dz's one rounding).
// Why: the forward kept the whole projection for this (755 MB at N = 768), and the unfused
// backward read it back, wrote dproj, and read dproj twice more (dx and the weight gradients):
// recomputing it is a 128-wide GEMM per tile, cheaper than any of those passes. The weight
// gradients still read dproj once (layernorm_linear's kernels).
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
#include "ops/triangle_multiplication/operand_gradients.cuh"
#include "ops/triangle_multiplication/triangle_multiplication_cuda.h"

namespace megafold::ops::cuda {
namespace {

// Tile choices (c_z = 128, 16-bit products).
struct Traits {
  static constexpr int kC = 128;     // c_z: the LayerNorm's width, the projection's reduction
  static constexpr int kChunk = 64;  // channels (operand steps) or gate columns per step
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockRows = 64 * kWarpgroups;
  // A panel: 64 rows of 128 bytes (64 16-bit values) in the 128-byte swizzle, 8 KB.
  static constexpr int kPanel = 64 * 128;
  // A slot: w's p rows (columns 0..63, 64..127), its g rows (likewise), and each warpgroup's
  // tile of the incoming gradient (da or db: 64 channels x 64 rows; d gate: 64 rows x 64).
  static constexpr int kSlotPanels = 4 + kWarpgroups;
  static constexpr int kSlot = kSlotPanels * kPanel;
  static constexpr int kStages = 3;
  // The LayerNorm'd rows (two panels per warpgroup), staging for dp and dg (two per warpgroup)
  // and the ring: 209 KB, one block per SM (the grid: one block per SM, each looping over tiles).
  static constexpr int kSmem = kWarpgroups * 4 * kPanel + kStages * kSlot + 1024;
  static_assert(kSmem <= 227 * 1024, "shared memory per block");
};
using Tr = Traits;

struct Maps {
  CUtensorMap w;      // [4c + c_gate, 128], boxes 64 rows x 64 columns
  CUtensorMap da;     // [batch, c, plane], boxes 64 rows (innermost) x 64 channels x 1
  CUtensorMap db;
  CUtensorMap dgate;  // [M, c_gate], boxes 64 x 64
  CUtensorMap dproj;  // [M, 4c + c_gate], boxes 64 x 64 (stores)
};

#if defined(MEGAFOLD_SM90A_DEVICE)
using namespace megafold::hopper;
using mma::load4;
using mma::pack2;
using mma::unpack2;

// A pair of projection accumulators as the forward's epilogue used them: plus its (zero) bias,
// which turns -0 into +0, rounded to T, and back to fp32.
template <typename T>
__device__ __forceinline__ float2 rounded(float lo, float hi) {
  return unpack2<T>(pack2<T>(lo + 0.f, hi + 0.f));
}
#endif

template <typename Tin, typename T>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    tma_wgmma_projection_backward_kernel(const __grid_constant__ Maps maps, const TrimulProjectionBackwardParams p) {
#if defined(MEGAFOLD_SM90A_DEVICE)
  extern __shared__ unsigned char raw[];
  __shared__ SelfFilledRing<Tr::kStages, Tr::kWarpgroups> ring;
  unsigned char* a_s = aligned_1024(raw);                          // [warpgroup][2 panels]
  unsigned char* st_s = a_s + Tr::kWarpgroups * 2 * Tr::kPanel;    // [warpgroup][dp, dg]
  unsigned char* slots = st_s + Tr::kWarpgroups * 2 * Tr::kPanel;  // [slot][kSlotPanels]
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  const int64_t M = p.batch * p.plane;
  const int c = static_cast<int>(p.c), c_tiles = c / Tr::kChunk;
  // Steps of one tile: j < operand_steps is channel tile j % c_tiles of operand j / c_tiles (a,
  // then b); after them the output gate's column tiles. The ring counts steps across this
  // block's tiles blockIdx.x, + gridDim.x, ...
  const int operand_steps = 2 * c_tiles, tile_steps = operand_steps + static_cast<int>(p.c_gate) / Tr::kChunk;
  const int64_t tiles = (M + Tr::kBlockRows - 1) / Tr::kBlockRows;
  const int steps = block_tiles(tiles) * tile_steps;
  auto tile_row = [&](int step) {
    return (blockIdx.x + static_cast<int64_t>(step / tile_steps) * gridDim.x) * Tr::kBlockRows;
  };
  if (threadIdx.x == 0) {
    ring.init();
    barrier_init_fence();
  }
  __syncthreads();
  // Tiles past M arrive as zeros (and are never stored).
  auto load = [&](int step) {
    const int j = step % tile_steps;
    const int64_t block_row = tile_row(step);
    const bool operand = j < operand_steps;
    const int s = ring.arm(step, (operand ? Tr::kSlotPanels : 2 + Tr::kWarpgroups) * Tr::kPanel);
    unsigned char* slot = slots + s * Tr::kSlot;
    const int g_row = operand ? (2 + j / c_tiles) * c + (j % c_tiles) * Tr::kChunk
                              : 4 * c + (j - operand_steps) * Tr::kChunk;
    tma_load_2d(slot + 2 * Tr::kPanel, &maps.w, ring.filled(s), 0, g_row);
    tma_load_2d(slot + 3 * Tr::kPanel, &maps.w, ring.filled(s), 64, g_row);
    if (operand) {
      const int p_row = g_row - 2 * c;
      tma_load_2d(slot, &maps.w, ring.filled(s), 0, p_row);
      tma_load_2d(slot + Tr::kPanel, &maps.w, ring.filled(s), 64, p_row);
    }
    for (int w = 0; w < Tr::kWarpgroups; ++w) {
      unsigned char* tile = slot + (4 + w) * Tr::kPanel;
      const int64_t r = block_row + 64 * w;
      if (operand) {
        // A 64-row tile never straddles two batch elements (the forward's condition).
        const int64_t b = r / p.plane;
        tma_load_3d(tile, j < c_tiles ? &maps.da : &maps.db, ring.filled(s), static_cast<int>(r - b * p.plane),
                    (j % c_tiles) * Tr::kChunk, static_cast<int>(b));
      } else {
        tma_load_2d(tile, &maps.dgate, ring.filled(s), (j - operand_steps) * Tr::kChunk, static_cast<int>(r));
      }
    }
  };
  if (threadIdx.x == 0)
    for (int step = 0; step < Tr::kStages && step < steps; ++step) load(step);

  unsigned char* a_tile = a_s + wg * 2 * Tr::kPanel;
  const Tin* x = static_cast<const Tin*>(p.x);
  const uint64_t a_lo = smem_desc<128>(a_tile), a_hi = smem_desc<128>(a_tile + Tr::kPanel);
  unsigned char* staging = st_s + wg * 2 * Tr::kPanel;  // dp, dg of the step
  int d_at[4];
  transposed_tile_offsets(d_at, 16 * warp, lane);
  // dx_acc[nh] = dxhat' columns 64 nh .. +63.
  float acc_p[32], acc_g[32], dx_acc[2][32];
  uint32_t dp_f[4][4], dg_f[4][4];

  int step = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row0 = tile * Tr::kBlockRows + wg * 64;
    // The next tile's rows are read by this one's successor: into L2 under this tile's steps.
    prefetch_rows_l2(x, row0 + static_cast<int64_t>(gridDim.x) * Tr::kBlockRows, M, leader);

    // The warpgroup's rows LayerNorm'd into its A tile from the forward's statistics (the same
    // bits). The previous tile's products reading it were all waited for.
    layer_norm_rows<Tin, T, RowStats::kGiven>(a_tile, x, M, row0, p.ln_w, p.ln_b, 0.f, p.mean, p.rstd);
    fence_async_shared();  // wgmma reads the tile through the async proxy
    named_barrier(1 + wg, 128);

    // This thread's rows 16 warp + g + 8 h: their mask values.
    int64_t rows[2];
    float mask[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows[h] = row0 + 16 * warp + g + 8 * h;
      mask[h] = p.mask != nullptr && rows[h] < M ? p.mask[rows[h]] : 1.f;
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) dx_acc[0][i] = dx_acc[1][i] = acc_p[i] = acc_g[i] = 0.f;

    // The step's gradient tiles leave through the staging tiles (whose previous stores must
    // have read them) by TMA, at dproj columns col_p (dp, when has_p) and col_g (dg).
    auto store_step = [&](bool has_p, int col_p, int col_g) {
      fence_async_shared();
      named_barrier(1 + wg, 128);
      if (leader) {
        if (has_p) tma_store_2d(&maps.dproj, staging, col_p, static_cast<int>(row0));
        tma_store_2d(&maps.dproj, staging + Tr::kPanel, col_g, static_cast<int>(row0));
        tma_store_commit();
      }
    };
    // dxhat' += dp w[p rows] (with has_p) + dg w[g rows]: A from registers, each two-panel
    // weight tile read MN-major (its rows run along the reduction over the step's 64 columns).
    // Waited for; then the last warpgroup done with the slot refills it kStages steps ahead.
    auto accumulate_dx = [&](const unsigned char* slot, int s, int j, bool has_p) {
      fence_registers(dx_acc[0]);
      fence_registers(dx_acc[1]);
      wgmma_fence();
      if (has_p) issue_dx_products<T>(dx_acc, dp_f, dg_f, slot, slot + 2 * Tr::kPanel);
      else issue_dx_product<T>(dx_acc, dg_f, slot + 2 * Tr::kPanel);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(dp_f);
      fence_registers(dg_f);
      fence_registers(dx_acc[0]);
      fence_registers(dx_acc[1]);
      if (ring.release(s, wg) && step + Tr::kStages < steps) load(step + Tr::kStages);
      // The residual gradient's rows, added in the epilogue.
      prefetch_addend_rows_l2(static_cast<const Tin*>(p.dx_add), row0, M, j, tile_steps, leader);
    };

    for (int j = 0; j < operand_steps; ++j, ++step) {
      const int s = ring.wait(step);
      const unsigned char* slot = slots + s * Tr::kSlot;
      wgmma_fence();
      issue_row_projections<T>(acc_p, acc_g, a_lo, a_hi, slot, slot + 2 * Tr::kPanel);
      wgmma_commit();
      uint32_t d[16];  // d operand: pairs of channels 8c + 2t, + 1 of row h at d[2c + h]
      load_tile_transposed(d, slot + (4 + wg) * Tr::kPanel, d_at);
      wgmma_wait<0>();
      fence_registers(acc_p);
      fence_registers(acc_g);
      if (leader) tma_store_wait_read<0>();
      named_barrier(1 + wg, 128);
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int h = (i / 2) % 2, cc = i / 4;
        const float2 pv = rounded<T>(acc_p[i], acc_p[i + 1]), gv = rounded<T>(acc_g[i], acc_g[i + 1]);
        const float2 dv = unpack2<T>(d[2 * cc + h]);
        const float2 g0 = trimul_operand_gradients(dv.x * mask[h], pv.x, gv.x);
        const float2 g1 = trimul_operand_gradients(dv.y * mask[h], pv.y, gv.y);
        to_fragment<T>(dp_f, i, g0.x, g1.x);
        to_fragment<T>(dg_f, i, g0.y, g1.y);
        const int at = swizzled_pair(16 * warp + g + 8 * h, cc, t), k = ((i / 4) % 2) * 2 + h;
        *reinterpret_cast<uint32_t*>(staging + at) = dp_f[i / 8][k];
        *reinterpret_cast<uint32_t*>(staging + Tr::kPanel + at) = dg_f[i / 8][k];
      }
      const int col_p = (j / c_tiles) * c + (j % c_tiles) * Tr::kChunk;
      store_step(true, col_p, col_p + 2 * c);
      accumulate_dx(slot, s, j, true);
    }
    for (int j = operand_steps; j < tile_steps; ++j, ++step) {
      const int s = ring.wait(step);
      const unsigned char* slot = slots + s * Tr::kSlot;
      wgmma_fence();
      issue_row_projection<T>(acc_g, a_lo, a_hi, slot + 2 * Tr::kPanel);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc_g);
      if (leader) tma_store_wait_read<0>();
      named_barrier(1 + wg, 128);
      const unsigned char* dgate = slot + (4 + wg) * Tr::kPanel;  // rows x columns, like the staging
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int h = (i / 2) % 2, cc = i / 4;
        const int at = swizzled_pair(16 * warp + g + 8 * h, cc, t);
        const float2 gv = rounded<T>(acc_g[i], acc_g[i + 1]);
        const float2 dv = unpack2<T>(*reinterpret_cast<const uint32_t*>(dgate + at));
        to_fragment<T>(dg_f, i, trimul_gate_gradient(dv.x, gv.x), trimul_gate_gradient(dv.y, gv.y));
        *reinterpret_cast<uint32_t*>(staging + Tr::kPanel + at) = dg_f[i / 8][((i / 4) % 2) * 2 + h];
      }
      store_step(false, 0, 4 * c + (j - operand_steps) * Tr::kChunk);
      accumulate_dx(slot, s, j, false);
    }

    // LayerNorm backward of the warp's rows by rows, x from L2 again, through its A-tile rows.
    float mean[2], rstd[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mean[h] = rows[h] < M ? p.mean[rows[h]] : 0.f;
      rstd[h] = rows[h] < M ? p.rstd[rows[h]] : 0.f;
    }
    layernorm_backward_through_a_tile<Tin>(dx_acc, a_tile, warp, row0, M, mean, rstd, p.ln_w, x,
                                           static_cast<Tin*>(p.dx), static_cast<const Tin*>(p.dx_add));
  }
  if (leader) tma_store_wait_read<0>();  // the staging tiles stay until the copies have read them
#endif
}

}  // namespace

void trimul_projection_backward(const TrimulProjectionBackwardParams& p, void* stream) {
  const int64_t M = p.batch * p.plane, N = 4 * p.c + p.c_gate;
  if (M == 0) return;
  MF_CHECK(p.c > 0 && p.c % Tr::kChunk == 0 && p.c_gate % Tr::kChunk == 0 && p.plane % 8 == 0 &&
               (p.batch == 1 || p.plane % 64 == 0),
           "triangle_multiplication's fused projection backward: c ", p.c, ", c_gate ", p.c_gate, ", plane ", p.plane,
           " (needs multiples of 64 channels and whole 64-row tiles per batch element)");
  MF_CHECK(M < (int64_t{1} << 31), "triangle_multiplication: ", M, " rows exceed TMA's 32-bit coordinates");
  // x, dx and the addend are read and written by plain 8- and 16-byte row pieces.
  sm90::check_rows_aligned("triangle_multiplication", "x", p.x);
  sm90::check_rows_aligned("triangle_multiplication", "dx", p.dx);
  sm90::check_rows_aligned("triangle_multiplication", "the gradient added to dx", p.dx_add);
  Maps maps{};
  maps.w = sm90::rows_map(p.dtype, p.w, N, Tr::kC, "triangle_multiplication's projection weight");
  const uint64_t dims[3] = {static_cast<uint64_t>(p.plane), static_cast<uint64_t>(p.c), static_cast<uint64_t>(p.batch)};
  const uint64_t strides[2] = {static_cast<uint64_t>(p.plane) * 2, static_cast<uint64_t>(p.c * p.plane) * 2};
  const uint32_t box[3] = {64, 64, 1};
  maps.da = sm90::tensor_map(sm90::map_type(p.dtype), 3, p.da, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                             "the gradient of triangle_multiplication's operand a");
  maps.db = sm90::tensor_map(sm90::map_type(p.dtype), 3, p.db, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                             "the gradient of triangle_multiplication's operand b");
  if (p.c_gate > 0)
    maps.dgate = sm90::rows_map(p.dtype, p.dgate, M, p.c_gate, "the gradient of triangle_multiplication's output gate");
  maps.dproj = sm90::rows_map(p.dtype, p.dproj, M, N, "triangle_multiplication's projection gradient");
  const dim3 grid(sm90::persistent_blocks((M + Tr::kBlockRows - 1) / Tr::kBlockRows));
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch_input_and_product(p.x_dtype, p.dtype, [&](auto tin, auto t) {
    const auto kernel = tma_wgmma_projection_backward_kernel<decltype(tin), decltype(t)>;
    launch_kernel(kernel, grid, Tr::kThreads, Tr::kSmem, s, maps, p);
    sm90::check_blocks_per_sm("triangle_multiplication", "sm_90a fused projection backward",
                              reinterpret_cast<const void*>(kernel), Tr::kThreads, Tr::kSmem, 1);
  });
}

}  // namespace megafold::ops::cuda
