#pragma once
// Element types at the CUDA kernels' boundaries (plain C++, so .cu files need no ATen).
namespace megafold::ops::cuda {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

}  // namespace megafold::ops::cuda
