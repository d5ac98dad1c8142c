#include "staging.hpp"

#include <algorithm>
#include <cstring>

namespace kfuse::detail::gpu {

StagingRing::StagingRing(Hooks hooks, size_t slot_bytes, int slots)
    : hooks_(std::move(hooks)), slot_bytes_(slot_bytes), mem_(static_cast<size_t>(std::max(slots, 2)), nullptr) {}

StagingRing::~StagingRing() {
  for (size_t s = 0; s < mem_.size(); ++s)
    if (mem_[s]) hooks_.release(static_cast<int>(s), mem_[s]);
}

bool StagingRing::ready_locked() {
  if (!tried_) {
    tried_ = true;
    usable_ = true;
    for (size_t s = 0; s < mem_.size() && usable_; ++s) {
      mem_[s] = hooks_.alloc(static_cast<int>(s), slot_bytes_);
      usable_ = mem_[s] != nullptr;
    }
    if (!usable_)
      for (size_t s = 0; s < mem_.size(); ++s)
        if (mem_[s]) hooks_.release(static_cast<int>(s), std::exchange(mem_[s], nullptr));
  }
  return usable_;
}

void* StagingRing::take_slot(int s) {
  if (!hooks_.done(s)) {
    ++waits_;
    hooks_.wait(s);
  }
  return mem_[static_cast<size_t>(s)];
}

bool StagingRing::upload(const void* src, size_t bytes, const Enqueue& enqueue) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!ready_locked()) return false;
  const auto* from = static_cast<const char*>(src);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, bytes - off);
    const int s = next_;
    next_ = (next_ + 1) % static_cast<int>(mem_.size());
    void* host = take_slot(s);
    std::memcpy(host, from + off, n);
    enqueue(s, host, off, n);
  }
  return true;
}

bool StagingRing::download(void* dst, size_t bytes, const Enqueue& enqueue) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!ready_locked()) return false;
  auto* to = static_cast<char*>(dst);
  const int slots = static_cast<int>(mem_.size());
  const size_t chunks = (bytes + slot_bytes_ - 1) / slot_bytes_;
  // Keep up to every slot's copy in flight; copy chunk c out while the later ones run.
  std::vector<int> slot_of(chunks);
  size_t queued = 0;
  auto queue_next = [&] {
    const size_t off = queued * slot_bytes_;
    const int s = next_;
    next_ = (next_ + 1) % slots;
    void* host = take_slot(s);  // (an upload may still read it)
    enqueue(s, host, off, std::min(slot_bytes_, bytes - off));
    slot_of[queued++] = s;
  };
  while (queued < chunks && queued < static_cast<size_t>(slots)) queue_next();
  for (size_t c = 0; c < chunks; ++c) {
    const int s = slot_of[c];
    hooks_.wait(s);  // (the download's own wait: its caller reads the values; not in waits())
    const size_t off = c * slot_bytes_;
    std::memcpy(to + off, mem_[static_cast<size_t>(s)], std::min(slot_bytes_, bytes - off));
    if (queued < chunks) queue_next();
  }
  return true;
}

uint64_t StagingRing::waits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return waits_;
}

}  // namespace kfuse::detail::gpu
