/** \file node.hpp
 * The graph: immutable, hash-consed nodes.
 *
 * Structurally equal nodes are the same object (make_node interns them), so common
 * subexpressions are shared by construction and pointer equality is structural equality.
 * Leaves (Op::Buffer) carry a unique buffer id so equal-looking inputs stay distinct.
 * Recording from several threads at once is safe: the intern table is sharded and locked.
 * Nodes are created only by make_node / make_buffer_node (one allocation holds the node and its
 * reference count); a node removes itself from the intern table when its last reference goes.
 *
 * Nodes are public because fusion-pattern authors inspect them (see pattern.hpp).
 */
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kfuse/device.hpp"
#include "kfuse/dtype.hpp"
#include "kfuse/op.hpp"
#include "kfuse/shape.hpp"

namespace kfuse {

/// A contiguous, row-major block of elements. Owned (allocated by kfuse, or a copy of user
/// data) or borrowed (a user pointer that must outlive every use; see Tensor::borrow).
struct Storage {
  DType dtype = DType::F32;
  int64_t numel = 0;
  Device device = Device::cpu();
  void* data = nullptr;         ///< host pointer (CPU) or device handle (GPU backends)
  std::shared_ptr<void> owner;  ///< keeps `data` alive; empty when borrowed
  size_t bytes() const { return static_cast<size_t>(numel) * dtype_size(dtype); }

  /// Allocates uninitialised, 64-byte aligned host memory.
  static std::shared_ptr<Storage> allocate(DType dtype, int64_t numel);
};

/// Small per-op attributes, compared and hashed as part of the node's identity.
struct Attrs {
  std::vector<int64_t> ints;
  std::vector<double> reals;
  bool operator==(const Attrs& o) const;
};

class Node;
using NodeRef = std::shared_ptr<const Node>;

namespace detail {
struct NodeInterning;
}

class Node {
 public:
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();

  Op op;
  DType dtype;
  Shape shape;
  std::vector<NodeRef> inputs;
  Attrs attrs;
  Device device = Device::cpu();
  uint64_t hash = 0;  ///< hash of the identity above (the intern table's key)
  /// The data of a Buffer leaf.
  std::shared_ptr<Storage> storage;

  int64_t numel() const { return shape_numel(shape); }
  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  /// Unique id of a Buffer leaf (0 otherwise).
  uint64_t buffer_id() const { return op == Op::Buffer ? static_cast<uint64_t>(attrs.ints[0]) : 0; }

  /// The value computed by an earlier eval(), or null. Realized nodes act as inputs of later
  /// evaluations; this memo does not take part in the node's identity.
  std::shared_ptr<Storage> realized() const;
  /// Sets the value once: when the node already has one (another thread evaluated it at the
  /// same time), `s` is dropped and the first value stays, so pointers into it stay valid for
  /// the node's lifetime.
  void set_realized(std::shared_ptr<Storage> s) const;
  /// realized() != nullptr, without taking the lock or copying the pointer (graph walks ask
  /// this of every node on every evaluation).
  bool is_realized() const { return has_realized_.load(std::memory_order_acquire); }

 private:
  friend struct detail::NodeInterning;
  mutable std::mutex realized_mu_;  ///< serialises writers; readers go by has_realized_
  mutable std::shared_ptr<Storage> realized_;
  mutable std::atomic<bool> has_realized_{false};
  /// The node's own control block, for the intern table: a lookup may only hand out a node
  /// whose reference count has not yet dropped to zero (lock() fails on a dying node).
  std::weak_ptr<const Node> self_;
  bool interned_ = false;
};

/// Interns a node: returns the existing node equal to (op, dtype, shape, inputs, attrs, device)
/// or a new one. Thread-safe.
NodeRef make_node(Op op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs = {},
                  Device device = Device::cpu());
/// A new Buffer leaf with a fresh buffer id over `storage`.
NodeRef make_buffer_node(std::shared_ptr<Storage> storage, Shape shape);
/// Number of live interned nodes (for tests of CSE and of memory release).
size_t interned_node_count();

/// Nodes reachable from `roots`, inputs before users, stopping at realized nodes when
/// `stop_at_realized` (they act as leaves).
std::vector<const Node*> topo_order(const std::vector<const Node*>& roots, bool stop_at_realized);

}  // namespace kfuse
