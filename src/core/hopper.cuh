#pragma once
// Hopper (sm_90a) pieces in inline PTX: mbarriers, named barriers, bulk tensor (TMA) copies
// between global and shared memory, and warpgroup matrix multiply-accumulate (wgmma) with
// shared-memory matrix descriptors. Device code using them compiles to nothing unless the
// pass targets sm_90a (MEGAFOLD_SM90A_DEVICE); host code decides at run time whether those
// kernels exist and the GPU can run them (ops/hopper/sm90.h).
//
// Shared-memory operands use the swizzled layouts that TMA writes and wgmma reads alike: rows
// of W bytes (W = 64 or 128, the swizzle width), the 16-byte chunk c of row r stored at chunk
// c ^ (r / (128 / W)) % (W / 16) within each 8-row, 8*W-byte atom. Tiles start 1024-byte aligned.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MEGAFOLD_SM90A_DEVICE 1
#endif

namespace megafold::hopper {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if defined(MEGAFOLD_SM90A_DEVICE)

// Dynamic shared memory from the next 1024-byte boundary, where the swizzle patterns start
// (kernels ask for 1 KB more than their tiles need).
__device__ __forceinline__ unsigned char* aligned_1024(unsigned char* raw) {
  return raw + ((1024 - smem_u32(raw) % 1024) % 1024);
}

// ---- mbarrier: a transaction-counting barrier in shared memory ----

__device__ __forceinline__ void barrier_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals));
}

// Makes initialised barriers visible to the copy engine (then a __syncthreads for the threads).
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` of copies completing on this phase.
__device__ __forceinline__ void barrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// Waits until the phase of parity `phase` has completed (a fresh barrier counts its phase
// "1" as completed, so a producer's first wait on an empty slot passes).
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(phase)
      : "memory");
}

// The "full" side of a ring of kStages shared-memory slots: slot s is full once the bytes
// announced for it have landed. Steps map to slots round-robin; the phase parity of a slot
// flips each time round the ring.
template <int kStages>
struct FullSlots {
  uint64_t full[kStages];

  __device__ __forceinline__ uint64_t* filled(int s) { return &full[s]; }
  // Consumers: wait for the slot of `step` to be full.
  __device__ __forceinline__ int wait(int step) {
    const int s = step % kStages;
    barrier_wait(&full[s], (step / kStages) & 1);
    return s;
  }
};

// A ring between one producer thread (TMA copies) and the consumer threads: a slot is also
// "empty" once every consumer thread has released it.
template <int kStages>
struct Ring : FullSlots<kStages> {
  using FullSlots<kStages>::full;
  uint64_t empty[kStages];

  __device__ __forceinline__ void init(int consumer_threads) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], consumer_threads);
    }
  }
  // Producer: waits until the slot of `step` is free and announces the bytes its copies will
  // bring (copies complete on filled(slot)).
  __device__ __forceinline__ int acquire(int step, uint32_t bytes) {
    const int s = step % kStages;
    barrier_wait(&empty[s], ((step / kStages) & 1) ^ 1);
    barrier_expect_bytes(&full[s], bytes);
    return s;
  }
  // Consumers: release the slot when done reading it.
  __device__ __forceinline__ void release(int s) { barrier_arrive(&empty[s]); }
};

// ---- TMA: one thread copies a whole box of a tensor into shared memory ----
// Coordinates are in elements, innermost first; boxes reaching past the tensor are filled
// with zeros (and still count their full size towards the barrier's bytes).

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, "
      "%7}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Asks the TMA unit to bring a contiguous run of `bytes` (a multiple of 16, 16-byte aligned)
// into L2 ahead of plain loads that will need it; nothing waits for it.
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// A contiguous run of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global
// memory, no tensor map.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

__device__ __forceinline__ void tma_load_1d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
                   smem_u32(dst)),
               "l"(map), "r"(smem_u32(bar)), "r"(c0)
               : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// ---- TMA stores: one thread writes a whole box from shared memory (parts of the box past
// the tensor are not written). Threads that filled the box with ordinary stores must make
// them visible to the copy engine first (fence_async_shared, then a barrier). ----

__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map),
               "r"(smem_u32(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map),
               "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending committed stores still read their shared memory. Before the
// block exits, kPending = 0 is all it needs: its shared memory must outlive the reads, while the
// writes to global memory complete without it (waiting for them held the block's registers and
// shared memory through their round trip).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads) over the first `threads` threads that reach it, a
// multiple of 32: one warpgroup's, or all consumers' without the producer warp.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A ring of kStages shared-memory slots whose kGroups consumer warpgroups refill it
// themselves: the copies of step s + kStages go into step s's slot as soon as the last
// warpgroup to read it is done, issued by that warpgroup's first thread. No thread waits for
// a slot to empty (a producer thread that did held its warpgroup back whenever another ran
// behind), and each slot is refilled as early as it can be.
template <int kStages, int kGroups>
struct SelfFilledRing : FullSlots<kStages> {
  using FullSlots<kStages>::full;
  int released[kStages];  // warpgroup releases so far: a multiple of kGroups when all are done

  // Thread 0, before the barrier that makes the ring visible to the block.
  __device__ __forceinline__ void init() {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      released[s] = 0;
    }
  }
  // The issuing thread: announces the bytes of the copies of `step`, which complete on
  // filled(slot).
  __device__ __forceinline__ int arm(int step, uint32_t bytes) {
    const int s = step % kStages;
    barrier_expect_bytes(&full[s], bytes);
    return s;
  }
  // Every thread of warpgroup `wg` when the group is done reading slot s (its wgmma waited
  // for): true in the first thread of the last warpgroup to finish, which refills the slot.
  // Named barriers 1..kGroups are the warpgroups'.
  __device__ __forceinline__ bool release(int s, int wg) {
    named_barrier(1 + wg, 128);
    if (threadIdx.x % 128 != 0) return false;
    // Fences on both sides make the count a release (this warpgroup's reads of the slot) and,
    // for the last, an acquire (the other warpgroups' reads) before it overwrites the slot.
    __threadfence_block();
    const bool last = atomicAdd(&released[s], 1) % kGroups == kGroups - 1;
    __threadfence_block();
    return last;
  }
  // The same per warp, for kernels whose warps reach a slot's end without meeting (each warp has
  // waited for its own part of the products): true in lane 0 of the last of the 4 kGroups warps,
  // which refills the slot. One acquire-release count, no barrier and no full fences. A kernel
  // uses release or release_warp for every slot, not both.
  __device__ __forceinline__ bool release_warp(int s) {
    __syncwarp();
    if (threadIdx.x % 32 != 0) return false;
    int before;
    asm volatile("atom.acq_rel.cta.shared::cta.add.s32 %0, [%1], 1;\n"
                 : "=r"(before)
                 : "r"(smem_u32(&released[s]))
                 : "memory");
    return before % (4 * kGroups) == 4 * kGroups - 1;
  }
  // Every calling thread: waits until every warp has released step `step`'s slot (4 kGroups
  // releases per use of a slot), and returns the slot, so that a slot with no refill after that
  // step is free for the caller's own stores (the acquire orders them after every warp's reads).
  __device__ __forceinline__ int wait_released(int step) {
    const int s = step % kStages, count = 4 * kGroups * (step / kStages + 1);
    int seen;
    do {
      asm volatile("ld.acquire.cta.shared::cta.b32 %0, [%1];\n" : "=r"(seen) : "r"(smem_u32(&released[s])) : "memory");
    } while (seen < count);
    return s;
  }
};

// A persistent grid's block takes row tiles blockIdx.x, + gridDim.x, ... of `tiles`: how many.
__device__ __forceinline__ int block_tiles(int64_t tiles) {
  return static_cast<int>((tiles - blockIdx.x + gridDim.x - 1) / gridDim.x);
}

// ---- wgmma ----

// Orders this warpgroup's register writes before the next wgmma reads them (accumulators
// rescaled, A fragments packed).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across an
// asynchronous wgmma (the registers change behind its back until wgmma_wait).
template <int n>
__device__ __forceinline__ void fence_registers(float (&r)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for A fragments in registers: an asynchronous wgmma reads them after its issue, so
// they stay live (and unchanged) until the wgmma_wait that follows.
template <int m, int n>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[m][n]) {
#pragma unroll
  for (int i = 0; i < m; ++i)
#pragma unroll
    for (int k = 0; k < n; ++k) asm volatile("" : "+r"(r[i][k])::"memory");
}

// Shared-memory matrix descriptor of a tile of rows of kSwizzle bytes (64 or 128) in 8-row
// groups 8 * kSwizzle bytes apart. K-major operands (the contraction runs along the row) and
// MN-major ones whose MN extent is one row (the contraction runs down the rows) share this
// form; a k-step of 16 elements moves the start by 32 bytes (K-major) or 16 rows (MN-major).
template <int kSwizzle>
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  static_assert(kSwizzle == 64 || kSwizzle == 128, "64- or 128-byte swizzle");
  constexpr uint64_t kLayout = kSwizzle == 128 ? 1 : 2;  // the descriptor's swizzle code
  constexpr uint64_t kGroupStride = 8 * kSwizzle / 16;   // 16-byte units
  return (static_cast<uint64_t>(smem_u32(tile) >> 4) & 0x3fff) | (uint64_t{1} << 16) | (kGroupStride << 32) |
         (kLayout << 62);
}

// Descriptor advanced by `bytes` (a multiple of 16 inside the tile).
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

template <typename T>
constexpr bool kIsBf16 = std::is_same_v<T, __nv_bfloat16>;

// D[64x64] (+)= A[64x16] B[16x64], both from shared memory; K-major unless kTransA / kTransB
// (then MN-major: the tile's rows run along K, see smem_desc).
template <typename T, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_64x64_ss(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
#define MEGAFOLD_WGMMA_64x64_SS(TYPE)                                                                         \
  asm volatile(                                                                                              \
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %34, 0;\n"                                                       \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                            \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, acc, 1, 1, %35, %36;\n}\n"                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),       \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),           \
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),           \
        "+f"(d[30]), "+f"(d[31])                                                                             \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB))
  if constexpr (kIsBf16<T>) MEGAFOLD_WGMMA_64x64_SS("bf16");
  else MEGAFOLD_WGMMA_64x64_SS("f16");
#undef MEGAFOLD_WGMMA_64x64_SS
}

// D[64x8] (+)= A[64x16] B[16x8], both from shared memory (transposes as wgmma_64x64_ss).
template <typename T, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_64x8_ss(float (&d)[4], uint64_t a, uint64_t b, bool accumulate) {
#define MEGAFOLD_WGMMA_64x8_SS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %6, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE                                \
               " {%0, %1, %2, %3}, %4, %5, acc, 1, 1, %7, %8;\n}\n"                                      \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB))
  if constexpr (kIsBf16<T>) MEGAFOLD_WGMMA_64x8_SS("bf16");
  else MEGAFOLD_WGMMA_64x8_SS("f16");
#undef MEGAFOLD_WGMMA_64x8_SS
}

// D[64x32] += A[64x16] B[16x32]: A from registers (the accumulator layout of a previous
// product, packed to pairs), B from shared memory, MN-major (transposed).
template <typename T>
__device__ __forceinline__ void wgmma_64x32_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
#define MEGAFOLD_WGMMA_64x32_RS(TYPE)                                                                             \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %21, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE                                       \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, " \
               "%20, acc, 1, 1, 1;\n}\n"                                                                         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),             \
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),         \
                 "+f"(d[14]), "+f"(d[15])                                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
  if constexpr (kIsBf16<T>) MEGAFOLD_WGMMA_64x32_RS("bf16");
  else MEGAFOLD_WGMMA_64x32_RS("f16");
#undef MEGAFOLD_WGMMA_64x32_RS
}

// D[64x8] += A[64x16] B[16x8]: A from registers (as wgmma_64x32_rs), B from shared memory,
// K-major.
template <typename T>
__device__ __forceinline__ void wgmma_64x8_rs(float (&d)[4], const uint32_t (&a)[4], uint64_t b) {
#define MEGAFOLD_WGMMA_64x8_RS(TYPE)                                                                   \
  asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %9, 0;\n"                                      \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE                             \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, acc, 1, 1, 0;\n}\n"                          \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
  if constexpr (kIsBf16<T>) MEGAFOLD_WGMMA_64x8_RS("bf16");
  else MEGAFOLD_WGMMA_64x8_RS("f16");
#undef MEGAFOLD_WGMMA_64x8_RS
}

// D[64x64] (+)= A[64x16] B[16x64]: A from registers (the accumulator layout of a previous
// product, packed to pairs), B from shared memory, K-major unless kTransB (MN-major).
template <typename T, int kTransB = 0>
__device__ __forceinline__ void wgmma_64x64_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#define MEGAFOLD_WGMMA_64x64_RS(TYPE)                                                                          \
  asm volatile(                                                                                               \
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %37, 0;\n"                                                        \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                             \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, acc, 1, 1, %38;\n}\n"       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),        \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),            \
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),            \
        "+f"(d[30]), "+f"(d[31])                                                                              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB))
  if constexpr (kIsBf16<T>) MEGAFOLD_WGMMA_64x64_RS("bf16");
  else MEGAFOLD_WGMMA_64x64_RS("f16");
#undef MEGAFOLD_WGMMA_64x64_RS
}

#endif  // MEGAFOLD_SM90A_DEVICE

}  // namespace megafold::hopper
