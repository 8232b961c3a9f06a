#include "core/device.h"

#include <sys/resource.h>

#include <sstream>
#include <thread>

#include "core/check.h"

#ifdef MEGAFOLD_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace megafold {

bool cuda_available() {
#ifdef MEGAFOLD_CUDA
  return c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

c10::Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  c10::Device d(c10::kCPU);
  try {
    d = c10::Device(spec);
  } catch (const std::exception&) {
    throw Error("device '" + spec + "' is not valid; use auto, cpu, cuda or cuda:N");
  }
  if (d.is_cuda()) {
    MF_CHECK(cuda_available(), "device '", spec, "' requested but no CUDA device is usable",
             " (this build ", (
#ifdef MEGAFOLD_CUDA
                 "has CUDA support"
#else
                 "is CPU-only"
#endif
                 ), "); use --device cpu");
    if (!d.has_index()) d = c10::Device(c10::kCUDA, 0);
  }
  return d;
}

void make_current(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (!device.is_cuda()) return;
  MF_CHECK(device.index() < c10::cuda::device_count(), "device ", device.str(), " is not a visible GPU (",
           static_cast<int>(c10::cuda::device_count()), " visible; LOCAL_RANK picks a rank's GPU)");
  c10::cuda::set_device(device.index());
#endif
}

void synchronize(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
}

struct DeviceClock::Events {
#ifdef MEGAFOLD_CUDA
  std::vector<cudaEvent_t> marks;
#endif
};

DeviceClock::DeviceClock(const c10::Device& device, int marks) : host_(static_cast<size_t>(marks)) {
#ifdef MEGAFOLD_CUDA
  if (!device.is_cuda()) return;
  events_ = std::make_unique<Events>();
  for (int i = 0; i < marks; ++i) {
    cudaEvent_t e = nullptr;
    MF_CHECK(cudaEventCreate(&e) == cudaSuccess, "DeviceClock: cudaEventCreate failed");
    events_->marks.push_back(e);
  }
#else
  (void)device;
#endif
}

DeviceClock::~DeviceClock() {
#ifdef MEGAFOLD_CUDA
  if (events_)
    for (cudaEvent_t e : events_->marks) cudaEventDestroy(e);
#endif
}

void DeviceClock::mark(int i) {
#ifdef MEGAFOLD_CUDA
  if (events_) {
    MF_CHECK(cudaEventRecord(events_->marks.at(static_cast<size_t>(i)), c10::cuda::getCurrentCUDAStream()) ==
                 cudaSuccess,
             "DeviceClock: cudaEventRecord failed");
    return;
  }
#endif
  host_.at(static_cast<size_t>(i)) = std::chrono::steady_clock::now();
}

double DeviceClock::elapsed_ms(int from, int to) const {
#ifdef MEGAFOLD_CUDA
  if (events_) {
    float ms = 0.f;
    MF_CHECK(cudaEventElapsedTime(&ms, events_->marks.at(static_cast<size_t>(from)),
                                  events_->marks.at(static_cast<size_t>(to))) == cudaSuccess,
             "DeviceClock: cudaEventElapsedTime failed (marks not recorded, or the device not synchronised)");
    return ms;
  }
#endif
  return std::chrono::duration<double, std::milli>(host_.at(static_cast<size_t>(to)) -
                                                   host_.at(static_cast<size_t>(from)))
      .count();
}

void reset_peak_memory(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

double peak_memory_gb(const c10::Device& device) {
#ifdef MEGAFOLD_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
    return static_cast<double>(peak) / 1e9;
  }
#endif
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB on Linux
}

std::vector<std::string> describe_devices() {
  std::vector<std::string> lines;
  std::ostringstream cpu;
  cpu << "cpu: " << std::thread::hardware_concurrency() << " hardware threads";
  lines.push_back(cpu.str());
#ifdef MEGAFOLD_CUDA
  const int n = c10::cuda::device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    std::ostringstream os;
    os << "cuda:" << i << ": " << prop.name << ", sm_" << prop.major << prop.minor << ", "
       << prop.multiProcessorCount << " SMs, " << static_cast<double>(prop.totalGlobalMem) / 1e9
       << " GB";
    lines.push_back(os.str());
  }
  if (n == 0) lines.push_back("cuda: built with CUDA, no device visible");
#else
  lines.push_back("cuda: not in this build (CPU-only)");
#endif
  return lines;
}

}  // namespace megafold
