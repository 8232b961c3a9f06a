#include "model/dropout.h"

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/full.h>

#include <mutex>

namespace megafold::model {

std::optional<at::Tensor> dropout_scale(const at::Tensor& x, double rate, DropoutAxis axis, bool training,
                                        uint64_t seed, int64_t rows_total, int64_t row_offset) {
  if (!training || rate <= 0.0) return std::nullopt;
  const int64_t B = x.size(0), N1 = rows_total < 0 ? x.size(1) : rows_total, N2 = x.size(2), c = x.size(3);
  const std::vector<int64_t> shape = axis == DropoutAxis::kRowwise
                                         ? std::vector<int64_t>{B, 1, N2, c}
                                         : std::vector<int64_t>{B, N1, 1, c};
  at::Generator gen = at::globalContext().defaultGenerator(x.device()).clone();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
  at::Tensor keep = at::bernoulli(at::full(shape, 1.0 - rate, x.options().dtype(at::kFloat)), gen);
  if (axis == DropoutAxis::kColumnwise) keep = keep.narrow(1, row_offset, x.size(1));
  return keep * (1.0 / (1.0 - rate));
}

at::Tensor shared_dropout(const at::Tensor& x, double rate, DropoutAxis axis, bool training,
                          uint64_t seed, int64_t rows_total, int64_t row_offset) {
  const std::optional<at::Tensor> scale = dropout_scale(x, rate, axis, training, seed, rows_total, row_offset);
  return scale ? x * scale->to(x.scalar_type()) : x;
}

}  // namespace megafold::model
