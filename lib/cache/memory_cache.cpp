#include "cache/memory_cache.hpp"

#include <algorithm>
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
  const size_t max_e = max_entries_.load(std::memory_order_relaxed);
  const uint64_t max_b = max_bytes_.load(std::memory_order_relaxed);
  if (entries_.load(std::memory_order_relaxed) <= max_e && bytes_.load(std::memory_order_relaxed) <= max_b) return;
  std::lock_guard<std::mutex> elk(evict_mu_);
  // Over a bound: evict down to 15/16 of it in ONE scan of the shards, oldest stamps first. A
  // scan per evicted entry made every insert into a full cache cost O(entries) (~100 us at 4096
  // kernels, more than compiling one); this way the scan is paid once per max/16 inserts.
  const size_t want_e = max_e - max_e / 16;
  const uint64_t want_b = max_b - max_b / 16;
  auto above = [&] {
    return entries_.load(std::memory_order_relaxed) > want_e || bytes_.load(std::memory_order_relaxed) > want_b;
  };
  struct Candidate {
    uint64_t stamp;
    size_t shard;
    KernelKey key;
  };
  std::vector<Candidate> ready;
  for (size_t i = 0; i < kShards; ++i) {
    std::shared_lock<std::shared_mutex> lk(shards_[i].mu);
    for (const auto& [k, s] : shards_[i].map)
      if (s->state.load(std::memory_order_acquire) == 1)
        ready.push_back({s->stamp.load(std::memory_order_relaxed), i, k});
  }
  std::sort(ready.begin(), ready.end(), [](const Candidate& a, const Candidate& b) { return a.stamp < b.stamp; });
  std::vector<std::shared_ptr<Slot>> victims;  // released after the shard locks: freeing code may take time
  for (const Candidate& c : ready) {
    if (!above()) break;
    std::unique_lock<std::shared_mutex> lk(shards_[c.shard].mu);
    auto it = shards_[c.shard].map.find(c.key);
    // Re-stamped by a hit since the scan: recently used after all, so it stays.
    if (it == shards_[c.shard].map.end() || it->second->stamp.load(std::memory_order_relaxed) != c.stamp) continue;
    victims.push_back(std::move(it->second));
    shards_[c.shard].map.erase(it);
    entries_.fetch_sub(1, std::memory_order_relaxed);
    bytes_.fetch_sub(victims.back()->bytes, std::memory_order_relaxed);
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
