// Node interning (hash-consing). The intern table holds weak references, so a node lives as
// long as a Tensor or a consumer node refers to it; its deleter removes its table entry.
#include "kfuse/node.hpp"

#include "host_pool.hpp"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <unordered_map>
#include <unordered_set>

namespace kfuse {

std::shared_ptr<Storage> Storage::allocate(DType dtype, int64_t numel) {
  auto s = std::make_shared<Storage>();
  s->dtype = dtype;
  s->numel = numel;
  size_t bytes = s->bytes();
  void* p = detail::pool_alloc(bytes);
  s->data = p;
  s->owner = std::shared_ptr<void>(p, [bytes](void* q) { detail::pool_free(q, bytes); });
  return s;
}

bool Attrs::operator==(const Attrs& o) const {
  if (ints != o.ints || reals.size() != o.reals.size()) return false;
  // Bitwise comparison of reals: NaN constants equal themselves and -0 differs from +0.
  return reals.empty() || std::memcmp(reals.data(), o.reals.data(), reals.size() * sizeof(double)) == 0;
}

std::shared_ptr<Storage> Node::realized() const {
  std::lock_guard<std::mutex> lk(realized_mu_);
  return realized_;
}
void Node::set_realized(std::shared_ptr<Storage> s) const {
  std::lock_guard<std::mutex> lk(realized_mu_);
  realized_ = std::move(s);
}

namespace {

uint64_t node_hash(Op op, DType dtype, const Shape& shape, const std::vector<NodeRef>& inputs, const Attrs& attrs,
                   Device device) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  uint8_t head[4] = {static_cast<uint8_t>(op), static_cast<uint8_t>(dtype), static_cast<uint8_t>(device.kind()),
                     static_cast<uint8_t>(device.index())};
  XXH3_64bits_update(&st, head, sizeof head);
  XXH3_64bits_update(&st, shape.data(), shape.size() * sizeof(int64_t));
  for (const auto& in : inputs) {
    const Node* p = in.get();
    XXH3_64bits_update(&st, &p, sizeof p);
  }
  XXH3_64bits_update(&st, attrs.ints.data(), attrs.ints.size() * sizeof(int64_t));
  XXH3_64bits_update(&st, attrs.reals.data(), attrs.reals.size() * sizeof(double));
  return XXH3_64bits_digest(&st);
}

bool same_structure(const Node& n, Op op, DType dtype, const Shape& shape, const std::vector<NodeRef>& inputs,
                    const Attrs& attrs, Device device) {
  if (n.op != op || n.dtype != dtype || n.shape != shape || n.device != device || n.inputs.size() != inputs.size())
    return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (n.inputs[i].get() != inputs[i].get()) return false;
  return n.attrs == attrs;
}

// Sharded so that threads recording unrelated expressions rarely contend.
struct InternTable {
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    std::unordered_multimap<uint64_t, std::pair<const Node*, std::weak_ptr<const Node>>> map;
  };
  Shard shards[kShards];
  std::atomic<size_t> live{0};
  Shard& shard(uint64_t h) { return shards[h % kShards]; }
};

InternTable& table() {
  // Leaked on purpose: nodes may be destroyed during static destruction of user objects.
  static InternTable* t = new InternTable();
  return *t;
}

std::atomic<uint64_t> g_next_buffer_id{1};

}  // namespace

NodeRef make_node(Op op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs, Device device) {
  uint64_t h = node_hash(op, dtype, shape, inputs, attrs, device);
  auto& t = table();
  auto& sh = t.shard(h);
  std::lock_guard<std::mutex> lk(sh.mu);
  auto range = sh.map.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    if (auto live = it->second.second.lock()) {
      if (same_structure(*live, op, dtype, shape, inputs, attrs, device)) return live;
    }
  }
  Node* raw = new Node();
  raw->op = op;
  raw->dtype = dtype;
  raw->shape = std::move(shape);
  raw->inputs = std::move(inputs);
  raw->attrs = std::move(attrs);
  raw->device = device;
  raw->hash = h;
  NodeRef ref(raw, [](const Node* n) {
    auto& tb = table();
    {
      auto& s = tb.shard(n->hash);
      std::lock_guard<std::mutex> g(s.mu);
      auto r = s.map.equal_range(n->hash);
      for (auto it = r.first; it != r.second; ++it)
        if (it->second.first == n) {
          s.map.erase(it);
          break;
        }
    }
    tb.live.fetch_sub(1, std::memory_order_relaxed);
    delete n;
  });
  sh.map.emplace(h, std::make_pair(raw, std::weak_ptr<const Node>(ref)));
  t.live.fetch_add(1, std::memory_order_relaxed);
  return ref;
}

NodeRef make_buffer_node(std::shared_ptr<Storage> storage, Shape shape) {
  Attrs a;
  a.ints.push_back(static_cast<int64_t>(g_next_buffer_id.fetch_add(1)));
  DType dt = storage->dtype;
  Device dev = storage->device;
  NodeRef n = make_node(Op::Buffer, dt, std::move(shape), {}, std::move(a), dev);
  const_cast<Node&>(*n).storage = std::move(storage);  // set once, before the node is shared
  return n;
}

size_t interned_node_count() { return table().live.load(); }

std::vector<const Node*> topo_order(const std::vector<const Node*>& roots, bool stop_at_realized) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen;
  // Iterative DFS: graphs can be deep (long element-wise chains).
  std::vector<std::pair<const Node*, size_t>> stack;
  for (const Node* r : roots) {
    if (!seen.insert(r).second) continue;
    stack.emplace_back(r, 0);
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      bool leaf = stop_at_realized && n->realized();
      if (!leaf && i < n->inputs.size()) {
        const Node* c = n->inputs[i++].get();
        if (seen.insert(c).second) stack.emplace_back(c, 0);
      } else {
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  return order;
}

}  // namespace kfuse
