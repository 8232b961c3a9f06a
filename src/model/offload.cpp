#include "model/offload.h"

#include <ATen/ops/empty.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "core/memory.h"

#ifdef MEGAFOLD_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace megafold::model {

// Host memory left free for the process and its loader threads when deciding whether a put fits.
constexpr int64_t kHostMargin = int64_t{8} << 30;

struct HostBuffer {
  void* ptr = nullptr;
  int64_t bytes = 0;
  bool pinned = false;
  ~HostBuffer() {
#ifdef MEGAFOLD_CUDA
    if (pinned) {
      cudaFreeHost(ptr);  // no throw from a destructor; a failure here only leaks
      return;
    }
#endif
    std::free(ptr);
  }
};

// The copies' side stream and their ordering events (GPU only).
struct StreamPair {
#ifdef MEGAFOLD_CUDA
  std::optional<c10::cuda::CUDAStream> side;
#endif
};

struct CopyEvents {
#ifdef MEGAFOLD_CUDA
  c10::cuda::CUDAEvent in{cudaEventDisableTiming};
#endif
};

OffloadedTensor::~OffloadedTensor() = default;

void OffloadedTensor::prefetch() {
  if (!host_ || restored_.defined()) return;
  const int64_t bytes = bytes_;
#ifdef MEGAFOLD_CUDA
  if (options_.device().is_cuda()) {
    const c10::cuda::CUDAGuard guard(options_.device());
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = *streams_->side;
    // Memory taken on the compute stream; the side stream starts after everything queued there
    // so far (earlier users of that memory), and after the copy out (queued before on it).
    restored_ = at::empty(sizes_, options_);
    c10::cuda::CUDAEvent taken(cudaEventDisableTiming);
    taken.record(compute);
    taken.block(side);
    MF_CUDA_CHECK(cudaMemcpyAsync(restored_.data_ptr(), host_->ptr, bytes, cudaMemcpyHostToDevice, side.stream()));
    events_->in.record(side);
    c10::cuda::CUDACachingAllocator::recordStream(restored_.storage().data_ptr(), side);
    return;
  }
#endif
  restored_ = at::empty(sizes_, options_);
  std::memcpy(restored_.data_ptr(), host_->ptr, static_cast<size_t>(bytes));
}

at::Tensor OffloadedTensor::get() {
  if (!host_) return kept_;
  prefetch();
#ifdef MEGAFOLD_CUDA
  if (options_.device().is_cuda()) {
    const c10::cuda::CUDAGuard guard(options_.device());
    events_->in.block(c10::cuda::getCurrentCUDAStream());
  }
#endif
  at::Tensor t = std::move(restored_);
  restored_ = at::Tensor();
  return t;
}

HostStash::HostStash() : streams_(std::make_shared<StreamPair>()) {}
HostStash::~HostStash() = default;

int64_t HostStash::host_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& b : slots_) n += b ? b->bytes : 0;
  return n;
}

std::shared_ptr<HostBuffer> HostStash::buffer_for(int64_t slot, int64_t bytes, bool pinned) {
  if (static_cast<int64_t>(slots_.size()) <= slot) slots_.resize(slot + 1);
  std::shared_ptr<HostBuffer>& b = slots_[slot];
  // Reusable when big enough and no earlier tensor still lives in it (its backward not run).
  if (b && b->bytes >= bytes && b->pinned == pinned && b.use_count() == 1) return b;
  const int64_t freed = b && b.use_count() == 1 ? b->bytes : 0;
  if (host_available_memory() + freed < bytes + kHostMargin) return nullptr;
  b.reset();
  auto fresh = std::make_shared<HostBuffer>();
  fresh->bytes = bytes;
  fresh->pinned = pinned;
#ifdef MEGAFOLD_CUDA
  if (pinned) {
    if (cudaHostAlloc(&fresh->ptr, static_cast<size_t>(bytes), cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();  // a refused pinning keeps the tensor on the device instead
      fresh->ptr = nullptr;
      fresh->pinned = false;
      return nullptr;
    }
    b = fresh;
    return b;
  }
#endif
  fresh->ptr = std::malloc(static_cast<size_t>(bytes));
  if (fresh->ptr == nullptr) return nullptr;
  b = fresh;
  return b;
}

std::shared_ptr<OffloadedTensor> HostStash::put(int64_t slot, const at::Tensor& t) {
  MF_CHECK(slot >= 0, "HostStash::put: slot must be >= 0, got ", slot);
  MF_CHECK(t.is_contiguous(), "HostStash::put: the tensor must be contiguous");
  auto h = std::shared_ptr<OffloadedTensor>(new OffloadedTensor());
  h->sizes_ = t.sizes().vec();
  h->options_ = t.options();
  h->streams_ = streams_;
  const bool gpu = t.is_cuda();
  std::shared_ptr<HostBuffer> buf;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    buf = buffer_for(slot, static_cast<int64_t>(t.nbytes()), gpu);
    ++(buf ? offloaded_ : kept_);
  }
  if (!buf) {
    h->kept_ = t;
    return h;
  }
  h->host_ = buf;
  // A smaller tensor in a larger (reused) buffer copies only its own bytes.
  const auto bytes = static_cast<int64_t>(t.nbytes());
  h->bytes_ = bytes;
  h->events_ = std::make_unique<CopyEvents>();
#ifdef MEGAFOLD_CUDA
  if (gpu) {
    const c10::cuda::CUDAGuard guard(t.device());
    if (!streams_->side) streams_->side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, t.device().index());
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = *streams_->side;
    c10::cuda::CUDAEvent made(cudaEventDisableTiming);
    made.record(compute);
    made.block(side);
    // The copy back is queued on the same side stream, so it follows this copy out.
    MF_CUDA_CHECK(cudaMemcpyAsync(buf->ptr, t.data_ptr(), bytes, cudaMemcpyDeviceToHost, side.stream()));
    // The device memory goes back to the allocator when t is dropped, but is reused only after
    // the side stream has read it.
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), side);
    return h;
  }
#endif
  std::memcpy(buf->ptr, t.data_ptr(), static_cast<size_t>(bytes));
  return h;
}

}  // namespace megafold::model
