#include "bag_tables.hpp"

#include <map>
#include <utility>

namespace kbench {

const std::vector<std::string>& bag_formats() {
  static const std::vector<std::string> f = {"f32", "f16", "8-bit", "8-bit fused", "4-bit", "4-bit fused"};
  return f;
}

kfuse::Tensor BagTable::expr() const {
  return q.values.defined() ? kfuse::dequantize_rowwise(q) : stored.cast(kfuse::DType::F32);
}

const BagTable& bag_table_of(const BagProblem& p, const std::string& format) {
  static std::map<std::pair<const float*, std::string>, BagTable> made;
  auto [it, fresh] = made.try_emplace({p.table, format});
  BagTable& t = it->second;
  if (!fresh) return t;
  kfuse::Tensor t32 = kfuse::Tensor::borrow(const_cast<float*>(p.table), {p.rows, p.cols});
  if (format == "f32") {
    t.stored = t32;
  } else if (format == "f16") {
    t.stored = t32.cast(kfuse::DType::F16).eval();
  } else {
    const int bits = format.rfind("4-bit", 0) == 0 ? 4 : 8;
    t.q = kfuse::quantize_rowwise(t32, bits);
    kfuse::eval({t.q.values, t.q.scale_bias});
    const bool fused = format.find("fused") != std::string::npos;
    if (bits == 8 || fused) t.fused = kfuse::pack_fused_rowwise(t.q);
    if (fused) t.q = kfuse::fused_rowwise_table(t.fused, bits, p.cols);
  }
  return t;
}

Reference bag_format_reference(const BagProblem& p, const std::string& format) {
  if (format == "f32") return bag_reference(p, p.table);
  const std::vector<float> values = bag_table_of(p, format).expr().to_vector<float>();
  return bag_reference(p, values.data());
}

}  // namespace kbench
