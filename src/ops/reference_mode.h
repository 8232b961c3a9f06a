#pragma once
// Process-wide switch that sends every op to its ATen reference even where a CUDA kernel is
// registered: the "before" of a kernel's before/after measurement, and a way to tell a
// kernel's numerics from the model's. Process-wide, not thread-local, because backward and
// checkpoint recomputation run ops on autograd's threads.
namespace megafold::ops {

bool reference_only();
void set_reference_only(bool on);

}  // namespace megafold::ops
