#include "data/loader.h"

#include <chrono>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "core/check.h"

namespace megafold::data {

BatchPrefetcher::BatchPrefetcher(Make make, int64_t first, int64_t end, int workers, int depth, bool pin)
    : make_(std::move(make)), end_(end), depth_(depth), pin_(pin), to_make_(first), to_take_(first) {
  MF_CHECK(workers >= 1 && depth >= 1, "BatchPrefetcher: workers and depth must be >= 1, got ", workers, " and ", depth);
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void BatchPrefetcher::work() {
  for (;;) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || (to_make_ < end_ && to_make_ < to_take_ + depth_); });
      if (stop_) return;
      step = to_make_++;
    }
    Batch b;
    std::exception_ptr error;
    try {
      b = make_(step);
      if (pin_) b = b.pinned();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error)
        failed_[step] = error;
      else
        ready_[step] = std::move(b);
    }
    changed_.notify_all();
  }
}

Batch BatchPrefetcher::next() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  MF_CHECK(to_take_ < end_, "BatchPrefetcher: no step left (end ", end_, ")");
  const int64_t step = to_take_;
  changed_.wait(lock, [&] { return ready_.count(step) || failed_.count(step); });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (auto f = failed_.find(step); f != failed_.end()) {
    const std::exception_ptr error = f->second;
    failed_.erase(f);
    ++to_take_;
    lock.unlock();
    changed_.notify_all();
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& ex) {
      throw Error("batch of step " + std::to_string(step) + ": " + ex.what());
    }
  }
  Batch b = std::move(ready_.at(step));
  ready_.erase(step);
  ++to_take_;
  lock.unlock();
  changed_.notify_all();
  return b;
}

DeviceBatches::DeviceBatches(BatchPrefetcher& host, const c10::Device& device, int64_t count)
    : host_(host), device_(device), left_(count) {
  if (!device_.is_cuda()) return;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  side_ = impl.getStreamFromGlobalPool(device_);
  copied_.emplace(device_.type());
}

void DeviceBatches::issue_copy() {
  const Batch host = host_.next();  // pinned: the copies below run asynchronously
  --left_;
  const c10::StreamGuard on_side(*side_);
  ahead_ = host.to(device_);
  copied_->record(*side_);
}

Batch DeviceBatches::next() {
  MF_CHECK(left_ > 0 || ahead_.has_value(), "DeviceBatches: no batch left");
  if (!device_.is_cuda()) {
    --left_;
    return host_.next();
  }
  if (!ahead_) issue_copy();
  Batch batch = std::move(*ahead_);
  ahead_.reset();
  const c10::Stream compute = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
  copied_->block(compute);
  // The side stream allocated these tensors; the allocator must not hand their memory out
  // again before the compute stream is done with them.
  for (const at::Tensor* t : batch.tensors()) t->record_stream(compute);
  if (left_ > 0) issue_copy();
  return batch;
}

}  // namespace megafold::data
