#pragma once
// How the ops' .cu files launch kernels: raise a kernel's dynamic shared-memory limit when it
// asks for more than the 48 KB every kernel gets, launch on the given stream, check the
// launch (MF_CUDA_CHECK names the call). kBlockThreads is the block size of the kernels that
// are not tiled for tensor cores (elementwise, layout and reduction passes): 8 warps.
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"

namespace megafold::ops::cuda {

inline constexpr int kBlockThreads = 256;

template <typename Kernel, typename... Args>
void launch_kernel(Kernel kernel, dim3 grid, dim3 threads, int smem_bytes, cudaStream_t stream, Args... args) {
  if (smem_bytes > 48 * 1024)
    MF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  kernel<<<grid, threads, smem_bytes, stream>>>(args...);
  MF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace megafold::ops::cuda
