// Host <-> device copies through a ring of staging buffers in page-locked ("pinned") host
// memory, shared by the GPU backends (the CUDA driver's cuMemHostAlloc; an OpenCL
// CL_MEM_ALLOC_HOST_PTR buffer mapped once). Why:
//  - an upload copies the caller's bytes into a slot and queues the device copy from it, then
//    returns: the caller may free its memory at once, and the copy overlaps the work queued
//    before it and the host's next steps (no host wait, where a copy from pageable memory had to
//    wait for the device);
//  - a large copy goes in slot-sized chunks, so the host's memcpy of one chunk overlaps the
//    device copy of the previous one (in both directions);
//  - DMA from pinned memory runs at the link's speed; pageable memory is staged by the driver.
// Each slot carries a fence: the device's completion marker of the last copy that used it (a
// CUevent, a cl_event). A slot is reused only once its fence has passed; waiting for one is the
// only host wait of an upload, and it happens only when a copy is still in flight a whole ring
// later. Thread-safe: one copy at a time per ring (the device's queue orders them anyway).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace kfuse::detail::gpu {

class StagingRing {
 public:
  struct Hooks {
    /// `bytes` of pinned host memory for slot `slot`, or null when the driver has none to give
    /// (the ring is then unusable and copies take the backend's direct path).
    std::function<void*(int slot, size_t bytes)> alloc;
    std::function<void(int slot, void* p)> release;
    /// True when the slot's last copy has completed (no wait); a slot never used is done.
    std::function<bool(int slot)> done;
    /// Blocks until the slot's last copy has completed.
    std::function<void(int slot)> wait;
  };
  /// `enqueue(slot, host, offset, n)`: queue the device copy of n bytes at byte `offset` of the
  /// transfer from/to the staging memory `host`, and make it the slot's fence.
  using Enqueue = std::function<void(int slot, void* host, size_t offset, size_t n)>;

  StagingRing(Hooks hooks, size_t slot_bytes, int slots);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  /// Copies `bytes` from `src` into staging chunk by chunk, calling `enqueue` for each; returns
  /// once all are queued (without waiting for them). False, having done nothing, when the ring
  /// has no pinned memory.
  bool upload(const void* src, size_t bytes, const Enqueue& enqueue);
  /// Queues device -> staging copies chunk by chunk and copies each into `dst` once its fence
  /// has passed; returns when `dst` holds every byte. False, having done nothing, when the ring
  /// has no pinned memory.
  bool download(void* dst, size_t bytes, const Enqueue& enqueue);

  /// Host waits so far for a slot whose earlier copy was still in flight (the waits an upload
  /// can make; a download's wait for its own chunks is not counted here).
  uint64_t waits() const;
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  bool ready_locked();     // pinned memory present (allocated on first use)
  void* take_slot(int s);  // the slot's memory once its fence has passed (counts a wait)

  Hooks hooks_;
  size_t slot_bytes_;
  std::vector<void*> mem_;
  int next_ = 0;
  bool tried_ = false, usable_ = false;
  uint64_t waits_ = 0;
  mutable std::mutex mu_;
};

}  // namespace kfuse::detail::gpu
