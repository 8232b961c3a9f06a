#pragma once
// Host side of the sm_90a (Hopper) kernels, shared by the ops that have them: whether they
// run on a device, TMA tensor maps, and the check that a kernel gets the blocks per SM its
// tiles assume. CUDA builds only (.cu and CUDA-only .cpp files).
#include <cuda.h>

#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::sm90 {

// Whether this library holds sm_90a code (CMAKE_CUDA_ARCHITECTURES lists 90a).
bool kernels_built();

// Whether the sm_90a kernels run on a GPU of this compute capability: built, 9.0, and not
// switched off by set_portable_kernels_only (which keeps an H100/H200 on the sm_80 kernels).
bool runs_on(int major, int minor);

CUtensorMapDataType map_type(cuda::DType t);

// A tiled TMA map over `rank` dimensions, innermost first: sizes in elements, strides in
// bytes of dimensions 1..rank-1 (multiples of 16), boxes of `box` elements. `what` names the
// tensor in the error if the driver refuses it.
CUtensorMap tensor_map(CUtensorMapDataType type, int rank, const void* ptr, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle, const char* what);

// A [rows, cols] row-major 16-bit tensor in boxes of 64 rows x 64 columns (128-byte rows, the
// 128-byte swizzle): the weight, activation and gradient tiles of the c = 128 kernels.
CUtensorMap rows_map(cuda::DType dtype, const void* ptr, int64_t rows, int64_t cols, const char* what);

// The first time it sees `kernel`: warns once (naming op and kernel) if fewer than `want`
// blocks of `threads` threads and `smem` bytes fit per SM, as the kernel's tiles assume.
void check_blocks_per_sm(const char* op, const char* name, const void* kernel, int threads, int smem, int want);

// Stops with an error naming op and what unless ptr (a [rows, 128] tensor the kernels read or
// write by plain vector accesses of a row's pieces) is null or 16-byte aligned.
void check_rows_aligned(const char* op, const char* what, const void* ptr);

// The grid of a persistent kernel whose blocks loop over `tiles` row tiles: `blocks_per_sm`
// blocks per SM of the current device, or one per tile when there are fewer tiles. Which block
// takes which tile changes with the SM count; the kernels that use it keep each tile's
// arithmetic within its block, so their results do not.
unsigned persistent_blocks(int64_t tiles, int blocks_per_sm = 1);

}  // namespace megafold::ops::sm90
