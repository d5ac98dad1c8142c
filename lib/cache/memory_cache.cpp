#include "cache/memory_cache.hpp"

#include <condition_variable>

namespace kfuse::detail::cache {

namespace {
constexpr uint64_t kSlotOverhead = 512;  // map node, slot, CompiledKernel object
}

MemoryCache::Result MemoryCache::get(const KernelKey& key, const Producer& produce) {
  Shard& sh = shard_of(key);
  {
    std::shared_lock<std::shared_mutex> lk(sh.mu);
    auto it = sh.map.find(key);
    if (it != sh.map.end()) {
      Slot& s = *it->second;
      if (s.state.load(std::memory_order_acquire) == 1) {
        s.stamp.store(epoch_.load(std::memory_order_relaxed), std::memory_order_relaxed);
        s.hits.fetch_add(1, std::memory_order_relaxed);
        return {s.kernel, s.declined, true};
      }
    }
  }
  std::shared_ptr<Slot> slot;
  bool owner = false;
  {
    std::unique_lock<std::shared_mutex> lk(sh.mu);
    auto& ref = sh.map[key];
    if (!ref) {
      ref = std::make_shared<Slot>();
      ref->stem = key.stem;
      owner = true;
    }
    slot = ref;
  }
  if (!owner) {
    std::unique_lock<std::mutex> lk(slot->mu);
    slot->cv.wait(lk, [&] { return slot->state.load(std::memory_order_acquire) != 0; });
    if (slot->state.load() == 2) std::rethrow_exception(slot->error);
    slot->hits.fetch_add(1, std::memory_order_relaxed);
    return {slot->kernel, slot->declined, true};
  }
  CompileResult r;
  try {
    r = produce();
  } catch (...) {
    {
      std::unique_lock<std::shared_mutex> lk(sh.mu);
      auto it = sh.map.find(key);
      if (it != sh.map.end() && it->second == slot) sh.map.erase(it);
    }
    std::lock_guard<std::mutex> lk(slot->mu);
    slot->error = std::current_exception();
    slot->state.store(2, std::memory_order_release);
    slot->cv.notify_all();
    throw;
  }
  uint64_t b = kSlotOverhead;
  if (r.kernel) b += r.kernel->source.size() + r.kernel->binary.size();
  entries_.fetch_add(1, std::memory_order_relaxed);  // before publication: eviction may see it next
  bytes_.fetch_add(b, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(slot->mu);
    slot->kernel = r.kernel;
    slot->declined = r.declined;
    slot->bytes = b;
    slot->stamp.store(epoch_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    slot->state.store(1, std::memory_order_release);
    slot->cv.notify_all();
  }
  evict_if_needed();
  return {r.kernel, r.declined, false};
}

void MemoryCache::evict_if_needed() {
  auto over = [&] {
    return entries_.load(std::memory_order_relaxed) > max_entries_.load(std::memory_order_relaxed) ||
           bytes_.load(std::memory_order_relaxed) > max_bytes_.load(std::memory_order_relaxed);
  };
  if (!over()) return;
  std::lock_guard<std::mutex> elk(evict_mu_);
  while (over()) {
    // Oldest ready slot across the shards (an O(n) scan, only when inserting over a bound).
    size_t best_shard = kShards;
    KernelKey best_key;
    uint64_t best = UINT64_MAX;
    for (size_t i = 0; i < kShards; ++i) {
      std::shared_lock<std::shared_mutex> lk(shards_[i].mu);
      for (const auto& [k, s] : shards_[i].map) {
        if (s->state.load(std::memory_order_acquire) != 1) continue;
        uint64_t st = s->stamp.load(std::memory_order_relaxed);
        if (st < best) {
          best = st;
          best_key = k;
          best_shard = i;
        }
      }
    }
    if (best_shard == kShards) return;
    std::shared_ptr<Slot> victim;  // released after the shard lock: freeing code may take time
    {
      std::unique_lock<std::shared_mutex> lk(shards_[best_shard].mu);
      auto it = shards_[best_shard].map.find(best_key);
      if (it == shards_[best_shard].map.end()) continue;
      victim = std::move(it->second);
      shards_[best_shard].map.erase(it);
    }
    entries_.fetch_sub(1, std::memory_order_relaxed);
    bytes_.fetch_sub(victim->bytes, std::memory_order_relaxed);
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
}

void MemoryCache::clear() {
  for (auto& sh : shards_) {
    std::vector<std::shared_ptr<Slot>> dropped;
    {
      std::unique_lock<std::shared_mutex> lk(sh.mu);
      for (auto it = sh.map.begin(); it != sh.map.end();) {
        if (it->second->state.load(std::memory_order_acquire) == 1) {
          entries_.fetch_sub(1, std::memory_order_relaxed);
          bytes_.fetch_sub(it->second->bytes, std::memory_order_relaxed);
          dropped.push_back(std::move(it->second));
          it = sh.map.erase(it);
        } else {
          ++it;  // being produced: its producer publishes it
        }
      }
    }
  }
}

void MemoryCache::set_limits(size_t max_entries, uint64_t max_bytes) {
  max_entries_ = max_entries;
  max_bytes_ = max_bytes;
  evict_if_needed();
}

std::vector<MemoryEntryInfo> MemoryCache::entries() const {
  std::vector<MemoryEntryInfo> out;
  for (const auto& sh : shards_) {
    std::shared_lock<std::shared_mutex> lk(sh.mu);
    for (const auto& [k, s] : sh.map) {
      if (s->state.load(std::memory_order_acquire) != 1) continue;
      MemoryEntryInfo i;
      i.key = k.hex();
      i.stem = s->stem;
      i.bytes = s->bytes;
      i.hits = s->hits.load(std::memory_order_relaxed);
      i.declined = !s->kernel;
      if (s->kernel) {
        i.backend = s->kernel->backend;
        i.target = s->kernel->target;
      }
      out.push_back(std::move(i));
    }
  }
  return out;
}

}  // namespace kfuse::detail::cache
