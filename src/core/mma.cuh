#pragma once
// Warp-level tensor-core pieces for sm_80+ kernels: mma.sync m16n8k16 with fp16/bf16 inputs
// and fp32 accumulation, 16-bit scalar, pair and 8-vector conversions, fp32-or-16-bit row
// access, the warp sum, the ldmatrix transpose load and cp.async.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and
// t = lane % 4; each 32-bit register holds two consecutive 16-bit elements, lower column first:
//   A 16x16 (row major): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B 16x8  (k x n):     b0 = (2t..2t+1, g)  b1 = (2t+8..2t+9, g)
//   C 16x8  (fp32):      c0, c1 = (g, 2t..2t+1)   c2, c3 = (g+8, 2t..2t+1)
// Two C tiles side by side (columns 0..15) are exactly one A fragment of a 16x16 operand once
// packed, which is how attention kernels feed probabilities into the next product without
// going through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace megafold::mma {

// One 16-bit value to and from fp32 (round to nearest even), for element-wise kernels.
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t x);

template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t x) {
  return __half22float2(*reinterpret_cast<const __half2*>(&x));
}

template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t x) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
}

// Rows of fp32 or 16-bit activations read and written as fp32: 4 or 2 consecutive values
// through one aligned access (16 / 8 bytes for fp32, 8 / 4 for 16-bit).
template <typename Tin>
__device__ __forceinline__ float4 load4(const Tin* p) {
  if constexpr (std::is_same_v<Tin, float>) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 r = *reinterpret_cast<const uint2*>(p);
    const float2 a = unpack2<Tin>(r.x), b = unpack2<Tin>(r.y);
    return make_float4(a.x, a.y, b.x, b.y);
  }
}

template <typename Tin>
__device__ __forceinline__ float2 load2(const Tin* p) {
  if constexpr (std::is_same_v<Tin, float>) return *reinterpret_cast<const float2*>(p);
  else return unpack2<Tin>(*reinterpret_cast<const uint32_t*>(p));
}

template <typename Tin>
__device__ __forceinline__ void store2(Tin* p, float a, float b) {
  if constexpr (std::is_same_v<Tin, float>) *reinterpret_cast<float2*>(p) = make_float2(a, b);
  else *reinterpret_cast<uint32_t*>(p) = pack2<Tin>(a, b);
}

template <typename Tin>
__device__ __forceinline__ void store4(Tin* p, float a, float b, float c, float d) {
  if constexpr (std::is_same_v<Tin, float>) *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
  else *reinterpret_cast<uint2*>(p) = make_uint2(pack2<Tin>(a, b), pack2<Tin>(c, d));
}

// Sum over the 32 lanes of a warp (every lane gets it; a fixed butterfly order).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// kVec consecutive values through one aligned access of kVec * sizeof(T) bytes (2 to 16: a
// 16-byte vector for eight 16-bit values, the value itself for kVec = 1); the address must be
// aligned to that size.
template <int kBytes>
struct Word;
template <>
struct Word<16> { using type = uint4; };
template <>
struct Word<8> { using type = uint2; };
template <>
struct Word<4> { using type = uint32_t; };
template <>
struct Word<2> { using type = uint16_t; };

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> load_pack(const T* p) {
  using W = typename Word<sizeof(T) * kVec>::type;
  Pack<T, kVec> r;
  *reinterpret_cast<W*>(r.v) = *reinterpret_cast<const W*>(p);
  return r;
}
template <typename T, int kVec>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, kVec>& x) {
  using W = typename Word<sizeof(T) * kVec>::type;
  *reinterpret_cast<W*>(p) = *reinterpret_cast<const W*>(x.v);
}

// c += a * b for one 16x8x16 tile.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 tiles from shared memory; lane l gives the address of row l % 8 of tile l / 8
// (16-byte aligned). Lane (g, t) receives elements [g][2t] and [g][2t+1] of each tile: an A
// fragment, or a B fragment of a matrix stored n-major (B[k][n] at row n, column k).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four transposed 8x8 tiles from shared memory; lane l gives the address of row l % 8 of
// tile l / 8 (16-byte aligned). Lane (g, t) receives elements [2t][g] and [2t+1][g] of each
// tile, i.e. a B fragment of a matrix stored k-major (B[k][n] at row k, column n).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two transposed 8x8 tiles (lanes 0-15 give the row addresses, as for ldmatrix_x4_trans):
// one B fragment (b0, b1) of a k-major 16x8 block.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row_address) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// Asynchronous global -> shared copies (cp.async, sm_80+): `bytes` bytes when valid, zeros
// otherwise (src is then not read). Groups are committed and awaited explicitly.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// 2^x on the special-function unit (the softmax is computed in base 2).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace megafold::mma
