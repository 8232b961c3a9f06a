// The reference: the hash evaluated per element on the host, copied to like's device.
#include <ATen/ops/empty.h>

#include "ops/dropout_mask/dropout_hash.h"
#include "ops/dropout_mask/dropout_mask.h"

namespace megafold::ops {

at::Tensor dropout_mask_ref(const at::Tensor& like, double rate, int64_t axis, int64_t seed, int64_t rows_total,
                            int64_t row_offset) {
  const DropoutMaskShape s = dropout_mask_shape(like, rate, axis, rows_total, row_offset);
  at::Tensor mask = at::empty(s.sizes, at::TensorOptions().dtype(at::kFloat));
  float* out = mask.data_ptr<float>();
  const auto key = static_cast<uint64_t>(seed);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t l = 0; l < s.L; ++l)
      for (int64_t k = 0; k < s.c; ++k)
        *out++ = dropout_keep(key, dropout_counter(b, l, k, s.L_total, s.first, s.c), s.rate, s.keep_scale);
  return like.device().is_cpu() ? mask : mask.to(like.device());
}

}  // namespace megafold::ops
