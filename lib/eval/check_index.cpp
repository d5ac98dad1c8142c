#include "check_index.hpp"

#include <string>

#include "kfuse/error.hpp"

namespace kfuse::detail {

namespace {

const char* use_name(IndexUse use) {
  switch (use) {
    case IndexUse::Gather: return "gather";
    case IndexUse::IndexSelect: return "index_select";
    case IndexUse::Embedding: return "embedding";
    case IndexUse::EmbeddingBag:
    case IndexUse::BagOffsets: return "embedding_bag";
  }
  return "?";
}

// "[1, 2]": the multi-index of row-major position `lin` in `shape`.
std::string position(int64_t lin, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? lin % shape[d] : 0;
    lin = shape[d] ? lin / shape[d] : 0;
  }
  return shape_str(idx);
}

}  // namespace

void check_indices(const std::vector<Num>& values, const Shape& shape, int64_t size, IndexUse use) {
  const std::string op = use_name(use);
  const bool offsets = use == IndexUse::BagOffsets;
  const std::string what = offsets ? "offset " : "index ";
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i].i;
    const bool first_bad = offsets && i == 0 && v != 0, decreasing = offsets && i > 0 && v < values[i - 1].i;
    // (the message only for a bad value: built for every id it cost more than the bag itself)
    if (v >= 0 && v < size && !first_bad && !decreasing) continue;
    const std::string at = what + std::to_string(v) + " at position " + position(static_cast<int64_t>(i), shape);
    if (v < 0 || v >= size) {
      if (offsets)
        throw UserError(op + ": " + at + " is out of range: offsets must be in [0, " + std::to_string(size - 1) +
                        "] (the number of ids)");
      throw UserError(op + ": " + at + " is out of range: indices must be in [0, " + std::to_string(size) +
                      ") (negative indices are not supported)");
    }
    if (first_bad) throw UserError(op + ": " + at + ": the first offset must be 0 (bag 0 starts at the first id)");
    throw UserError(op + ": " + at + " is smaller than the previous offset " + std::to_string(values[i - 1].i) +
                    ": offsets must not decrease");
  }
}

}  // namespace kfuse::detail
