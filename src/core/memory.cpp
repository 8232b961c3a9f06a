#include "core/memory.h"

#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <string>

#ifdef MEGAFOLD_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace megafold {
namespace {

std::atomic<int64_t> g_cpu_allocated{0}, g_cpu_peak{0};

// The default CPU allocator with a header of kHeader bytes in front of each allocation that
// records its size, so a free subtracts what its allocation added. Data and context stay the
// same pointer, so the raw allocate/deallocate interface keeps working (some kernels use it);
// the header keeps the default allocator's 64-byte alignment.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    auto* base = static_cast<unsigned char*>(inner_->raw_allocate(n + kHeader));
    *reinterpret_cast<size_t*>(base) = n;
    const int64_t now = g_cpu_allocated += static_cast<int64_t>(n);
    int64_t peak = g_cpu_peak.load();
    while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now)) {
    }
    void* data = base + kHeader;
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  static constexpr size_t kHeader = 64;
  static void release(void* data) {
    if (data == nullptr) return;
    auto* base = static_cast<unsigned char*>(data) - kHeader;
    g_cpu_allocated -= static_cast<int64_t>(*reinterpret_cast<size_t*>(base));
    c10::GetDefaultCPUAllocator()->raw_deallocate(base);
  }
  c10::Allocator* inner_;
};

}  // namespace

void track_cpu_allocations() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Owned by c10 from here on (SetCPUAllocator takes the pointer for the process's lifetime).
    c10::SetCPUAllocator(new CountingCpuAllocator(c10::GetDefaultCPUAllocator()), /*priority=*/1);
  });
}

MemoryStats memory_stats(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& a = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return {a.current, a.peak};
  }
#endif
  return {g_cpu_allocated.load(), g_cpu_peak.load()};
}

void reset_peak_memory_stats(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  g_cpu_peak = g_cpu_allocated.load();
}

int64_t host_available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

int64_t available_memory(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAGuard guard(device.index());
    size_t free = 0, total = 0;
    MF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return static_cast<int64_t>(free) + stats.reserved_bytes[agg].current - stats.allocated_bytes[agg].current;
  }
#endif
  return host_available_memory();
}

}  // namespace megafold
