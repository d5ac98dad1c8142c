// A small open-addressing map from node pointers to 32-bit values, for the graph walks that run
// on every evaluation (topo_order, graph_signature). Typical graphs have tens of nodes: the
// first 64 slots live inside the object (no heap allocation, no per-node allocation as in
// std::unordered_map); larger graphs grow into a heap array.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

namespace kfuse {
class Node;
}

namespace kfuse::detail {

class NodeMap {
 public:
  NodeMap() { std::memset(inline_, 0, sizeof inline_); }
  NodeMap(const NodeMap&) = delete;
  NodeMap& operator=(const NodeMap&) = delete;

  /// The value stored for `n`, or null.
  uint32_t* find(const Node* n) { return const_cast<uint32_t*>(std::as_const(*this).find(n)); }
  const uint32_t* find(const Node* n) const {
    for (size_t i = slot_of(n);; i = (i + 1) & mask_) {
      if (slots_[i].key == n) return &slots_[i].value;
      if (!slots_[i].key) return nullptr;
    }
  }
  /// Inserts (n, v) unless `n` is present; true when inserted.
  bool insert(const Node* n, uint32_t v) {
    if ((count_ + 1) * 2 > mask_ + 1) grow();
    for (size_t i = slot_of(n);; i = (i + 1) & mask_) {
      if (slots_[i].key == n) return false;
      if (!slots_[i].key) {
        slots_[i] = {n, v};
        ++count_;
        return true;
      }
    }
  }
  /// Inserts (n, v) where `n` is known to be absent (one probe instead of a find and an insert).
  void insert_absent(const Node* n, uint32_t v) {
    if ((count_ + 1) * 2 > mask_ + 1) grow();
    size_t i = slot_of(n);
    while (slots_[i].key) i = (i + 1) & mask_;
    slots_[i] = {n, v};
    ++count_;
  }
  size_t size() const { return count_; }

 private:
  struct Slot {
    const Node* key;
    uint32_t value;
  };
  static constexpr size_t kInline = 64;

  size_t slot_of(const Node* n) const {
    // Fibonacci hashing: the top bits of the product mix every bit of the pointer.
    uint64_t x = reinterpret_cast<uintptr_t>(n) * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>(x >> shift_);
  }
  void grow() {
    size_t cap = (mask_ + 1) * 2;
    std::unique_ptr<Slot[]> next(new Slot[cap]());
    Slot* old = slots_;
    size_t old_cap = mask_ + 1;
    slots_ = next.get();
    mask_ = cap - 1;
    --shift_;
    for (size_t j = 0; j < old_cap; ++j) {
      if (!old[j].key) continue;
      size_t i = slot_of(old[j].key);
      while (slots_[i].key) i = (i + 1) & mask_;
      slots_[i] = old[j];
    }
    heap_ = std::move(next);
  }

  Slot inline_[kInline];
  std::unique_ptr<Slot[]> heap_;
  Slot* slots_ = inline_;
  size_t mask_ = kInline - 1;
  unsigned shift_ = 64 - 6;  // 64 - log2(capacity)
  size_t count_ = 0;
};

}  // namespace kfuse::detail
