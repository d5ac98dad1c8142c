#include "kfuse/op.hpp"

#include <cstddef>
#include <string_view>

namespace kfuse {

namespace {
struct OpInfo {
  const char* name;
  OpKind kind;
  int arity;
  double tol;
  bool bitwise = false;  // ops.def rule Bitwise or Shift
};

constexpr bool bitwise_rule(std::string_view rule) { return rule == "Bitwise" || rule == "Shift"; }

constexpr OpInfo kOps[] = {
    {"buffer", OpKind::Source, 0, 0},      {"const", OpKind::Source, 0, 0},
    {"iota", OpKind::Source, 0, 0},        {"rand", OpKind::Source, 0, 0},
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) {str, OpKind::ElemWise, 1, tol, bitwise_rule(#rule)},
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) {str, OpKind::ElemWise, 2, tol, bitwise_rule(#rule)},
#include "kfuse/ops.def"
    {"cast", OpKind::ElemWise, 1, 0},      {"where", OpKind::ElemWise, 3, 0},
    {"fma", OpKind::ElemWise, 3, 2e-7},    {"sum", OpKind::Reduce, 1, 0},
    {"prod", OpKind::Reduce, 1, 0},        {"max", OpKind::Reduce, 1, 0},
    {"min", OpKind::Reduce, 1, 0},         {"argmax", OpKind::Reduce, 1, 0},
    {"argmin", OpKind::Reduce, 1, 0},      {"segment_sum", OpKind::Reduce, 3, 0},
    {"segment_max", OpKind::Reduce, 3, 0}, {"reshape", OpKind::Injective, 1, 0},
    {"permute", OpKind::Injective, 1, 0},  {"expand", OpKind::Broadcast, 1, 0},
    {"slice", OpKind::Injective, 1, 0},    {"pad", OpKind::Injective, 1, 0},
    {"concat", OpKind::Injective, -1, 0},  {"gather", OpKind::Injective, 2, 0},
    {"matmul", OpKind::Contraction, 2, 0}, {"check_labels", OpKind::Opaque, 1, 0},
    {"check_index", OpKind::Opaque, 1, 0},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(Op::Count_), "op table out of sync");

const OpInfo& info(Op op) { return kOps[static_cast<int>(op)]; }
}  // namespace

const char* op_name(Op op) { return info(op).name; }
OpKind op_kind(Op op) { return info(op).kind; }
int op_arity(Op op) { return info(op).arity; }
double op_tolerance_f32(Op op) { return info(op).tol; }
bool is_bitwise(Op op) { return info(op).bitwise; }

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::ElemWise: return "elemwise";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Injective: return "injective";
    case OpKind::Reduce: return "reduce";
    case OpKind::Contraction: return "contraction";
    case OpKind::Source: return "source";
    case OpKind::Opaque: return "opaque";
  }
  return "?";
}

bool is_unary_elementwise(Op op) { return op_kind(op) == OpKind::ElemWise && op_arity(op) == 1; }
bool is_binary_elementwise(Op op) { return op_kind(op) == OpKind::ElemWise && op_arity(op) == 2; }
bool is_elementwise(Op op) { return op_kind(op) == OpKind::ElemWise; }
bool is_reduction(Op op) { return op_kind(op) == OpKind::Reduce; }
bool is_segment_reduction(Op op) { return op == Op::SegmentSum || op == Op::SegmentMax; }
bool is_view(Op op) { return op_kind(op) == OpKind::Injective || op_kind(op) == OpKind::Broadcast; }

}  // namespace kfuse
