#include "dist/grad_sync.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "dist/process_group.h"

namespace megafold::dist {
GradientSync::GradientSync(ProcessGroup& group, const std::vector<at::Tensor>& params, std::vector<double> divisors,
                           int64_t bucket_bytes)
    : group_(group), params_(params), divisors_(std::move(divisors)) {
  MF_CHECK(divisors_.size() == params_.size(), "GradientSync: one divisor per parameter");
  // Reverse model order: the last layers' gradients arrive first.
  const at::TensorOptions f32 = params_.empty() ? at::TensorOptions() : params_[0].options();
  int64_t size = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    if (buckets_.empty() || size * 4 >= bucket_bytes) {
      if (!buckets_.empty()) buckets_.back().buffer = at::zeros({size}, f32.dtype(at::kFloat));
      buckets_.emplace_back();
      size = 0;
    }
    buckets_.back().params.push_back(k);
    buckets_.back().offsets.push_back(size);
    size += params_[k].numel();
  }
  if (!buckets_.empty()) buckets_.back().buffer = at::zeros({size}, f32.dtype(at::kFloat));
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    buckets_[bi].contributions.assign(buckets_[bi].params.size(), 0);
    buckets_[bi].expected.assign(buckets_[bi].params.size(), true);
    for (size_t slot = 0; slot < buckets_[bi].params.size(); ++slot)
      hooks_.push_back(params_[buckets_[bi].params[slot]].register_hook(
          [this, bi, slot](const at::Tensor& g) { on_gradient(bi, slot, g); }));
  }
}

GradientSync::~GradientSync() {
  size_t h = 0;
  for (const Bucket& b : buckets_)
    for (size_t k : b.params) params_[k].remove_hook(hooks_[h++]);
}

int64_t GradientSync::late_buckets() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) n += b.late;
  return n;
}

void GradientSync::prepare() {
  for (Bucket& b : buckets_) {
    b.buffer.zero_();
    b.waiting = std::count(b.expected.begin(), b.expected.end(), true);
    b.launched = b.late = false;
    b.wait = nullptr;
    std::fill(b.contributions.begin(), b.contributions.end(), 0);
  }
  next_ = 0;
  launched_early_ = 0;
  in_backward_ = true;
}

void GradientSync::on_gradient(size_t bi, size_t slot, const at::Tensor& g) {
  if (!in_backward_) return;  // a backward outside the training step (none in the trainer)
  Bucket& b = buckets_[bi];
  const bool first = b.contributions[slot]++ == 0;
  if (b.launched) {  // the buffer is being summed: take this one from .grad after backward
    b.late = true;
    return;
  }
  const at::Tensor& p = params_[b.params[slot]];
  b.buffer.narrow(0, b.offsets[slot], p.numel()).view(p.sizes()).add_(g.to(at::kFloat));
  if (first && b.expected[slot]) --b.waiting;
  launch_ready();
}

void GradientSync::launch(Bucket& b) {
  // NCCL sums a GPU bucket where it is; Gloo sums host memory, so without NCCL a GPU bucket
  // goes over in one copy when it is complete.
  b.summed = group_.in_place(b.buffer) ? b.buffer : b.buffer.to(at::kCPU);
  b.wait = group_.all_reduce_sum_async(b.summed);
  b.launched = true;
}

void GradientSync::launch_ready() {
  while (next_ < buckets_.size() && buckets_[next_].waiting == 0) {
    launch(buckets_[next_++]);
    ++launched_early_;
  }
}

void GradientSync::finish() {
  in_backward_ = false;
  // Next step, a bucket does not wait for parameters that got no gradient in this one (the
  // confidence head trains every few steps); should one get a gradient after all, its bucket
  // is late and summed again. Every rank sees the same graph, so the same expectations.
  for (Bucket& b : buckets_)
    for (size_t slot = 0; slot < b.params.size(); ++slot) b.expected[slot] = b.contributions[slot] > 0;
  for (; next_ < buckets_.size(); ++next_) launch(buckets_[next_]);
  for (Bucket& b : buckets_) b.wait();
  for (Bucket& b : buckets_) {
    if (!b.late) continue;
    // The complete local sums, in the same flat layout, summed again (same on every rank).
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const at::Tensor& p = params_[b.params[slot]];
      at::Tensor dst = b.summed.narrow(0, b.offsets[slot], p.numel());
      if (p.grad().defined()) dst.copy_(p.grad().reshape({-1}));
      else dst.zero_();
    }
    group_.all_reduce_sum_async(b.summed)();
  }
  for (Bucket& b : buckets_) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      at::Tensor& p = params_[b.params[slot]];
      const at::Tensor sum = b.summed.narrow(0, b.offsets[slot], p.numel()).view(p.sizes()).div_(divisors_[b.params[slot]]);
      at::Tensor& g = p.mutable_grad();
      // A copy, not a view of the bucket: the optimiser's zero_grad detaches .grad in place.
      if (g.defined()) g.copy_(sum);
      else g = sum.to(p.options(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
}

}  // namespace megafold::dist
