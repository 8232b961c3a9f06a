#pragma once
// Host copies of tensors saved for backward: the block inputs that the balanced and frontier
// memory modes keep in host memory between forward and backward.
//
// On a GPU a tensor goes out to pinned host memory on a side stream as soon as it is put (after
// the compute stream has made it; the caching allocator reuses its device memory only after
// the copy), and comes back on the same side stream into memory taken on the compute stream
// when prefetch() is called, which the trunk does one block ahead of the backward that needs
// it, so both copies overlap compute; get() makes the compute stream wait for the copy.
// On the CPU the copies are plain memcpy into host buffers that the tensor allocator does not
// see, so the same code path runs (and is tested) without a GPU.
//
// Host buffers are kept per slot and reused by the next step; a slot whose previous tensor is
// still waiting for its backward (two graphs alive at once) gets a new buffer instead. A put
// that the host cannot hold (available memory below the tensor plus a margin) keeps the tensor
// where it is: offload changes where a value lives, never the value.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace megafold::model {

struct HostBuffer;
struct StreamPair;
struct CopyEvents;

// One saved tensor, on the host or (when the host had no room) still on its device.
class OffloadedTensor {
 public:
  // Starts the copy back to the device (idempotent; no-op when the tensor never left).
  void prefetch();
  // The tensor on its device, bitwise as put; waits for the copy back on the current stream.
  at::Tensor get();
  bool on_host() const { return host_ != nullptr; }
  ~OffloadedTensor();

 private:
  friend class HostStash;
  at::Tensor kept_;                    // the tensor itself when it stayed on the device
  std::shared_ptr<HostBuffer> host_;   // its bytes otherwise
  std::shared_ptr<StreamPair> streams_;
  std::vector<int64_t> sizes_;
  at::TensorOptions options_;
  int64_t bytes_ = 0;
  at::Tensor restored_;                // the device copy once prefetch() ran
  std::unique_ptr<CopyEvents> events_; // GPU: the copy back finished
};

class HostStash {
 public:
  HostStash();
  ~HostStash();
  HostStash(const HostStash&) = delete;
  HostStash& operator=(const HostStash&) = delete;

  // Starts moving t (contiguous) to the host buffer of `slot`; the returned handle restores it.
  std::shared_ptr<OffloadedTensor> put(int64_t slot, const at::Tensor& t);
  // Bytes of host buffers held (pinned on a GPU host).
  int64_t host_bytes() const;
  // Of the last puts since reset_counts(): how many went to the host, and how many stayed.
  int64_t offloaded() const { return offloaded_; }
  int64_t kept() const { return kept_; }
  void reset_counts() { offloaded_ = kept_ = 0; }

 private:
  std::shared_ptr<HostBuffer> buffer_for(int64_t slot, int64_t bytes, bool pinned);
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<HostBuffer>> slots_;
  std::shared_ptr<StreamPair> streams_;  // the side stream of each GPU used (made on first use)
  int64_t offloaded_ = 0, kept_ = 0;
};

}  // namespace megafold::model
