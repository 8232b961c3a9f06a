#pragma once
// Functions that compile for the host and, in CUDA sources, for the device too: arithmetic whose
// bits the CPU and the GPU must share (the seed and dropout hashes).
#ifdef __CUDACC__
#define MF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MF_HOST_DEVICE inline
#endif
