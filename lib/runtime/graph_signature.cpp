#include "graph_signature.hpp"

#include <bit>

#include <xxhash.h>

#include "graph/node_map.hpp"

namespace kfuse::detail {

namespace {

// Inputs before users (post-order DFS from each root in order, inputs in order), leaves
// (buffers and realized nodes) not entered: the same order as topo_order(roots, true), which
// make_program relies on only through `leaves`.
//
// Encoding, per node in that order (64-bit words):
//   [op or 0xff for a leaf | dtype << 8 | device kind << 16 | device index << 32]
//   [ndim | n_inputs << 32]  dims...
//   non-leaves only: [n_ints | n_reals << 32]  ints...  reals (bit patterns)...  input ids...
// then a separator and the id of each root. Leaves are described by type only: their data is
// what changes between evaluations; ids (positions in the order) encode the sharing.
struct Walker {
  GraphSignature& sig;
  NodeMap id;
  struct Frame {
    const Node* n;
    uint32_t next;
  };
  std::vector<Frame>& stack;

  void emit(const Node* n, bool leaf) {
    id.insert_absent(n, static_cast<uint32_t>(id.size()));
    auto& w = sig.words;
    w.push_back((leaf ? 0xffu : static_cast<uint64_t>(n->op)) | static_cast<uint64_t>(n->dtype) << 8 |
                static_cast<uint64_t>(n->device.kind()) << 16 |
                static_cast<uint64_t>(static_cast<uint32_t>(n->device.index())) << 32);
    w.push_back(n->shape.size() | (leaf ? 0 : static_cast<uint64_t>(n->inputs.size())) << 32);
    for (int64_t d : n->shape) w.push_back(static_cast<uint64_t>(d));
    if (leaf) {
      sig.leaves.push_back(n);
      return;
    }
    // An opaque op runs on the host from its node: keep such plans out of the cache so a cached
    // plan never holds an old graph alive. Matmul and rand are kernels like any other (a rand
    // seed is an attribute, hashed below, and a launch parameter of the kernel).
    if (op_kind(n->op) == OpKind::Opaque) sig.cacheable = false;
    const Attrs& a = n->attrs;
    w.push_back(a.ints.size() | static_cast<uint64_t>(a.reals.size()) << 32);
    for (int64_t v : a.ints) w.push_back(static_cast<uint64_t>(v));
    for (double v : a.reals) w.push_back(std::bit_cast<uint64_t>(v));
    for (const auto& in : n->inputs) w.push_back(*id.find(in.get()));
  }

  void visit(const Node* root) {
    if (id.find(root)) return;
    stack.push_back({root, 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const Node* n = f.n;
      bool leaf = n->op == Op::Buffer || n->is_realized();
      if (!leaf && f.next < n->inputs.size()) {
        const Node* c = n->inputs[f.next++].get();
        // A node not yet emitted cannot be on the stack already: the nodes on the stack are
        // ancestors of `n`, and the graph is acyclic.
        if (!id.find(c)) stack.push_back({c, 0});
      } else {
        stack.pop_back();
        emit(n, leaf);
      }
    }
  }
};

// The walk's stack, whose capacity is kept between evaluations. The walk calls nothing that
// could compute another signature on this thread, so one per thread suffices. Reached through a
// function the compiler does not inline: otherwise it re-derives the thread_local's address
// (a __tls_get_addr call in a shared library) at uses inside the walk.
__attribute__((noinline)) std::vector<Walker::Frame>& walk_stack() {
  thread_local std::vector<Walker::Frame> stack;
  return stack;
}

}  // namespace

void graph_signature(const NodeRef* roots, size_t n, GraphSignature& sig) {
  sig.words.clear();
  sig.leaves.clear();
  sig.cacheable = true;
  std::vector<Walker::Frame>& stack = walk_stack();
  stack.clear();
  Walker w{sig, {}, stack};
  for (size_t i = 0; i < n; ++i) w.visit(roots[i].get());
  sig.words.push_back(0xfffffffffffffffeull);
  for (size_t i = 0; i < n; ++i) sig.words.push_back(*w.id.find(roots[i].get()));
  // XXH3 rather than the word hasher of node interning: the encoding is hundreds of bytes,
  // where XXH3's vectorised lanes beat a serial multiply chain several times over.
  sig.hash = XXH3_64bits(sig.words.data(), sig.words.size() * sizeof(uint64_t));
}

GraphSignature graph_signature(const std::vector<NodeRef>& roots) {
  GraphSignature sig;
  graph_signature(roots.data(), roots.size(), sig);
  return sig;
}

}  // namespace kfuse::detail
