#pragma once
// Bytes that tensors hold on a device, for the memory profile, the memory modes' tests and
// the offload's placement. On a GPU these are the CUDA caching allocator's counters (bytes in
// live tensors, not the allocator's reserve). On the CPU libtorch keeps no counters, so
// track_cpu_allocations() installs a counting allocator in front of the default one; only
// tensors allocated after that call are counted (their frees are counted too, wherever they
// happen).
#include <c10/core/Device.h>

#include <cstdint>

namespace megafold {

struct MemoryStats {
  int64_t allocated = 0;  // bytes in live tensors now
  int64_t peak = 0;       // the most since the last reset_peak_memory
};

// Idempotent; call before the tensors to be measured are made (the CLI calls it at start).
void track_cpu_allocations();
MemoryStats memory_stats(const c10::Device& device);
void reset_peak_memory_stats(const c10::Device& device);
// Bytes a new allocation could still take on a GPU (the driver's free memory plus what the
// caching allocator holds unused); on the CPU, the host's available memory.
int64_t available_memory(const c10::Device& device);
// The host's memory available to new allocations (MemAvailable), in bytes.
int64_t host_available_memory();

}  // namespace megafold
