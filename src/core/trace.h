#pragma once
// A timeline of host operators and device kernels (PyTorch's Kineto profiler), saved as a Chrome
// trace: where a step's GPU waits for the host, which the step's event timings cannot show.
// bench/trace_gaps.py summarises one (idle time between kernels and the host work under it).
#include <c10/core/Device.h>

#include <string>

namespace megafold {

class Trace {
 public:
  // Starts recording host operators, and on a GPU its kernels and copies.
  explicit Trace(const c10::Device& device);
  ~Trace();  // stops recording if save() was not reached
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;
  // Stops recording and writes the Chrome trace (JSON) to path, through a temporary file.
  void save(const std::string& path);

 private:
  bool active_ = false;
};

}  // namespace megafold
