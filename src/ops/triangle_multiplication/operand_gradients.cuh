#pragma once
// The elementwise gradients of triangle multiplication's operands, shared by the layout pass
// (triangle_multiplication_layout.cu) and the projection's fused backward
// (triangle_multiplication_wgmma.cu) so that both give the same bits. CUDA sources only.
//   operand = p * sigmoid(g) * mask:  d p = d * s,  d g = d * p * s (1 - s),  d = d operand * mask
//   output gate = sigmoid(g):          d g = d gate * s (1 - s)
// with s = sigmoid(g), p and g the projection's rounded values, all in fp32.

namespace megafold::ops::cuda {

__device__ __forceinline__ float trimul_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// d: the operand's gradient times the mask.
__device__ __forceinline__ float2 trimul_operand_gradients(float d, float p, float g) {
  const float s = trimul_sigmoid(g);
  return make_float2(d * s, d * p * s * (1.0f - s));
}

__device__ __forceinline__ float trimul_gate_gradient(float d, float g) {
  const float s = trimul_sigmoid(g);
  return d * s * (1.0f - s);
}

}  // namespace megafold::ops::cuda
