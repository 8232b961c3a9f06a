#pragma once
// MF_CUDA_CHECK(expr): throws megafold::Error naming the CUDA call, its error string, file
// and line. For use in .cu and CUDA-only .cpp files.
#include <cuda_runtime_api.h>

#include "core/check.h"

#define MF_CUDA_CHECK(expr)                                                              \
  do {                                                                                   \
    const cudaError_t mf_cuda_err_ = (expr);                                             \
    if (mf_cuda_err_ != cudaSuccess)                                                     \
      ::megafold::detail::fail(#expr, __FILE__, __LINE__, "CUDA error: ",                \
                               cudaGetErrorString(mf_cuda_err_));                        \
  } while (0)
