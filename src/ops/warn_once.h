#pragma once
// One line on stderr the first time each key is seen in this process: for inputs that leave a
// fast path (a shape without a kernel, a GPU the kernels were not built for), so that a user
// sees why an op is slow without a flood of repeats. Plain C++, usable from .cu files.
#include <string>

namespace megafold::ops {

void warn_once(const std::string& key, const std::string& message);

}  // namespace megafold::ops
