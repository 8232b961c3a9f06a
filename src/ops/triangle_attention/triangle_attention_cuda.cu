// Entry points of the CUDA triangle attention: picks the kernel set by dtype and runs the
// backward's elementwise first pass (gate gradient, gradient of the ungated output, and the
// per-row softmax statistic delta) before the kernels that touch N^3.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "ops/triangle_attention/triangle_attention_cuda.h"

namespace megafold::ops::cuda {
namespace {

// One thread per (b, r, n, h) row of d elements:
//   d_o    = d_out * sigmoid(gate)                       (d_out itself without a gate)
//   d_gate = d_out * o * sigmoid(gate) * (1 - sigmoid(gate))
//   delta  = sum_c d_o[c] * o[c], with d_o as stored (rounded to T), as the kernels read it
template <typename T>
__global__ void backward_prologue_kernel(const TriangleAttentionParams p) {
  const int64_t rows = p.B * p.R * p.N * p.H;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = row % p.H, n = (row / p.H) % p.N, r = (row / (p.H * p.N)) % p.R,
                  b = row / (p.H * p.N * p.R);
    const T* o = static_cast<const T*>(p.o) + row * p.d;
    const T* d_out = static_cast<const T*>(p.d_out) + row * p.d;
    float delta = 0.f;
    if (p.gate == nullptr) {
      for (int64_t c = 0; c < p.d; ++c) delta += static_cast<float>(d_out[c]) * static_cast<float>(o[c]);
    } else {
      const T* gate = static_cast<const T*>(p.gate) + b * p.gate_stride[0] + r * p.gate_stride[1] +
                      n * p.gate_stride[2] + h * p.gate_stride[3];
      T* d_o = static_cast<T*>(p.d_o) + row * p.d;
      T* d_gate = static_cast<T*>(p.d_gate) + row * p.d;
      for (int64_t c = 0; c < p.d; ++c) {
        const float sg = 1.f / (1.f + expf(-static_cast<float>(gate[c])));
        const float g_out = static_cast<float>(d_out[c]), o_c = static_cast<float>(o[c]);
        const T d_o_c = static_cast<T>(g_out * sg);
        d_o[c] = d_o_c;
        d_gate[c] = static_cast<T>(g_out * o_c * sg * (1.f - sg));
        delta += static_cast<float>(d_o_c) * o_c;
      }
    }
    p.delta[((b * p.R + r) * p.H + h) * p.N + n] = delta;
  }
}

template <typename T>
void backward_prologue(const TriangleAttentionParams& p, cudaStream_t stream) {
  const int64_t rows = p.B * p.R * p.N * p.H;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((rows + 255) / 256, 65536));
  backward_prologue_kernel<T><<<blocks, 256, 0, stream>>>(p);
  MF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool supported_head_dim(int64_t d) { return d == 16 || d == 24 || d == 32 || d == 64; }

int64_t dbias_partials(const TriangleAttentionParams& p) {
  return p.dtype == DType::kFloat32 ? 0 : dbias_partials_mma(p);
}

void triangle_attention_forward(const TriangleAttentionParams& p, void* stream) {
  if (p.N == 0 || p.B * p.R * p.H == 0) return;
  p.dtype == DType::kFloat32 ? forward_simt(p, stream) : forward_mma(p, stream);
}

void triangle_attention_backward(const TriangleAttentionParams& p, void* stream) {
  if (p.N == 0 || p.B * p.R * p.H == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: backward_prologue<float>(p, s); return backward_simt(p, stream);
    case DType::kFloat16: backward_prologue<__half>(p, s); return backward_mma(p, stream);
    case DType::kBFloat16: backward_prologue<__nv_bfloat16>(p, s); return backward_mma(p, stream);
  }
}

}  // namespace megafold::ops::cuda
