#pragma once
// The process group of a job over c10d: the ranks from the usual launch variables, the
// collectives of the gradient all-reduce (dist/grad_sync.h) and of pair sharding (dist/shard.h).
// Gloo carries host tensors and values. A job on GPUs adds NCCL (CUDA builds), which carries
// CUDA tensors where they are, ordered on the current stream; without it they are staged
// through host memory for Gloo.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace megafold::dist {

struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; else Slurm's SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID (MASTER_ADDR and MASTER_PORT still name the rendezvous); else a
// single process. getenv: the variable lookup (std::getenv by default; tests pass their own).
// Throws megafold::Error naming the variable that is malformed or out of range.
DistEnv dist_env(const std::function<std::optional<std::string>(const std::string&)>& getenv = {});

// The process group of a job; every rank constructs it (rank 0 hosts the rendezvous store).
class ProcessGroup {
 public:
  // device: this rank's device; a CUDA device adds the NCCL group.
  explicit ProcessGroup(const DistEnv& env, c10::Device device = c10::kCPU);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  // "NCCL" when CUDA tensors go through NCCL, else "Gloo".
  std::string backend() const;
  // Whether x's collectives run on x itself (a host tensor over Gloo, a CUDA tensor over NCCL)
  // rather than on a host copy.
  bool in_place(const at::Tensor& x) const;
  // The ranks in consecutive groups of `size` (world / size groups; rank r in group r / size
  // as rank r % size), each a process group of its own. Every rank must call it.
  std::unique_ptr<ProcessGroup> split(int size);

  // Starts summing x (contiguous, in_place(x)) over the ranks in place; the returned function
  // waits for it (for NCCL: orders the current stream after it). x must not be touched until
  // then. (GradientSync, dist/grad_sync.h, uses it.)
  std::function<void()> all_reduce_sum_async(const at::Tensor& x);
  // The mean of v over the ranks.
  double average(double v);
  // x from every rank, in rank order (same shape on every rank). Result on x's device.
  std::vector<at::Tensor> all_gather(const at::Tensor& x);
  // x: [world, ...]; slice p goes to rank p. Returns [world, ...] whose slice p came from
  // rank p. Result on x's device.
  at::Tensor all_to_all(const at::Tensor& x);
  // Sum of x over the ranks, in place.
  void all_reduce_sum(at::Tensor& x);
  // Starts sending x to rank `to` while out (x's size and dtype, x's device) is received from
  // rank `from`; every rank calls it at the same point, the (to, from) pairs forming a
  // permutation (a ring shift). x and out are dense; neither may be touched until the returned
  // function, which waits, has run. Result where out lives, staged through the host if need be.
  std::function<void()> shift_async(const at::Tensor& x, const at::Tensor& out, int to, int from);
  void barrier();

 private:
  struct Impl;
  ProcessGroup(const DistEnv& env, std::unique_ptr<Impl> impl);
  DistEnv env_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megafold::dist
