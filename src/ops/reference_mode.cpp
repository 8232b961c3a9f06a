#include "ops/reference_mode.h"

#include <atomic>

namespace megafold::ops {
namespace {
std::atomic<bool> g_reference_only{false};
std::atomic<bool> g_portable_only{false};
}  // namespace

bool reference_only() { return g_reference_only.load(std::memory_order_relaxed); }
void set_reference_only(bool on) { g_reference_only.store(on, std::memory_order_relaxed); }
bool portable_kernels_only() { return g_portable_only.load(std::memory_order_relaxed); }
void set_portable_kernels_only(bool on) { g_portable_only.store(on, std::memory_order_relaxed); }

}  // namespace megafold::ops
