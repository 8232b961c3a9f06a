#pragma once
// Sums of partials in a fixed order (the ops' deterministic reductions: chunk partials added
// in chunk order, so the bits depend on the shape only), with several loads in flight: one
// load at a time, every add waited out a load's latency, and the reductions ran at a third of
// the bandwidth their bytes allow.

#include <cstdint>

namespace megafold::ops::cuda {

// p[0] + p[stride] + ... + p[(n - 1) * stride], added in that order (no other term, not even a
// zero, enters the sum), kAhead loads issued before their adds.
template <int kAhead = 4>
__device__ __forceinline__ float ordered_sum(const float* p, int64_t n, int64_t stride) {
  float s = 0.f;
  for (int64_t k0 = 0; k0 < n; k0 += kAhead) {
    float v[kAhead];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) v[k] = k0 + k < n ? p[(k0 + k) * stride] : 0.f;
#pragma unroll
    for (int k = 0; k < kAhead; ++k)
      if (k0 + k < n) s += v[k];
  }
  return s;
}

}  // namespace megafold::ops::cuda
