#pragma once
// One loop over many independent items (files to parse, entries to decode) on every core.
#include <cstddef>
#include <functional>

namespace megafold {

// Calls work(i) once for each i in [0, n), on as many threads as the machine has cores (the
// calling thread among them), in no fixed order: work writes each result to its own slot, so
// what comes out does not depend on the thread count. work must not throw. progress (may be
// empty) is called from the calling thread about every 5 s with the count of items done, for a
// line on stderr during long runs.
void parallel_for(size_t n, const std::function<void(size_t i)>& work,
                  const std::function<void(size_t done)>& progress = {});

}  // namespace megafold
