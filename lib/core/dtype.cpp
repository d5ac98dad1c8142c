#include "kfuse/dtype.hpp"

#include <algorithm>

namespace kfuse {

namespace {
struct DTypeInfo {
  const char* name;
  size_t size;
  DTypeCategory category;
};
constexpr DTypeInfo kInfo[] = {
#define KFUSE_X(e, n, s, c) {n, s, static_cast<DTypeCategory>(c)},
    KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
};
}  // namespace

const char* dtype_name(DType t) { return kInfo[static_cast<int>(t)].name; }
size_t dtype_size(DType t) { return kInfo[static_cast<int>(t)].size; }
DTypeCategory dtype_category(DType t) { return kInfo[static_cast<int>(t)].category; }

DType promote_types(DType a, DType b) {
  auto ca = dtype_category(a), cb = dtype_category(b);
  if (ca != cb) return ca > cb ? a : b;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

DType promote_with_scalar(DType tensor, DTypeCategory scalar_cat) {
  if (scalar_cat <= dtype_category(tensor)) return tensor;
  return scalar_cat == DTypeCategory::Float ? kDefaultFloat : DType::I64;
}

DType to_float_type(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace kfuse
