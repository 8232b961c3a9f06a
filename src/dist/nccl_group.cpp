#include "dist/nccl_group.h"

#include "core/check.h"

#ifdef MEGAFOLD_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace megafold::dist {

#ifdef MEGAFOLD_CUDA

bool nccl_available() { return true; }

c10::intrusive_ptr<c10d::Backend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                             int device) {
  // The communicator is made on the first collective, for the device of its tensors; the bound
  // device is the one barrier() and the watchdog use.
  const c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(device));
  const c10::cuda::CUDAGuard guard(d);
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, c10d::ProcessGroupNCCL::Options::create());
  group->setBoundDeviceId(d);
  return group;
}

#else

bool nccl_available() { return false; }

c10::intrusive_ptr<c10d::Backend> nccl_group(const c10::intrusive_ptr<c10d::Store>&, int, int, int) {
  throw Error("NCCL process groups need a CUDA build of megafold (this one is CPU-only)");
}

#endif

}  // namespace megafold::dist
