#pragma once
// The dropout mask's bits, the same on the host and in a kernel: element `counter` of the
// stream `key` is the splitmix64 output at that position (Steele, Lea & Flood 2014; each
// output is the 64-bit finaliser of key + (counter + 1) * golden gamma), and its top 24 bits
// are a uniform draw u in [0, 1) on a 2^-24 grid, exact in fp32. Kept when u >= rate.
#include <cstdint>

#ifdef __CUDACC__
#define MF_DROPOUT_HD __host__ __device__ __forceinline__
#else
#define MF_DROPOUT_HD inline
#endif

namespace megafold::ops {

MF_DROPOUT_HD float dropout_uniform(uint64_t key, uint64_t counter) {
  uint64_t z = key + (counter + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

MF_DROPOUT_HD float dropout_keep(uint64_t key, uint64_t counter, float rate, float keep_scale) {
  return dropout_uniform(key, counter) >= rate ? keep_scale : 0.0f;
}

}  // namespace megafold::ops

#undef MF_DROPOUT_HD
