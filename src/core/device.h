#pragma once
// Device queries that differ between CPU-only and CUDA builds, kept out of the trainer.
#include <c10/core/Device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace megafold {

bool cuda_available();
// "auto" -> cuda:0 when available, else cpu. Errors name the value and suggest a fix.
c10::Device resolve_device(const std::string& spec);
// Makes a CUDA device the process's current one (each rank of a multi-GPU job owns one: the
// default stream, new tensors and NCCL then use it). Errors when it is not a visible GPU.
void make_current(const c10::Device& device);
void synchronize(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);
// Peak bytes: CUDA caching-allocator peak on GPU, process peak RSS on CPU.
double peak_memory_gb(const c10::Device& device);
// Time marks on a device's timeline, for timing a step as the device runs it: on a GPU, CUDA
// events recorded on the current stream, so that nothing waits between marks and the host
// runs ahead as in training (a synchronisation between forward and backward would add the
// host's time to issue the backward's first kernels); on the CPU, the host clock. Read marks
// with elapsed_ms once the device has been synchronised after the last one.
class DeviceClock {
 public:
  DeviceClock(const c10::Device& device, int marks);
  ~DeviceClock();
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;
  void mark(int i);
  double elapsed_ms(int from, int to) const;

 private:
  struct Events;
  std::unique_ptr<Events> events_;  // CUDA builds on a GPU
  std::vector<std::chrono::steady_clock::time_point> host_;
};

// One line per visible device for `megafold info`.
std::vector<std::string> describe_devices();

}  // namespace megafold
