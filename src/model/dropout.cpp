#include "model/dropout.h"

#include <ATen/TensorOperators.h>

#include "ops/dropout_mask/dropout_mask.h"

namespace megafold::model {

std::optional<at::Tensor> dropout_scale(const at::Tensor& x, double rate, DropoutAxis axis, bool training,
                                        uint64_t seed, int64_t rows_total, int64_t row_offset) {
  if (!training || rate <= 0.0) return std::nullopt;
  return ops::dropout_mask(x, rate, axis == DropoutAxis::kRowwise ? 0 : 1, static_cast<int64_t>(seed), rows_total,
                           row_offset);
}

at::Tensor shared_dropout(const at::Tensor& x, double rate, DropoutAxis axis, bool training,
                          uint64_t seed, int64_t rows_total, int64_t row_offset) {
  const std::optional<at::Tensor> scale = dropout_scale(x, rate, axis, training, seed, rows_total, row_offset);
  return scale ? x * scale->to(x.scalar_type()) : x;
}

}  // namespace megafold::model
