#include "kfuse/shape.hpp"

#include "kfuse/error.hpp"

namespace kfuse {

bool shape_fits(std::span<const int64_t> s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return false;
    if (d > 0 && (__builtin_mul_overflow(n, d, &n) || n > kMaxNumel)) return false;
  }
  return true;
}

void throw_bad_shape(const std::string& what, std::span<const int64_t> s) {
  std::string shape = shape_str(Shape(s.begin(), s.end()));
  for (int64_t d : s)
    if (d < 0) throw UserError(what + ": shape " + shape + " has a negative dimension; sizes must be >= 0");
  bool empty = false;
  for (int64_t d : s) empty |= d == 0;
  // A size-0 shape has no elements, but its strides are products of the other sizes.
  throw UserError(what + ": shape " + shape +
                  (empty ? ": the product of its non-zero sizes exceeds 2^53 (" : " has more than 2^53 elements (") +
                  std::to_string(kMaxNumel) +
                  ", the most a tensor may have, expanded views included); use smaller sizes");
}

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
