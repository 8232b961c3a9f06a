#include "ops/warn_once.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace megafold::ops {

// stdio, not iostreams: the op library is also loaded into Python processes.
void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!seen.insert(key).second) return;
  std::fprintf(stderr, "warning: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace megafold::ops
