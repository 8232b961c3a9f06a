#pragma once
// Device queries that differ between CPU-only and CUDA builds, kept out of the trainer.
#include <c10/core/Device.h>

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
// One line per visible device for `megafold info`.
std::vector<std::string> describe_devices();

}  // namespace megafold
