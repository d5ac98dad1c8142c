// kfuse's side of the embedding-bag benchmark: the table in each storage format, made once and
// shared by kfuse_compare (bench/kfuse_impl.cpp) and kfuse_bag (bench/embedding_bag.cpp). The
// plain problem (table, ids, bytes per row) is bench/bag_problem.hpp, which peers include.
#pragma once
#include <kfuse/kfuse.hpp>
#include <kfuse/quantize.hpp>

#include <string>
#include <vector>

#include "bag_problem.hpp"

namespace kbench {

/// The table formats, in the order they are timed: "f32", "f16", "8-bit", "8-bit fused",
/// "4-bit", "4-bit fused" (quantize_rowwise's two tensors, or PyTorch's fused rows).
const std::vector<std::string>& bag_formats();

/// An f32 table in one storage format: the f32 borrow itself, or the stored copy behind the lazy
/// f32 expression the bag reads (f16 -> cast, quantised -> dequantize_rowwise).
struct BagTable {
  kfuse::Tensor stored;     ///< f32, f16
  kfuse::QuantizedTable q;  ///< the quantised formats
  /// The codes in PyTorch's fused rows, which its quantised bags read: the table itself of the
  /// "fused" formats, a copy of the same codes for "8-bit" (at 4 bits the fused rows round the
  /// scale and bias to f16, so only "4-bit fused" has one). Undefined otherwise.
  kfuse::Tensor fused;
  kfuse::Tensor expr() const;
};

/// The f32 table of `p` in `format`, made once per (table, format) for the process (kfuse
/// computes the copies).
const BagTable& bag_table_of(const BagProblem& p, const std::string& format);

/// fp64 bags of `p` over the values `format` holds (dequantised as kfuse does): the bag is
/// checked, not the format.
Reference bag_format_reference(const BagProblem& p, const std::string& format);

}  // namespace kbench
