#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace megafold {

void parallel_for(size_t n, const std::function<void(size_t i)>& work, const std::function<void(size_t done)>& progress) {
  std::atomic<size_t> next{0}, done{0};
  auto worker = [&](bool reporter) {
    auto last = std::chrono::steady_clock::now();
    for (size_t i = next++; i < n; i = next++) {
      work(i);
      ++done;
      if (!reporter || !progress) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now - last > std::chrono::seconds(5)) {
        last = now;
        progress(done);
      }
    }
  };
  const size_t jobs = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), std::max<size_t>(n, 1));
  std::vector<std::thread> threads;
  for (size_t j = 1; j < jobs; ++j) threads.emplace_back(worker, false);
  worker(true);
  for (std::thread& t : threads) t.join();
}

}  // namespace megafold
