// Host side of the sm_90a kernels (see sm90.h).
#include "ops/hopper/sm90.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "core/check.h"
#include "core/cuda_check.h"
#include "ops/reference_mode.h"
#include "ops/warn_once.h"

namespace megafold::ops::sm90 {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, found at run time (the library links only the runtime).
EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MF_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    MF_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr, "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

}  // namespace

bool kernels_built() {
#if defined(MEGAFOLD_HAVE_SM90A)
  return true;
#else
  return false;
#endif
}

bool runs_on(int major, int minor) { return kernels_built() && major == 9 && minor == 0 && !portable_kernels_only(); }

CUtensorMapDataType map_type(cuda::DType t) {
  switch (t) {
    case cuda::DType::kBFloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case cuda::DType::kFloat16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case cuda::DType::kFloat32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
}

CUtensorMap tensor_map(CUtensorMapDataType type, int rank, const void* ptr, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle, const char* what) {
  CUtensorMap map{};
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], unit[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    unit[i] = 1;
    if (i + 1 < rank) s[i] = strides[i];
  }
  auto encode = [&] {
    return encoder()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(ptr), d, s, b, unit,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  CUresult res = encode();
  if (res == CUDA_ERROR_INVALID_CONTEXT) {
    // A thread that has not yet used the runtime (autograd's device threads, seen under Nsight
    // Compute) has no current context for the driver call: the runtime makes the current
    // device's primary context current, then the encoding is retried.
    MF_CUDA_CHECK(cudaFree(nullptr));
    res = encode();
  }
  if (res != CUDA_SUCCESS) {
    std::string shape;
    for (int i = rank - 1; i >= 0; --i) shape += std::to_string(dims[i]) + (i > 0 ? " x " : "");
    MF_CHECK(false, "cannot describe ", what, " (", shape, ") for TMA: driver error ", static_cast<int>(res));
  }
  return map;
}

CUtensorMap rows_map(cuda::DType dtype, const void* ptr, int64_t rows, int64_t cols, const char* what) {
  const uint64_t dims[2] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  const uint64_t strides[1] = {static_cast<uint64_t>(cols) * 2};
  const uint32_t box[2] = {64, 64};
  return tensor_map(map_type(dtype), 2, ptr, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

void check_blocks_per_sm(const char* op, const char* name, const void* kernel, int threads, int smem, int want) {
  static std::mutex mutex;
  static std::set<const void*> checked;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!checked.insert(kernel).second) return;
  }
  int resident = 0;
  MF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, smem));
  if (resident < want)
    warn_once(std::string(op) + name, std::string(op) + ": the " + name + " fits " + std::to_string(resident) +
                                          " block(s) per SM, not the " + std::to_string(want) +
                                          " its tiles assume; it runs slower");
}

void check_rows_aligned(const char* op, const char* what, const void* ptr) {
  MF_CHECK(reinterpret_cast<uintptr_t>(ptr) % 16 == 0, op, ": ", what, " must be 16-byte aligned for the sm_90a kernels");
}

unsigned persistent_blocks(int64_t tiles, int blocks_per_sm) {
  int device = 0, sms = 0;
  MF_CUDA_CHECK(cudaGetDevice(&device));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{sms} * blocks_per_sm));
}

}  // namespace megafold::ops::sm90
