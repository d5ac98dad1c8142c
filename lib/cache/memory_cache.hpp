// The in-process kernel cache: a sharded map from KernelKey to compiled kernel.
//
// - Hits take only a shared (reader) lock of one shard: no exclusive lock, no allocation.
// - Single flight: the first request for a key produces it (disk load or compile) outside every
//   lock; concurrent requests for the same key wait for that result. A producer that throws
//   hands the exception to its waiters and leaves nothing cached (the next request retries).
//   A backend's decline is deterministic for a key and is cached like a kernel.
// - LRU bounded by entries and bytes (source + binary + a fixed overhead): each hit stamps the
//   entry with the current epoch (bumped on every insert); inserting over a bound evicts the
//   oldest stamps down to 15/16 of the bound, in one scan (amortised O(1) per insert).
//   Eviction drops the cache's shared_ptr: the code is freed as soon as no plan still runs it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "cache/key.hpp"

namespace kfuse::detail::cache {

struct MemoryEntryInfo {
  std::string key, stem, backend, target;
  uint64_t bytes = 0, hits = 0;
  bool declined = false;
};

class MemoryCache {
 public:
  struct Result {
    std::shared_ptr<CompiledKernel> kernel;  ///< null: declined (see `declined`)
    std::string declined;
    bool hit = false;  ///< served without producing (a waiter of a concurrent producer counts as a hit)
  };
  using Producer = std::function<CompileResult()>;

  Result get(const KernelKey& key, const Producer& produce);
  void clear();
  void set_limits(size_t max_entries, uint64_t max_bytes);
  size_t size() const { return entries_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }
  std::vector<MemoryEntryInfo> entries() const;

 private:
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<int> state{0};  ///< 0 producing, 1 ready, 2 failed
    std::shared_ptr<CompiledKernel> kernel;
    std::string declined;
    std::exception_ptr error;
    std::atomic<uint64_t> stamp{0}, hits{0};
    uint64_t bytes = 0;
    std::string stem;
  };
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::shared_mutex mu;
    std::unordered_map<KernelKey, std::shared_ptr<Slot>, KernelKeyHash> map;
  };
  Shard& shard_of(const KernelKey& k) { return shards_[(k.lo >> 7) % kShards]; }
  void evict_if_needed();

  Shard shards_[kShards];
  std::atomic<uint64_t> epoch_{1};
  std::atomic<size_t> entries_{0};
  std::atomic<uint64_t> bytes_{0}, evictions_{0};
  std::atomic<size_t> max_entries_{4096};
  std::atomic<uint64_t> max_bytes_{uint64_t{256} << 20};
  std::mutex evict_mu_;
};

}  // namespace kfuse::detail::cache
