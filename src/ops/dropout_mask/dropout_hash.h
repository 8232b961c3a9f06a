#pragma once
// The dropout mask's bits, the same on the host and in a kernel: element `counter` of the
// stream `key` is the splitmix64 output at that position (the finaliser of key + (counter + 1)
// * gamma, core/seed.h), and its top 24 bits are a uniform draw u in [0, 1) on a 2^-24 grid,
// exact in fp32. Kept when u >= rate.
#include <cstdint>

#include "core/host_device.h"
#include "core/seed.h"

namespace megafold::ops {

// Element (b, l, k) of a [B, L, c] mask that is rows [first, first + L) of [B, L_total, c].
MF_HOST_DEVICE uint64_t dropout_counter(int64_t b, int64_t l, int64_t k, int64_t L_total, int64_t first, int64_t c) {
  return static_cast<uint64_t>((b * L_total + first + l) * c + k);
}

MF_HOST_DEVICE float dropout_keep(uint64_t key, uint64_t counter, float rate, float keep_scale) {
  const uint64_t z = splitmix64_finalise(key + (counter + 1) * kSplitmixGamma);
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  return u >= rate ? keep_scale : 0.0f;
}

}  // namespace megafold::ops
