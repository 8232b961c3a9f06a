#pragma once
// c10d's NCCL process group, behind the Backend interface so that only nccl_group.cpp (CUDA
// builds) includes NCCL's headers. process_group.cpp sums, gathers and exchanges CUDA tensors
// through it in place, stream-ordered, instead of staging them through host memory for Gloo.
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace megafold::dist {

// True when this build links c10d's NCCL group (a CUDA build).
bool nccl_available();
// The NCCL group of `world` ranks over `store` for this rank's CUDA device `device`. Throws
// megafold::Error in a build without CUDA.
c10::intrusive_ptr<c10d::Backend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                             int device);

}  // namespace megafold::dist
