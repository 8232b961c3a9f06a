// One thread per mask element; the mask is small ([B, N, c]: 49K values at N = 384), so one
// launch and its 64-bit hash arithmetic are all it costs.
#include <algorithm>

#include "ops/dropout_mask/dropout_hash.h"
#include "ops/dropout_mask/dropout_mask_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

__global__ void dropout_mask_kernel(DropoutMaskParams p) {
  const int64_t count = p.B * p.L * p.c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i % p.c, bl = i / p.c, l = bl % p.L, b = bl / p.L;
    p.out[i] = dropout_keep(p.key, dropout_counter(b, l, k, p.L_total, p.first, p.c), p.rate, p.keep_scale);
  }
}

}  // namespace

void dropout_mask_forward(const DropoutMaskParams& p, void* stream) {
  const int64_t count = p.B * p.L * p.c;
  if (count == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((count + kBlockThreads - 1) / kBlockThreads, 4096));
  launch_kernel(dropout_mask_kernel, dim3(blocks), dim3(kBlockThreads), 0, static_cast<cudaStream_t>(stream), p);
}

}  // namespace megafold::ops::cuda
