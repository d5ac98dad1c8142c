// Canonical graph text (see print_graph.hpp).
#include "print_graph.hpp"

#include <charconv>
#include <cmath>
#include <unordered_map>

namespace kfuse::detail {

namespace {

// Shortest text that reads back to the same value (as a float when `dt` is f32 and the value
// is one, so f32 constants print as 2.7182817, not 2.7182817459106445); nan/inf spelled so.
std::string real_str(double v, DType dt = DType::F64) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto f = static_cast<float>(v);
  auto r = dt == DType::F32 && static_cast<double>(f) == v ? std::to_chars(buf, buf + sizeof buf, f)
                                                           : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string list_str(const std::vector<int64_t>& v, size_t first = 0, size_t stride = 1) {
  std::string s = "[";
  for (size_t i = first; i < v.size(); i += stride) {
    if (i != first) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// The attributes of `n`, each preceded by a space ("" when none). Built with += only (GCC 12
// warns falsely about `" " + std::string`, its bug 105329).
std::string attrs_str(const Node& n) {
  const auto& ints = n.attrs.ints;
  const auto& reals = n.attrs.reals;
  std::string s;
  switch (n.op) {
    case Op::Buffer: break;
    case Op::Const: s += ' ', s += real_str(reals.at(0), n.dtype); break;
    case Op::Iota: s += " start=", s += real_str(reals.at(0)), s += " step=", s += real_str(reals.at(1)); break;
    case Op::Rand: s += " seed=", s += std::to_string(ints.at(0)), s += ints.at(1) == 0 ? " uniform" : " normal"; break;
    case Op::ReduceSum:
    case Op::ReduceProd:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::ArgMax:
    case Op::ArgMin:
    case Op::SegmentSum:
    case Op::SegmentMax: s += " axes=", s += list_str(ints); break;
    case Op::Permute: s += " perm=", s += list_str(ints); break;
    case Op::Slice: s += " starts=", s += list_str(ints, 0, 2), s += " steps=", s += list_str(ints, 1, 2); break;
    case Op::Pad:
      s += " before=", s += list_str(ints, 0, 2), s += " after=", s += list_str(ints, 1, 2);
      s += " value=", s += real_str(reals.at(0), n.dtype);
      break;
    case Op::Concat:
    case Op::Gather: s += " axis=", s += std::to_string(ints.at(0)); break;
    case Op::CheckLabels:
      s += " classes=", s += std::to_string(ints.at(0)), s += " ignore=", s += std::to_string(ints.at(1));
      break;
    case Op::CheckIndex: s += " size=", s += std::to_string(ints.at(0)); break;
    default:  // ops without documented attributes print whatever they carry
      if (!ints.empty()) s += " ints=", s += list_str(ints);
      if (!reals.empty()) {
        s += " reals=[";
        for (size_t i = 0; i < reals.size(); ++i) s += i ? ", " : "", s += real_str(reals[i]);
        s += "]";
      }
  }
  return s;
}

std::string device_str(const Node& n) {
  std::string s;
  if (n.device != Device::cpu()) s += " @", s += n.device.str();
  return s;
}

}  // namespace

std::string type_str(const Node& n) {
  std::string s = dtype_name(n.dtype);
  s += '[';
  for (size_t i = 0; i < n.shape.size(); ++i) s += i ? ", " : "", s += std::to_string(n.shape[i]);
  s += ']';
  return s;
}

std::string node_label(const Node& n) {
  std::string s;
  if (n.realized()) {
    s += "realized ", s += type_str(n), s += " (", s += op_name(n.op), s += ')';
  } else {
    s += op_name(n.op), s += ' ', s += type_str(n), s += attrs_str(n);
  }
  s += device_str(n);
  return s;
}

std::string print_graph(const std::vector<NodeRef>& roots) {
  std::vector<const Node*> rs;
  for (const auto& r : roots) rs.push_back(r.get());
  std::unordered_map<const Node*, size_t> id;
  auto ref = [&id](const Node* n) {
    std::string s = "%";
    s += std::to_string(id.at(n));
    return s;
  };
  size_t buffers = 0;
  std::string out;
  for (const Node* n : topo_order(rs, /*stop_at_realized=*/true)) {
    id.emplace(n, id.size());
    out += ref(n), out += " = ";
    if (n->realized()) {
      out += node_label(*n);
    } else {
      out += op_name(n->op), out += ' ', out += type_str(*n);
      if (n->op == Op::Buffer) out += " in", out += std::to_string(buffers++);
      for (size_t i = 0; i < n->inputs.size(); ++i) out += i ? ", " : " ", out += ref(n->inputs[i].get());
      out += attrs_str(*n), out += device_str(*n);
    }
    out += '\n';
  }
  out += "roots:";
  for (size_t i = 0; i < rs.size(); ++i) out += i ? ", " : " ", out += ref(rs[i]);
  out += '\n';
  return out;
}

}  // namespace kfuse::detail
