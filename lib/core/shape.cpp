#include "kfuse/shape.hpp"

#include "kfuse/error.hpp"

namespace kfuse {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t normalize_axis(const char* op, int64_t axis, int64_t ndim) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) {
    throw UserError(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for a tensor of rank " +
                    std::to_string(ndim) + "; use an axis in [" + std::to_string(-ndim) + ", " +
                    std::to_string(ndim - 1) + "]");
  }
  return a;
}

}  // namespace kfuse
