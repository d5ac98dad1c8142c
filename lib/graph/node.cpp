// Node interning (hash-consing). The intern table does not own nodes, so a node lives as long
// as a Tensor or a consumer node refers to it; ~Node removes its table entry.
#include "kfuse/node.hpp"

#include "host_pool.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "hash.hpp"
#include "intern.hpp"
#include "node_map.hpp"
#include "spin_lock.hpp"

namespace kfuse {

bool Attrs::operator==(const Attrs& o) const {
  if (ints != o.ints || reals.size() != o.reals.size()) return false;
  // Bitwise comparison of reals: NaN constants equal themselves and -0 differs from +0.
  return reals.empty() || std::memcmp(reals.data(), o.reals.data(), reals.size() * sizeof(double)) == 0;
}

std::shared_ptr<Storage> Node::realized() const {
  // Published once and never replaced (see set_realized), so after the flag no lock is needed.
  if (!has_realized_.load(std::memory_order_acquire)) return nullptr;
  return realized_;
}
void Node::set_realized(std::shared_ptr<Storage> s) const {
  if (!s) return;
  std::lock_guard<std::mutex> lk(realized_mu_);
  // The first value wins. Two threads evaluating one node at once compute equal values; had the
  // second replaced the first, the first storage would be freed while a reader of the first
  // (data(), a later evaluation's leaf) may still hold a raw pointer into it.
  if (has_realized_.load(std::memory_order_relaxed)) return;
  realized_ = std::move(s);
  has_realized_.store(true, std::memory_order_release);
}

namespace detail {

// The intern table. Nodes are hash-consed through it; it refers to them without owning them
// (an entry is a raw pointer plus the node's hash) and a node erases its own entry in ~Node.
//
// Lifetime protocol: a node whose last reference goes runs ~Node, whose first act is to take its
// shard's lock and erase its entry; its members (and its control block) stay intact until then.
// A lookup holds the same lock, so every node it can see is either alive or blocked in ~Node on
// that lock; it compares the structure and takes a reference with self_.lock(), which fails
// exactly for the dying ones (reference count already zero), so a dying node is never revived.
//
// Each shard is an open-addressing table (linear probing, backward-shift erase, load <= 1/2):
// no allocation per entry, where a node-based std::unordered_multimap allocated one per node
// and per weak_ptr.
struct NodeInterning {
  struct Slot {
    uint64_t hash;
    Node* node;  // null: empty
  };
  struct alignas(64) Shard {  // one cache line per lock: no false sharing between shards
    SpinLock mu;
    Slot* slots = nullptr;
    size_t mask = 0;
    size_t count = 0;
  };
  static constexpr unsigned kShardBits = 6;
  static constexpr size_t kMinSlots = 64;
  Shard shards[size_t{1} << kShardBits];

  // The top bits pick the shard, the low bits the slot: independent bits of one hash.
  Shard& shard(uint64_t h) { return shards[h >> (64 - kShardBits)]; }

  // False (table unchanged) when memory runs out: growing then throws std::bad_alloc from
  // make_node, shrinking (in ~Node, which must not throw) is skipped.
  static bool rehash(Shard& sh, size_t cap) {
    Slot* fresh = new (std::nothrow) Slot[cap]();
    if (!fresh) return false;
    for (size_t j = 0; sh.slots && j <= sh.mask; ++j) {
      if (!sh.slots[j].node) continue;
      size_t i = sh.slots[j].hash & (cap - 1);
      while (fresh[i].node) i = (i + 1) & (cap - 1);
      fresh[i] = sh.slots[j];
    }
    delete[] sh.slots;
    sh.slots = fresh;
    sh.mask = cap - 1;
    return true;
  }

  static void erase(Shard& sh, const Node* n) {
    size_t i = n->hash & sh.mask;
    while (sh.slots[i].node != n) i = (i + 1) & sh.mask;
    // Backward-shift deletion: move later entries of the probe run into the hole, so lookups
    // never need tombstones.
    for (size_t j = (i + 1) & sh.mask; sh.slots[j].node; j = (j + 1) & sh.mask) {
      size_t home = sh.slots[j].hash & sh.mask;
      // Entry j may fill the hole at i when its home is not inside the cyclic range (i, j].
      bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        sh.slots[i] = sh.slots[j];
        i = j;
      }
    }
    sh.slots[i] = {0, nullptr};
    --sh.count;
    // Shrink after a large graph is released, so that the table does not keep its peak size.
    if (sh.mask + 1 > 1024 && sh.count * 8 < sh.mask + 1) rehash(sh, (sh.mask + 1) / 2);
  }

  // Takes the exact pointer type: converting to NodeRef would copy it (two atomic operations).
  static void set_self(Node& n, const std::shared_ptr<Node>& ref) {
    n.self_ = ref;
    n.interned_ = true;
  }
  static NodeRef try_ref(const Node& n) { return n.self_.lock(); }
  static bool interned(const Node& n) { return n.interned_; }
};

}  // namespace detail

namespace {

using detail::NodeInterning;
using detail::NodeKey;
using detail::WordHasher;

uint64_t node_hash(const NodeKey& k) {
  WordHasher h;
  h.add(static_cast<uint64_t>(k.op) | static_cast<uint64_t>(k.dtype) << 8 |
        static_cast<uint64_t>(k.device.kind()) << 16 |
        static_cast<uint64_t>(static_cast<uint32_t>(k.device.index())) << 32);
  // The lengths keep e.g. shape [2] + ints [3] apart from shape [2, 3] + ints [].
  h.add(k.shape.size() | k.inputs.size() << 16 | k.ints.size() << 32 | k.reals.size() << 48);
  h.add_words(k.shape.data(), k.shape.size());
  for (const auto& in : k.inputs) h.add(reinterpret_cast<uintptr_t>(in.get()));
  h.add_words(k.ints.data(), k.ints.size());
  h.add_words(k.reals.data(), k.reals.size());  // bit patterns: -0 and +0 (and NaNs) differ
  return h.digest();
}

bool same_structure(const Node& n, const NodeKey& k) {
  if (n.op != k.op || n.dtype != k.dtype || n.device != k.device || n.shape.size() != k.shape.size() ||
      n.inputs.size() != k.inputs.size() || n.attrs.ints.size() != k.ints.size() ||
      n.attrs.reals.size() != k.reals.size())
    return false;
  for (size_t i = 0; i < k.inputs.size(); ++i)
    if (n.inputs[i].get() != k.inputs[i].get()) return false;
  auto same_bytes = [](const void* a, const void* b, size_t bytes) { return !bytes || !std::memcmp(a, b, bytes); };
  // Bitwise comparison of reals: NaN constants equal themselves and -0 differs from +0.
  return same_bytes(n.shape.data(), k.shape.data(), k.shape.size() * sizeof(int64_t)) &&
         same_bytes(n.attrs.ints.data(), k.ints.data(), k.ints.size() * sizeof(int64_t)) &&
         same_bytes(n.attrs.reals.data(), k.reals.data(), k.reals.size() * sizeof(double));
}

NodeInterning& table() {
  // Leaked on purpose: nodes may be destroyed during static destruction of user objects.
  static NodeInterning* t = new NodeInterning();
  return *t;
}

std::atomic<uint64_t> g_next_buffer_id{1};

// Per-thread recycling of what a node allocates: the block that holds the node and its
// reference counts (~256 bytes), and the buffers of its shape, attrs.ints and inputs vectors;
// also the two small blocks of every Storage (the Storage with its counts, the owner's counts). Recording and releasing
// an expression creates and frees these for every op, in bursts of tens that overflow malloc's per-thread cache and
// take its slow paths; recycled, a repeated expression allocates nothing for its nodes. Bounded per thread; what one
// thread frees joins that thread's caches. Off under AddressSanitizer, so that a use after free stays detectable.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint32_t kRecycled = 0;
#else
constexpr uint32_t kRecycled = 256;
#endif
constexpr size_t kMaxRecycledCapacity = 16;  // elements; larger vectors go back to malloc

struct FreeBlock {
  FreeBlock* next;
};

// Up to kRecycled emptied vectors (their buffers) in raw storage, so that the cache itself is
// trivially destructible: it stays usable while the thread's other thread_local objects are
// destroyed (nodes may be released then), and `closed` sends late frees straight to malloc.
template <typename V>
struct VectorCache {
  alignas(V) unsigned char slots[kRecycled ? kRecycled : 1][sizeof(V)];
  uint32_t count;
  V* at(uint32_t i) { return std::launder(reinterpret_cast<V*>(slots[i])); }
};

// Blocks by size class: 64, 128, ..., 512 bytes.
constexpr size_t kBlockClasses = 8;
constexpr size_t block_class(size_t bytes) { return (bytes + 63) / 64 - 1; }

struct ThreadCaches {
  FreeBlock* blocks[kBlockClasses];
  uint32_t block_count[kBlockClasses];
  bool closed;
  bool drain_registered;
  VectorCache<std::vector<int64_t>> ints;
  VectorCache<std::vector<NodeRef>> refs;
};
thread_local ThreadCaches t_cache{};
// The caches' address, taken once per operation: used directly, the thread_local's address is
// re-derived (a __tls_get_addr call in a shared library) at every use the compiler inlines.
__attribute__((noinline)) ThreadCaches& thread_caches() { return t_cache; }

struct ThreadCachesDrain {
  ~ThreadCachesDrain() {
    t_cache.closed = true;
    for (size_t k = 0; k < kBlockClasses; ++k) {
      while (FreeBlock* b = t_cache.blocks[k]) {
        t_cache.blocks[k] = b->next;
        ::operator delete(b);
      }
      t_cache.block_count[k] = 0;
    }
    while (t_cache.ints.count) std::destroy_at(t_cache.ints.at(--t_cache.ints.count));
    while (t_cache.refs.count) std::destroy_at(t_cache.refs.at(--t_cache.refs.count));
  }
};
thread_local ThreadCachesDrain t_cache_drain;

// Registers the drain before this thread's caches first hold anything (odr-use of a
// thread_local with a destructor constructs it).
bool caches_open(ThreadCaches& c) {
  if (c.closed) return false;
  if (!c.drain_registered) {
    (void)&t_cache_drain;
    c.drain_registered = true;
  }
  return true;
}

/// An empty vector, with a recycled buffer when one is cached.
template <typename V>
V take_vector(VectorCache<V>& c) {
  if (!c.count) return V();
  V* slot = c.at(--c.count);
  V v = std::move(*slot);
  std::destroy_at(slot);
  return v;
}

/// Keeps `v`'s buffer for a later node (v must be empty), or lets it go.
template <typename V>
void recycle_vector(ThreadCaches& tc, VectorCache<V>& c, V& v) {
  if (c.count >= kRecycled || v.capacity() == 0 || v.capacity() > kMaxRecycledCapacity || !caches_open(tc)) return;
  ::new (static_cast<void*>(c.slots[c.count])) V(std::move(v));
  ++c.count;
}

// For allocate_shared and shared_ptr control blocks: single objects up to 512 bytes come from
// and go back to this thread's lists of their size class.
template <typename T>
struct RecyclingAllocator {
  using value_type = T;
  static constexpr bool kRecyclable = sizeof(T) <= 64 * kBlockClasses && alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  static constexpr size_t kClass = block_class(sizeof(T) < sizeof(FreeBlock) ? sizeof(FreeBlock) : sizeof(T));
  RecyclingAllocator() = default;
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}
  T* allocate(size_t n) {
    if constexpr (kRecyclable) {
      ThreadCaches& c = thread_caches();
      if (n == 1 && c.blocks[kClass]) {
        FreeBlock* b = c.blocks[kClass];
        c.blocks[kClass] = b->next;
        --c.block_count[kClass];
        return reinterpret_cast<T*>(b);
      }
      // A fresh block has the class's full size, so that any type of the class can reuse it.
      if (n == 1) return static_cast<T*>(::operator new(64 * (kClass + 1)));
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if constexpr (kRecyclable) {
      ThreadCaches& c = thread_caches();
      if (n == 1 && c.block_count[kClass] < kRecycled && caches_open(c)) {
        auto* b = reinterpret_cast<FreeBlock*>(p);
        b->next = c.blocks[kClass];
        c.blocks[kClass] = b;
        ++c.block_count[kClass];
        return;
      }
    }
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const RecyclingAllocator<U>&) const {
    return true;
  }
};

struct PoolDeleter {
  size_t bytes;
  void operator()(void* q) const { detail::pool_free(q, bytes); }
};

}  // namespace

namespace detail {

std::shared_ptr<Storage> make_storage() { return std::allocate_shared<Storage>(RecyclingAllocator<Storage>()); }

}  // namespace detail

std::shared_ptr<Storage> Storage::allocate(DType dtype, int64_t numel) {
  auto s = detail::make_storage();
  s->dtype = dtype;
  s->numel = numel;
  size_t bytes = s->bytes();
  void* p = detail::pool_alloc(bytes);
  s->data = p;
  s->owner = std::shared_ptr<void>(p, PoolDeleter{bytes}, RecyclingAllocator<char>());
  return s;
}

namespace {

// Looks `k` up and, when absent, creates the node with `fill` (which sets shape, inputs and
// attrs, moving from the caller's vectors when it has them). Lookup and insertion happen under
// one shard lock, so two threads recording the same node get the same object.
template <typename Fill>
NodeRef intern(const NodeKey& k, Fill&& fill) {
  // Every node passes here, so no op can make a shape the kernels cannot index (a negative
  // size, or more than kMaxNumel elements). The API checks the shapes it infers first, naming the
  // call; this names the node's op for whatever those checks do not reach.
  if (!shape_fits(k.shape)) throw_bad_shape(op_name(k.op), k.shape);
  uint64_t h = node_hash(k);
  NodeInterning& t = table();
  NodeInterning::Shard& sh = t.shard(h);
  std::lock_guard<detail::SpinLock> lk(sh.mu);
  if (!sh.slots && !NodeInterning::rehash(sh, NodeInterning::kMinSlots)) throw std::bad_alloc();
  size_t i = h & sh.mask;
  for (; sh.slots[i].node; i = (i + 1) & sh.mask) {
    const NodeInterning::Slot& s = sh.slots[i];
    if (s.hash == h && same_structure(*s.node, k))
      if (NodeRef live = NodeInterning::try_ref(*s.node)) return live;
    // else: a different node, or an equal one that is being destroyed; a live equal node may
    // still follow in the probe run.
  }
  // One allocation for the node and its reference counts.
  std::shared_ptr<Node> ref = std::allocate_shared<Node>(RecyclingAllocator<Node>());
  Node& n = *ref;
  n.op = k.op;
  n.dtype = k.dtype;
  n.device = k.device;
  n.hash = h;
  fill(n);
  NodeInterning::set_self(n, ref);
  sh.slots[i] = {h, &n};
  if (++sh.count * 2 > sh.mask + 1) NodeInterning::rehash(sh, (sh.mask + 1) * 2);
  return NodeRef(std::move(ref));  // moved: a copy would cost an atomic increment and decrement
}

}  // namespace

Node::~Node() {
  if (!NodeInterning::interned(*this)) return;
  {
    NodeInterning::Shard& sh = table().shard(hash);
    std::lock_guard<detail::SpinLock> lk(sh.mu);
    NodeInterning::erase(sh, this);
  }
  // Unlocked from here: releasing `inputs` may destroy input nodes, which take their own shard
  // locks (possibly this one). The vectors' buffers go to this thread's caches for new nodes.
  inputs.clear();
  ThreadCaches& c = thread_caches();  // after the inputs' release, which may have used it too
  recycle_vector(c, c.refs, inputs);
  shape.clear();
  recycle_vector(c, c.ints, shape);
  attrs.ints.clear();
  recycle_vector(c, c.ints, attrs.ints);
}

namespace detail {

// New nodes get recycled vectors; assign() reuses their buffers when large enough.
void fill_from_key(Node& n, const NodeKey& k, NodeRef* movable_inputs) {
  ThreadCaches& c = thread_caches();
  if (!k.shape.empty()) {
    n.shape = take_vector(c.ints);
    n.shape.assign(k.shape.begin(), k.shape.end());
  }
  if (!k.inputs.empty()) {
    n.inputs = take_vector(c.refs);
    if (movable_inputs) {
      n.inputs.assign(std::make_move_iterator(movable_inputs),
                      std::make_move_iterator(movable_inputs + k.inputs.size()));
    } else {
      n.inputs.assign(k.inputs.begin(), k.inputs.end());
    }
  }
  if (!k.ints.empty()) {
    n.attrs.ints = take_vector(c.ints);
    n.attrs.ints.assign(k.ints.begin(), k.ints.end());
  }
  n.attrs.reals.assign(k.reals.begin(), k.reals.end());
}

NodeRef intern_node(const NodeKey& k) {
  return intern(k, [&](Node& n) { fill_from_key(n, k, nullptr); });
}

NodeRef intern_node(const NodeKey& k, NodeRef* inputs) {
  return intern(k, [&](Node& n) { fill_from_key(n, k, inputs); });
}

}  // namespace detail

NodeRef make_node(Op op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs, Device device) {
  NodeKey k{op, dtype, device, shape, inputs, attrs.ints, attrs.reals};
  return intern(k, [&](Node& n) {
    n.shape = std::move(shape);
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
  });
}

NodeRef make_buffer_node(std::shared_ptr<Storage> storage, Shape shape) {
  int64_t id = static_cast<int64_t>(g_next_buffer_id.fetch_add(1, std::memory_order_relaxed));
  NodeKey k{Op::Buffer, storage->dtype, storage->device, shape, {}, std::span<const int64_t>(&id, 1), {}};
  // The id is fresh, so the node is new: set its storage before it is published.
  return intern(k, [&](Node& n) {
    n.shape = std::move(shape);
    n.attrs.ints = take_vector(thread_caches().ints);  // the buffer node's attrs: {id}
    n.attrs.ints.push_back(id);
    n.storage = std::move(storage);
  });
}

size_t interned_node_count() {
  size_t n = 0;
  for (auto& sh : table().shards) {
    std::lock_guard<detail::SpinLock> lk(sh.mu);
    n += sh.count;
  }
  return n;
}

std::vector<const Node*> topo_order(const std::vector<const Node*>& roots, bool stop_at_realized) {
  std::vector<const Node*> order;
  detail::NodeMap seen;
  // Iterative DFS: graphs can be deep (long element-wise chains).
  std::vector<std::pair<const Node*, size_t>> stack;
  for (const Node* r : roots) {
    if (!seen.insert(r, 0)) continue;
    stack.emplace_back(r, 0);
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      bool leaf = stop_at_realized && n->is_realized();
      if (!leaf && i < n->inputs.size()) {
        const Node* c = n->inputs[i++].get();
        if (seen.insert(c, 0)) stack.emplace_back(c, 0);
      } else {
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  return order;
}

}  // namespace kfuse
