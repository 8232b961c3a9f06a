#pragma once
// Process-wide switch that sends every op to its ATen reference even where a CUDA kernel is
// registered: the "before" of a kernel's before/after measurement, and a way to tell a
// kernel's numerics from the model's. Process-wide, not thread-local, because backward and
// checkpoint recomputation run ops on autograd's threads.
namespace megafold::ops {

bool reference_only();
void set_reference_only(bool on);

// Process-wide switch that keeps ops on their portable kernels (mma.sync, sm_80 and later) on
// a GPU that has kernels of its own generation (the sm_90a TMA + wgmma ones): so that the
// kernels A100/L40S/RTX users run are tested, and can be compared, on an H100/H200.
bool portable_kernels_only();
void set_portable_kernels_only(bool on);

}  // namespace megafold::ops
