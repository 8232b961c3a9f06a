#pragma once
// Mixed-precision scope for one device type. Autocast keeps a process-wide cache of
// low-precision copies of fp32 leaf weights; it must be cleared when the outermost scope ends,
// or a later forward (after optimizer.step(), or with EMA weights swapped in) would reuse
// copies of old weights. Scopes nest (the trainer's forward, a recomputation in backward).
#include <ATen/autocast_mode.h>

namespace megafold {

class AutocastScope {
 public:
  AutocastScope(at::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        prev_enabled_(at::autocast::is_autocast_enabled(device)),
        prev_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, enabled);
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType device_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

}  // namespace megafold
