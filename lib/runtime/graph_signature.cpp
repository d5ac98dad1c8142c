#include "graph_signature.hpp"

#include <cstring>
#include <unordered_map>

namespace kfuse::detail {

namespace {
template <typename T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
}  // namespace

GraphSignature graph_signature(const std::vector<NodeRef>& roots) {
  GraphSignature sig;
  std::unordered_map<const Node*, uint32_t> id;
  std::vector<const Node*> raw;
  raw.reserve(roots.size());
  for (const auto& r : roots) raw.push_back(r.get());
  sig.bytes.reserve(64 * 16);
  for (const Node* n : topo_order(raw, /*stop_at_realized=*/true)) {
    id.emplace(n, static_cast<uint32_t>(id.size()));
    bool leaf = n->op == Op::Buffer || n->realized();
    // Leaves are described by type only: their data is what changes between evaluations.
    put(sig.bytes, static_cast<uint8_t>(leaf ? 0xff : static_cast<uint8_t>(n->op)));
    put(sig.bytes, static_cast<uint8_t>(n->dtype));
    put(sig.bytes, static_cast<uint8_t>(n->device.kind()));
    put(sig.bytes, static_cast<uint8_t>(n->device.index()));
    put(sig.bytes, static_cast<uint32_t>(n->shape.size()));
    sig.bytes.append(reinterpret_cast<const char*>(n->shape.data()), n->shape.size() * sizeof(int64_t));
    if (leaf) {
      sig.leaves.push_back(n);
      continue;
    }
    // Rand and matmul run on the host from their node: keep such plans out of the cache so a
    // cached plan never holds an old graph alive.
    if (op_kind(n->op) == OpKind::Source && n->op != Op::Const && n->op != Op::Iota) sig.cacheable = false;
    if (op_kind(n->op) == OpKind::Opaque) sig.cacheable = false;
    put(sig.bytes, static_cast<uint32_t>(n->attrs.ints.size()));
    sig.bytes.append(reinterpret_cast<const char*>(n->attrs.ints.data()), n->attrs.ints.size() * sizeof(int64_t));
    put(sig.bytes, static_cast<uint32_t>(n->attrs.reals.size()));
    sig.bytes.append(reinterpret_cast<const char*>(n->attrs.reals.data()), n->attrs.reals.size() * sizeof(double));
    put(sig.bytes, static_cast<uint32_t>(n->inputs.size()));
    for (const auto& in : n->inputs) put(sig.bytes, id.at(in.get()));
  }
  put(sig.bytes, static_cast<uint32_t>(0xfffffffe));
  for (const Node* r : raw) put(sig.bytes, id.at(r));
  return sig;
}

}  // namespace kfuse::detail
