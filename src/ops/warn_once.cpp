#include "ops/warn_once.h"

#include <iostream>
#include <mutex>
#include <set>

namespace megafold::ops {

void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!seen.insert(key).second) return;
  std::cerr << "warning: " << message << "\n";
}

}  // namespace megafold::ops
