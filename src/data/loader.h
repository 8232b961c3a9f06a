#pragma once
// Training batches built ahead on worker threads. The batch of step k is make(k), a pure
// function of k (entry choice, crop and every other random draw are seeded by the step), so the
// sequence is identical for any number of workers, after a resume (start at the resumed step)
// and on every rank; threads only decide when a batch is ready, never what it holds.
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/features.h"

namespace megafold::data {

class BatchPrefetcher {
 public:
  using Make = std::function<Batch(int64_t step)>;
  // Steps first .. end-1; at most `depth` batches ahead of the consumer; pin: page-locked host
  // memory, so the copy to the GPU can run asynchronously.
  BatchPrefetcher(Make make, int64_t first, int64_t end, int workers, int depth, bool pin);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The batch of the next step, waiting for it if it is not built yet. A worker's error is
  // rethrown here, naming the step.
  Batch next();
  // Seconds next() has spent waiting, in total.
  double wait_seconds() const { return wait_seconds_; }

 private:
  void work();

  Make make_;
  int64_t end_, depth_;
  bool pin_;
  int64_t to_make_, to_take_;
  bool stop_ = false;
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> threads_;
  double wait_seconds_ = 0;
};

// The prefetcher's batches on a device. On a GPU each batch is copied on a side stream one step
// ahead: next() hands out the batch whose copy it issued during the previous call, makes the
// compute stream wait for that copy on the device (the host never waits), and issues the copy
// of the following batch, which then overlaps this step's compute. On the CPU it passes the
// batches through.
class DeviceBatches {
 public:
  // Takes `count` batches from `host` in all.
  DeviceBatches(BatchPrefetcher& host, const c10::Device& device, int64_t count);
  Batch next();

 private:
  void issue_copy();

  BatchPrefetcher& host_;
  c10::Device device_;
  int64_t left_;
  std::optional<c10::Stream> side_;
  std::optional<c10::Event> copied_;
  std::optional<Batch> ahead_;
};

}  // namespace megafold::data
