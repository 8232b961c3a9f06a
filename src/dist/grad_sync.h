#pragma once
// The gradient all-reduce of data parallelism (and of pair sharding, dist/shard.h), overlapped
// with backward. Parameters are grouped into buckets of about bucket_bytes in reverse model
// order (the order backward reaches them). A hook on every parameter adds each gradient
// contribution into its bucket's flat fp32 buffer (on the parameters' device) as autograd
// delivers it (before accumulating it into .grad, in the same order, so the local sums are the
// same numbers); a bucket is summed over the ranks asynchronously (NCCL on the GPU; Gloo from
// host memory, a GPU bucket copied over once when complete) once each of its parameters has had a contribution
// and every earlier bucket has been launched, so every rank issues the same collectives in the
// same order.
//
// A parameter can receive a further contribution after its bucket was launched (used twice, or
// accumulated again by a checkpointed block's nested backward): the bucket is then marked late,
// and after backward it is summed again from the complete local .grad. A bucket does not wait
// for parameters that had no gradient in the previous step (they would hold every later bucket
// back); if one gets a gradient after its bucket was launched, that bucket is late too.
// finish() launches what is left (parameters without a gradient this step count as zeros),
// waits, and writes sum / divisors[i] into each parameter's .grad. Every rank sees the same
// graph, so the late buckets are the same on every rank.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace megafold::dist {

class ProcessGroup;

class GradientSync {
 public:
  // divisors[i]: what parameter i's sum over the ranks is divided by (the ranks for plain data
  // parallelism).
  GradientSync(ProcessGroup& group, const std::vector<at::Tensor>& params, std::vector<double> divisors,
               int64_t bucket_bytes = int64_t{32} << 20);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before each backward: forget the previous step's contributions.
  void prepare();
  // After backward: every parameter's .grad holds its reduced gradient.
  void finish();
  // Of the last backward: buckets summed while it ran, and those summed again after it (late).
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t launched_during_backward() const { return launched_early_; }
  int64_t late_buckets() const;

 private:
  struct Bucket {
    std::vector<size_t> params;        // indices into params_
    std::vector<int64_t> offsets;      // of each in buffer
    at::Tensor buffer;                 // [sum of numels] fp32, on the parameters' device
    at::Tensor summed;                 // what is summed: the buffer, or its host copy
    std::vector<int64_t> contributions;  // per parameter, this step
    std::vector<bool> expected;          // per parameter: had a gradient last step
    int64_t waiting = 0;                 // expected parameters without a contribution yet
    bool launched = false, late = false;
    std::function<void()> wait;          // of the launched sum
  };
  void on_gradient(size_t bucket, size_t slot, const at::Tensor& g);
  void launch_ready();
  void launch(Bucket& b);

  ProcessGroup& group_;
  std::vector<at::Tensor> params_;
  std::vector<double> divisors_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;
  size_t next_ = 0;  // the next bucket to launch
  int64_t launched_early_ = 0;
  bool in_backward_ = false;
};

}  // namespace megafold::dist
