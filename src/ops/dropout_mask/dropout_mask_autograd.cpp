// CUDA binding of dropout_mask (AutogradCUDA and CUDA keys): the mask takes no gradient, so
// both keys run the kernel directly (below sm_80, where the library has no kernels, the
// reference).
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "ops/cuda_binding.h"
#include "ops/dropout_mask/dropout_mask.h"
#include "ops/dropout_mask/dropout_mask_cuda.h"

namespace megafold::ops {
namespace {

at::Tensor dropout_mask_cuda(const at::Tensor& like, double rate, int64_t axis, int64_t seed, int64_t rows_total,
                             int64_t row_offset) {
  if (!kernels_run_on(like, "dropout_mask")) return dropout_mask_ref(like, rate, axis, seed, rows_total, row_offset);
  const DropoutMaskShape s = dropout_mask_shape(like, rate, axis, rows_total, row_offset);
  const c10::cuda::CUDAGuard guard(like.device());
  const at::Tensor mask = at::empty(s.sizes, like.options().dtype(at::kFloat));
  cuda::DropoutMaskParams p{};
  p.B = s.B;
  p.L = s.L;
  p.c = s.c;
  p.L_total = s.L_total;
  p.first = s.first;
  p.key = static_cast<uint64_t>(seed);
  p.rate = s.rate;
  p.keep_scale = s.keep_scale;
  p.out = mask.data_ptr<float>();
  cuda::dropout_mask_forward(p, current_stream(like));
  return mask;
}

}  // namespace
}  // namespace megafold::ops

TORCH_LIBRARY_IMPL(megafold, AutogradCUDA, m) {
  m.impl("dropout_mask", &megafold::ops::dropout_mask_cuda);
}
TORCH_LIBRARY_IMPL(megafold, CUDA, m) {
  m.impl("dropout_mask", &megafold::ops::dropout_mask_cuda);
}
