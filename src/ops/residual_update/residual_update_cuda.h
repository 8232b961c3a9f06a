#pragma once
// The CUDA kernels' boundary for residual_update (residual_update.cu), on contiguous rows:
//   forward   out = z + scale * gate * update
//   backward  d_update = g * scale * gate, d_gate = g * scale * update (one pass, fp32 math);
//             with a second incoming gradient (the forked step) g = grad + grad2, rounded to z's
//             dtype as autograd's sum would be, also written as grad_sum (z's gradient)
// The scale is read through strides over the [d0, d1, d2, c] view of the rows (0 where it
// broadcasts), so a [B, 1, N, c] or [B, N, 1, c] dropout mask is never expanded.
#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

struct ResidualUpdateParams {
  DType z_dtype, u_dtype;     // z (and out, and g) / update (and gate, d_update, d_gate)
  int64_t rows, c;            // z viewed as [rows, c]
  int64_t d1, d2;             // rows = d0 * d1 * d2 (the scale's broadcast view)
  const void* z;              // forward
  const void* update;
  const void* gate;           // optional
  const float* scale;         // optional
  int64_t scale_stride[4];    // over [d0, d1, d2, c]
  void* out;                  // forward
  const void* grad;           // backward: dL/d out, z's dtype
  const void* grad2;          // backward: dL/d of the second handle (residual_update_forked), or null
  void* grad_sum;             // backward: grad + grad2 when grad2 is given
  void* d_update;             // backward
  void* d_gate;               // backward, when gate is given
};

void residual_update_forward(const ResidualUpdateParams& p, void* stream);
void residual_update_backward(const ResidualUpdateParams& p, void* stream);

}  // namespace megafold::ops::cuda
