#pragma once
// Seed derivation. Every random choice in data and model code is seeded from a mix of the
// run seed and the indices that identify it (sample, step, block, site), never from a
// stateful global generator, so results do not depend on thread count, order or resume.
#include <cstdint>
#include <string_view>

#include "core/host_device.h"

namespace megafold {

// splitmix64's golden-ratio increment and its 64-bit output finaliser (Steele, Lea & Flood
// 2014); host and device (the dropout masks' kernel hashes with them too).
inline constexpr uint64_t kSplitmixGamma = 0x9E3779B97F4A7C15ull;
MF_HOST_DEVICE uint64_t splitmix64_finalise(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64 finaliser over a combination of a and b.
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  return splitmix64_finalise(a * kSplitmixGamma + b + 0x632BE59BD9B4E019ull);
}

// FNV-1a, 32 bit: a stable hash of names (used for the train/validation split).
inline uint32_t fnv1a32(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

// The 64-bit FNV-1a of s.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace megafold
