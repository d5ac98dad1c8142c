#include "kfuse/dtype.hpp"

#include <algorithm>

namespace kfuse {

namespace {
constexpr const char* kNames[] = {
#define KFUSE_X(e, n, s, c) n,
    KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
};
}  // namespace

const char* dtype_name(DType t) { return kNames[static_cast<int>(t)]; }

DType compute_type(DType t) {
  switch (t) {
    case DType::U8:
    case DType::I8: return DType::I32;
    case DType::F16:
    case DType::BF16: return DType::F32;
    default: return t;
  }
}

DType promote_types(DType a, DType b) {
  auto ca = dtype_category(a), cb = dtype_category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (a != b && dtype_size(a) == dtype_size(b))
    return ca == DTypeCategory::Float ? DType::F32 : DType::I32;  // u8/i8, f16/bf16
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

DType promote_with_scalar(DType tensor, DTypeCategory scalar_cat) {
  if (scalar_cat <= dtype_category(tensor)) return tensor;
  return scalar_cat == DTypeCategory::Float ? kDefaultFloat : DType::I64;
}

DType to_float_type(DType t) { return is_float(t) ? t : DType::F32; }

}  // namespace kfuse
