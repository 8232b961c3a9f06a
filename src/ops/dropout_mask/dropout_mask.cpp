#include "ops/dropout_mask/dropout_mask.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "ops/common.h"
#include "ops/reference_mode.h"

namespace megafold::ops {

at::Tensor dropout_mask(const at::Tensor& like, double rate, int64_t axis, int64_t seed, int64_t rows_total,
                        int64_t row_offset) {
  if (reference_only()) return dropout_mask_ref(like, rate, axis, seed, rows_total, row_offset);
  static const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("megafold::dropout_mask", "").typed<decltype(dropout_mask)>();
  return handle.call(like, rate, axis, seed, rows_total, row_offset);
}

DropoutMaskShape dropout_mask_shape(const at::Tensor& like, double rate, int64_t axis, int64_t rows_total,
                                    int64_t row_offset) {
  constexpr const char* op = "dropout_mask";
  detail::check_shape(op, "like", like, {-1, -1, -1, -1});
  if (!(rate >= 0.0 && rate < 1.0)) detail::fail(op, "rate must lie in [0, 1), got " + std::to_string(rate));
  if (axis != 0 && axis != 1) detail::fail(op, "axis must be 0 (rowwise) or 1 (columnwise), got " + std::to_string(axis));
  const int64_t B = like.size(0), n = like.size(1), N2 = like.size(2), c = like.size(3);
  const int64_t total = rows_total < 0 ? n : rows_total;
  if (row_offset < 0 || row_offset + n > total)
    detail::fail(op, "rows [" + std::to_string(row_offset) + ", " + std::to_string(row_offset + n) +
                         ") do not lie within rows_total " + std::to_string(total));
  DropoutMaskShape s;
  s.B = B;
  s.c = c;
  s.rate = static_cast<float>(rate);
  s.keep_scale = static_cast<float>(1.0 / (1.0 - rate));
  if (axis == 0) {
    s.L = s.L_total = N2;
    s.first = 0;
    s.sizes = {B, 1, N2, c};
  } else {
    s.L = n;
    s.L_total = total;
    s.first = row_offset;
    s.sizes = {B, n, 1, c};
  }
  return s;
}

}  // namespace megafold::ops

TORCH_LIBRARY_FRAGMENT(megafold, m) {
  m.def("dropout_mask(Tensor like, float rate, int axis, int seed, int rows_total, int row_offset) -> Tensor");
}

TORCH_LIBRARY_IMPL(megafold, CompositeImplicitAutograd, m) {
  m.impl("dropout_mask", &megafold::ops::dropout_mask_ref);
}
