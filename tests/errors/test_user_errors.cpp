// Every user error with its exact message. Each one is thrown when the op is recorded: the
// statements below only record (none evaluates), so a lazy or fused eval() cannot move them.
// A message names the op, the operands' shapes and dtypes, and what would fix the call.
#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

Tensor f32(Shape s) { return zeros(std::move(s)); }
Tensor of(Shape s, DType dt) { return zeros(std::move(s), dt); }

TEST(UserErrors, Broadcasting) {
  EXPECT_USER_ERROR(add(f32({4, 3}), f32({5})),
                    "add: cannot broadcast [4, 3] f32 with [5] f32: dimension -1 is 3 vs 5; sizes must be equal or 1 "
                    "(reshape or expand an operand)");
  EXPECT_USER_ERROR(f32({2, 3, 4}) * of({3, 3, 1}, DType::I32),
                    "mul: cannot broadcast [2, 3, 4] f32 with [3, 3, 1] i32: dimension -3 is 2 vs 3; sizes must be "
                    "equal or 1 (reshape or expand an operand)");
  EXPECT_USER_ERROR(lt(f32({0}), f32({2})),
                    "lt: cannot broadcast [0] f32 with [2] f32: dimension -1 is 0 vs 2; sizes must be equal or 1 "
                    "(reshape or expand an operand)");
  EXPECT_USER_ERROR(where(of({3}, DType::Bool), f32({4}), f32({4})),
                    "where: cannot broadcast [3] bool with [4] f32: dimension -1 is 3 vs 4; sizes must be equal or 1 "
                    "(reshape or expand an operand)");
  EXPECT_USER_ERROR(f32({2}).expand({3}),
                    "expand([2] f32) to [3]: dimension 0 has size 2, which is not 1 and differs from 3; only size-1 "
                    "dimensions can be expanded");
  EXPECT_USER_ERROR(
      broadcast_to(f32({2, 1}), {2}),
      "expand([2, 1] f32) to [2]: the target has fewer dimensions than the tensor; expand can only add or "
      "grow dimensions");
  EXPECT_USER_ERROR(f32({1}).expand({-2}),
                    "expand([1] f32) to [-2]: dimension 0 is negative; sizes must be >= 0, or -1 to keep a dimension");
}

TEST(UserErrors, Axes) {
  EXPECT_USER_ERROR(sum(f32({2, 3}), 2),
                    "sum([2, 3] f32): axis 2 is out of range for a tensor of rank 2; use an axis in [-2, 1]");
  EXPECT_USER_ERROR(max(f32({2, 3}), Axes{-3}),
                    "max([2, 3] f32): axis -3 is out of range for a tensor of rank 2; use an axis in [-2, 1]");
  EXPECT_USER_ERROR(mean(f32({2, 3}), Axes{1, -1}),
                    "mean([2, 3] f32): axis -1 is given twice (axes [1, -1]); list each axis once");
  EXPECT_USER_ERROR(softmax(f32({4}), 1),
                    "softmax([4] f32): axis 1 is out of range for a tensor of rank 1; use an axis in [-1, 0]");
  EXPECT_USER_ERROR(normalize(f32({4}), 3),
                    "normalize([4] f32): axis 3 is out of range for a tensor of rank 1; use an axis in [-1, 0]");
  EXPECT_USER_ERROR(f32({2, 3}).unsqueeze(3),
                    "unsqueeze([2, 3] f32): axis 3 is out of range for a tensor of rank 2 (with the new axis); use an "
                    "axis in [-3, 2]");
  EXPECT_USER_ERROR(f32({2, 3}).squeeze(0),
                    "squeeze([2, 3] f32): axis 0 has size 2, not 1; only size-1 axes can be squeezed");
  EXPECT_USER_ERROR(f32({2, 3}).transpose(0, 2),
                    "transpose([2, 3] f32): axis 2 is out of range for a tensor of rank 2; use an axis in [-2, 1]");
  EXPECT_USER_ERROR(f32({2, 3, 4}).flatten(2, 1),
                    "flatten([2, 3, 4] f32): start axis 2 comes after end axis 1; pass start <= end");
  EXPECT_USER_ERROR(f32({2, 3}).size(-3),
                    "size([2, 3] f32): axis -3 is out of range for a tensor of rank 2; use an axis in [-2, 1]");
  EXPECT_USER_ERROR(
      logsumexp(f32({}), 0),
      "logsumexp([] f32): axis 0 is out of range: a tensor of rank 0 has no axes; reshape it to [1] first");
}

TEST(UserErrors, Reshape) {
  EXPECT_USER_ERROR(
      f32({2, 3}).reshape({4, 2}),
      "reshape([2, 3] f32) to [4, 2]: size mismatch: 6 elements cannot be viewed as 8; the product of the "
      "new shape must equal the old one");
  EXPECT_USER_ERROR(f32({2, 3}).reshape({-1, -1}),
                    "reshape([2, 3] f32) to [-1, -1]: only one dimension can be -1 (inferred); give the others "
                    "explicitly");
  EXPECT_USER_ERROR(
      f32({2, 3}).reshape({4, -1}),
      "reshape([2, 3] f32) to [4, -1]: cannot infer the -1 dimension: 6 elements are not a multiple of 4");
  EXPECT_USER_ERROR(f32({2, 3}).reshape({-2, -3}),
                    "reshape([2, 3] f32) to [-2, -3]: dimension 0 is negative; sizes must be >= 0, or -1 for one "
                    "inferred dimension");
  EXPECT_USER_ERROR(
      f32({0, 3}).reshape({0, -1}),
      "reshape([0, 3] f32) to [0, -1]: cannot infer the -1 dimension: 0 elements are not a multiple of 0");
}

TEST(UserErrors, Slice) {
  EXPECT_USER_ERROR(
      f32({5}).slice({Range{0, 4, 0}}),
      "slice([5] f32): step 0 on axis 0 must be positive; negative steps (reversal) are not supported, use "
      "a step >= 1");
  EXPECT_USER_ERROR(f32({3, 5}).slice({Range::all(), Range{0, std::nullopt, -1}}),
                    "slice([3, 5] f32): step -1 on axis 1 must be positive; negative steps (reversal) are not "
                    "supported, use a step >= 1");
  EXPECT_USER_ERROR(f32({5}).slice({Range{6}}),
                    "slice([5] f32): start 6 on axis 0 is out of bounds for size 5; use a start in [-5, 5]");
  EXPECT_USER_ERROR(f32({5}).slice({Range{-6}}),
                    "slice([5] f32): start -6 on axis 0 is out of bounds for size 5; use a start in [-5, 5]");
  EXPECT_USER_ERROR(f32({5}).slice({Range::all(), Range::all()}),
                    "slice([5] f32): 2 ranges given for a tensor of rank 1; give at most one per axis");
}

TEST(UserErrors, Dtypes) {
  Tensor b = of({3}, DType::Bool);
  EXPECT_USER_ERROR(b + b,
                    "add([3] bool, [3] bool): arithmetic is not defined on bool tensors; cast to an integer or "
                    "float dtype first");
  EXPECT_USER_ERROR(-b,
                    "neg([3] bool): arithmetic is not defined on bool tensors; cast to an integer or float dtype "
                    "first");
  EXPECT_USER_ERROR(kfuse::floor(b),
                    "floor([3] bool): arithmetic is not defined on bool tensors; cast to an integer "
                    "or float dtype first");
  EXPECT_USER_ERROR(mean(of({3}, DType::I32)),
                    "mean([3] i32): mean needs a floating-point input; cast it first, e.g. x.cast(DType::F32)");
  EXPECT_USER_ERROR(var(of({3}, DType::I64)),
                    "var([3] i64): var needs a floating-point input; cast it first, e.g. x.cast(DType::F32)");
  EXPECT_USER_ERROR(kfuse::std(b),
                    "std([3] bool): std needs a floating-point input; cast it first, e.g. "
                    "x.cast(DType::F32)");
  EXPECT_USER_ERROR(where(f32({3}), f32({3}), f32({3})),
                    "where([3] f32, [3] f32, [3] f32): the condition must be bool; compare it (x != 0) or cast it to "
                    "bool first");
  EXPECT_USER_ERROR(matmul(b, f32({3, 2})),
                    "matmul([3] bool, [3, 2] f32): bool operands are not supported; cast them first");
  EXPECT_USER_ERROR(rand({2}, 1, DType::I32), "rand: dtype i32 is not a float type; use f32 or f64");
  EXPECT_USER_ERROR(randn({2}, 1, DType::Bool), "randn: dtype bool is not a float type; use f32 or f64");
  EXPECT_USER_ERROR(cross_entropy(f32({2, 3}), f32({2})),
                    "cross_entropy([2, 3] f32, [2] f32): expects logits [B, C] and integer labels [B]");
}

// Bitwise ops take integers (and bools, except shifts); a scalar must be a value of the
// tensor's dtype. Before the ops existed a nibble took float arithmetic (floor(b / 16)).
TEST(UserErrors, BitwiseOperands) {
  Tensor b = of({3}, DType::Bool), i = of({3}, DType::I32), u = of({3}, DType::U8);
  EXPECT_USER_ERROR(f32({3}) & i,
                    "bitwise_and([3] f32, [3] i32): bitwise_and is defined on integer and bool tensors only, not "
                    "f32; cast the operands to an integer dtype first (x.cast(DType::I32))");
  EXPECT_USER_ERROR(~of({2}, DType::F64),
                    "bitwise_not([2] f64): bitwise_not is defined on integer and bool tensors only, not f64; cast "
                    "the operands to an integer dtype first (x.cast(DType::I32))");
  EXPECT_USER_ERROR(f32({3}) >> 1,
                    "shift_right([3] f32, [3] f32): shift_right is defined on integer tensors only, not f32; cast "
                    "the operands to an integer dtype first (x.cast(DType::I32))");
  EXPECT_USER_ERROR(b << b,
                    "shift_left([3] bool, [3] bool): shift_left is not defined on bool tensors; cast the operands "
                    "to an integer dtype first");
  EXPECT_USER_ERROR(u & 256,
                    "bitwise_and([3] u8, 256): the scalar 256 is not a value of u8; cast the tensor to a wider "
                    "integer dtype or pass the scalar as a tensor");
  EXPECT_USER_ERROR(u >> -1,
                    "shift_right([3] u8, -1): the scalar -1 is not a value of u8; cast the tensor to a wider "
                    "integer dtype or pass the scalar as a tensor");
  EXPECT_USER_ERROR(bitwise_xor(of({3}, DType::I64), int64_t{1} << 60),
                    "bitwise_xor([3] i64, 1152921504606846976): the scalar 1152921504606846976 is not a value of "
                    "i64 that a scalar constant holds exactly (|s| <= 2^53); cast the tensor to a wider integer "
                    "dtype or pass the scalar as a tensor");
}

// Labels are data: computed ones are checked at record time, lazy ones by the eval that computes
// them (before a kernel reads them). Without the check, {0, 5} gave 0.342 and {-1, 1} 1.379.
TEST(UserErrors, CrossEntropyLabelsOutOfRange) {
  Tensor logits = f32({2, 3});
  auto labels = [](std::vector<int64_t> v) { return Tensor::from_vector(v, {2}); };
  EXPECT_USER_ERROR(cross_entropy(logits, labels({0, 5})),
                    "cross_entropy: label 5 at index 1 is out of range for 3 classes; labels must be in [0, 3) or "
                    "equal ignore_index (-100)");
  EXPECT_USER_ERROR(cross_entropy(logits, labels({-1, 1})),
                    "cross_entropy: label -1 at index 0 is out of range for 3 classes; labels must be in [0, 3) or "
                    "equal ignore_index (-100)");
  EXPECT_USER_ERROR(cross_entropy(logits, labels({-100, 1}), 7),
                    "cross_entropy: label -100 at index 0 is out of range for 3 classes; labels must be in [0, 3) or "
                    "equal ignore_index (7)");
  EXPECT_NO_THROW(cross_entropy(logits, labels({-100, 2})));
  // Lazy labels: recording succeeds, evaluating throws (the reference evaluator too).
  Tensor lazy = Tensor::from_vector(std::vector<int32_t>{0, 1}, {2}) * 3;
  Tensor loss = cross_entropy(logits, lazy);
  const char* lazy_msg =
      "cross_entropy: label 3 at index 1 is out of range for 3 classes; labels must be in [0, 3) or equal "
      "ignore_index (-100)";
  EXPECT_USER_ERROR(loss.eval(), lazy_msg);
  EXPECT_USER_ERROR(reference_values(loss), lazy_msg);
  EXPECT_USER_ERROR(cross_entropy(logits, full({2}, 5, DType::I64)).item<float>(),
                    "cross_entropy: label 5 at index 0 is out of range for 3 classes; labels must be in [0, 3) or "
                    "equal ignore_index (-100)");
  EXPECT_EQ(cross_entropy(logits, full({2}, 2, DType::I64)).item<float>(),
            cross_entropy(logits, labels({2, 2})).item<float>());
  EXPECT_USER_ERROR(cross_entropy(logits, lazy + 1).item<float>(),
                    "cross_entropy: label 4 at index 1 is out of range for 3 classes; labels must be in [0, 3) or "
                    "equal ignore_index (-100)");
}

TEST(UserErrors, Matmul) {
  EXPECT_USER_ERROR(
      matmul(f32({2, 3}), f32({4, 5})),
      "matmul([2, 3] f32, [4, 5] f32): inner dimensions differ (3 vs 4); the last axis of the first operand "
      "must equal the second-to-last of the second (transpose one operand?)");
  EXPECT_USER_ERROR(
      matmul(f32({3}), f32({4})),
      "matmul([3] f32, [4] f32): inner dimensions differ (3 vs 4); the last axis of the first operand must "
      "equal the second-to-last of the second (transpose one operand?)");
  EXPECT_USER_ERROR(
      matmul(f32({2, 4, 5}), of({3, 5, 6}, DType::F64)),
      "matmul([2, 4, 5] f32, [3, 5, 6] f64): batch dimensions [2] and [3] cannot broadcast; sizes must be "
      "equal or 1 (reshape or expand an operand)");
  EXPECT_USER_ERROR(matmul(f32({}), f32({3})), "matmul([] f32, [3] f32): operands must have at least one dimension");
}

TEST(UserErrors, Permute) {
  EXPECT_USER_ERROR(
      f32({2, 3}).permute({0}),
      "permute([2, 3] f32) with [0]: the permutation has 1 axes but the tensor has rank 2; list every axis "
      "once");
  EXPECT_USER_ERROR(f32({2, 3}).permute({1, -1}),
                    "permute([2, 3] f32) with [1, -1]: axis 1 appears twice; list every axis once");
  EXPECT_USER_ERROR(permute(f32({2, 3}), {0, 2}),
                    "permute([2, 3] f32): axis 2 is out of range for a tensor of rank 2; use an axis in [-2, 1]");
}

TEST(UserErrors, PadAndConcat) {
  EXPECT_USER_ERROR(pad(f32({2, 3}), {{0, 0}, {0, -1}}),
                    "pad([2, 3] f32): negative padding (0, -1) on axis 1; pads must be >= 0 (use slice to remove "
                    "elements)");
  EXPECT_USER_ERROR(pad(f32({2}), {{1, 1}, {1, 1}}),
                    "pad([2] f32): 2 (before, after) pairs for rank 1; give at most one pair per axis");
  EXPECT_USER_ERROR(concat({}, 0), "concat: no tensors given; pass at least one");
  EXPECT_USER_ERROR(concat({f32({2, 3}), f32({3})}, 0),
                    "concat([2, 3] f32, [3] f32): all tensors must have the same rank; reshape them first");
  EXPECT_USER_ERROR(concat({f32({2, 3}), of({3, 4}, DType::I32)}, 0),
                    "concat([2, 3] f32, [3, 4] i32): sizes differ on axis 1 (3 vs 4); all axes but the concatenation "
                    "axis must match");
  EXPECT_USER_ERROR(concat({f32({2, 3}), f32({2, 3})}, 2),
                    "concat([2, 3] f32): axis 2 is out of range for a tensor of rank 2; use an axis in [-2, 1]");
}

TEST(UserErrors, ResultsAndData) {
  EXPECT_USER_ERROR(
      f32({2, 3}).item<float>(),
      "item: the tensor has 6 elements (shape [2, 3]); item() needs exactly one; use to_vector() or index "
      "first");
  EXPECT_USER_ERROR(f32({0}).item<float>(),
                    "item: the tensor has 0 elements (shape [0]); item() needs exactly one; use to_vector() or index "
                    "first");
  EXPECT_USER_ERROR(f32({2}).data_ptr<double>(),
                    "data_ptr: the tensor has dtype f32, not f64; use to_vector<T>() to convert, or cast() first");
  EXPECT_USER_ERROR(of({2}, DType::I64).data_ptr<int32_t>(),
                    "data_ptr: the tensor has dtype i64, not i32; use to_vector<T>() to convert, or cast() first");
  Tensor undefined;
  EXPECT_USER_ERROR(undefined.eval(), "eval: the Tensor is undefined (default-constructed)");
  EXPECT_USER_ERROR(undefined.shape(), "shape: the Tensor is undefined (default-constructed)");
  EXPECT_USER_ERROR(exp(undefined),
                    "exp: an operand is an undefined (default-constructed) Tensor; create it with "
                    "from_vector, full, rand or another op first");
  EXPECT_USER_ERROR(add(f32({1}), undefined),
                    "add: an operand is an undefined (default-constructed) Tensor; create it "
                    "with from_vector, full, rand or another op first");
}

TEST(UserErrors, CreationAndMisc) {
  EXPECT_USER_ERROR(Tensor::from_vector<float>({1, 2, 3}, {2, 2}),
                    "from_vector: 3 values cannot fill shape [2, 2] (4 elements); pass exactly that many values");
  EXPECT_USER_ERROR(zeros({2, -1}), "zeros: shape [2, -1] has a negative dimension; sizes must be >= 0");
  EXPECT_USER_ERROR(ones({-3}, DType::I32), "ones: shape [-3] has a negative dimension; sizes must be >= 0");
  EXPECT_USER_ERROR(full({-3}, 2), "full: shape [-3] has a negative dimension; sizes must be >= 0");
  EXPECT_USER_ERROR(rand({-3}, 0), "rand: shape [-3] has a negative dimension; sizes must be >= 0");
  EXPECT_USER_ERROR(arange(0, 5, 0), "arange(0, 5, 0): bounds and step must be finite and step non-zero");
  EXPECT_USER_ERROR(arange(0, kInf, 1), "arange(0, inf, 1): bounds and step must be finite and step non-zero");
  EXPECT_USER_ERROR(linspace(0, 1, -1), "linspace: count -1 is negative; pass count >= 0");
  EXPECT_USER_ERROR(clamp(f32({2}), 2.0, 1.5), "clamp([2] f32): lower bound 2 exceeds upper bound 1.5; pass lo <= hi");
  EXPECT_USER_ERROR(var(f32({3}), {}, -1), "var([3] f32): correction -1 is negative; use 0 (population) or 1 (sample)");
  EXPECT_USER_ERROR(
      max(f32({2, 0}), 1),
      "max([2, 0] f32): cannot reduce over axis 1 of size 0 (the result has no identity); slice or pad to "
      "a non-empty axis first");
  EXPECT_USER_ERROR(
      argmin(f32({0})),
      "argmin([0] f32): cannot reduce over axis 0 of size 0 (the result has no identity); slice or pad to "
      "a non-empty axis first");
  EXPECT_USER_ERROR(layer_norm(f32({2, 3}), {2}),
                    "layer_norm([2, 3] f32, normalized_shape [2]): the normalized shape must equal the trailing "
                    "dimensions of the input");
  EXPECT_USER_ERROR(layer_norm(f32({2, 3}), {3}, f32({2})),
                    "layer_norm([2, 3] f32): weight/bias has shape [2], expected the normalized shape [3]");
  EXPECT_USER_ERROR(rms_norm(f32({2, 3}), f32({2})), "rms_norm([2, 3] f32): weight has shape [2], expected [3]");
  EXPECT_USER_ERROR(rms_norm(f32({})), "rms_norm([] f32): needs at least one dimension");
}

// Shapes beyond kMaxNumel (2^53) elements are refused where they are made, naming the call: their
// element counts used to wrap (sum(zeros({2^32, 2^32})) evaluated to 0) or reach the kernels'
// index arithmetic. Every shape here is virtual: nothing is allocated.
TEST(UserErrors, ShapesBeyondTheElementLimit) {
  const std::string limit =
      " has more than 2^53 elements (9007199254740992, the most a tensor may have, expanded "
      "views included); use smaller sizes";
  const int64_t g32 = int64_t{1} << 32, g30 = int64_t{1} << 30;
  EXPECT_USER_ERROR(sum(zeros({g32, g32})), "zeros: shape [4294967296, 4294967296]" + limit);
  EXPECT_USER_ERROR(zeros({3, int64_t{1} << 62}) + 1.0, "zeros: shape [3, 4611686018427387904]" + limit);
  EXPECT_USER_ERROR(full({1 << 21, 1 << 21, 1 << 21}, 1) * 2.0, "full: shape [2097152, 2097152, 2097152]" + limit);
  EXPECT_USER_ERROR(ones({g32, 0, g32}),
                    "ones: shape [4294967296, 0, 4294967296]: the product of its non-zero sizes "
                    "exceeds 2^53 (9007199254740992, the most a tensor may have, expanded views "
                    "included); use smaller sizes");
  EXPECT_USER_ERROR(rand({g32, g32}, 1), "rand: shape [4294967296, 4294967296]" + limit);
  EXPECT_USER_ERROR(Tensor::from_vector(std::vector<float>{}, {g32, g32}),
                    "from_vector: shape [4294967296, 4294967296]" + limit);
  EXPECT_USER_ERROR(Tensor::borrow(static_cast<float*>(nullptr), {g32, g32}),
                    "borrow: shape [4294967296, 4294967296]" + limit);
  EXPECT_USER_ERROR(arange(0, 1e30, 1),
                    "arange(0, 1e+30, 1): 1e+30 elements are more than 2^53 (9007199254740992, "
                    "the most a tensor may have); use fewer points");
  EXPECT_USER_ERROR(arange(-1e308, 1e308, 1),
                    "arange(-1e+308, 1e+308, 1): inf elements are more than 2^53 "
                    "(9007199254740992, the most a tensor may have); use fewer points");
  EXPECT_USER_ERROR(linspace(0, 1, int64_t{1} << 60),
                    "linspace: 1.15292e+18 elements are more than 2^53 "
                    "(9007199254740992, the most a tensor may have); use fewer points");
  // views and broadcasts of small tensors can describe too many elements
  EXPECT_USER_ERROR(f32({1, 1}).expand({g30, g30}), "expand([1, 1] f32): shape [1073741824, 1073741824]" + limit);
  EXPECT_USER_ERROR(f32({g30, 1}) * f32({1, g30}),
                    "mul([1073741824, 1] f32, [1, 1073741824] f32): shape [1073741824, 1073741824]" + limit);
  EXPECT_USER_ERROR(where(of({g30, 1}, DType::Bool), f32({1, g30}), f32({1})),
                    "where([1073741824, 1] bool, [1, 1073741824] f32): shape [1073741824, 1073741824]" + limit);
  EXPECT_USER_ERROR(f32({0}).reshape({g32, g32}), "reshape([0] f32): shape [4294967296, 4294967296]" + limit);
  EXPECT_USER_ERROR(f32({4}).reshape({int64_t{1} << 62, 4}),
                    "reshape([4] f32): shape [4611686018427387904, 4]" + limit);
  EXPECT_USER_ERROR(pad(f32({4}), {{int64_t{1} << 53, 0}}), "pad([4] f32): shape [9007199254740996]" + limit);
  EXPECT_USER_ERROR(pad(f32({4}), {{1, INT64_MAX}}), "pad([4] f32): shape [9223372036854775807]" + limit);
  EXPECT_USER_ERROR(
      concat({f32({int64_t{1} << 52}), f32({int64_t{1} << 52}), f32({1})}, 0),
      "concat([4503599627370496] f32, [4503599627370496] f32, [1] f32): shape [9007199254740993]" + limit);
  EXPECT_USER_ERROR(matmul(f32({g30, 1}), f32({1, g30})),
                    "matmul([1073741824, 1] f32, [1, 1073741824] f32): shape [1073741824, 1073741824]" + limit);
  // any other node (a pass, a plugin) is checked where it is interned, naming its op
  EXPECT_USER_ERROR(Tensor(make_node(Op::Const, DType::F32, {g32, g32}, {}, Attrs{{}, {0.0}})),
                    "const: shape [4294967296, 4294967296]" + limit);
  EXPECT_USER_ERROR(Tensor(make_node(Op::Const, DType::F32, {2, -1}, {}, Attrs{{}, {0.0}})),
                    "const: shape [2, -1] has a negative dimension; sizes must be >= 0");
  // the limit itself is allowed
  EXPECT_EQ(f32({1}).expand({int64_t{1} << 26, int64_t{1} << 27}).numel(), kMaxNumel);
  EXPECT_EQ(f32({0, kMaxNumel}).numel(), 0);
}

TEST(UserErrors, AreUserErrorsAndKfuseErrors) {
  // the hierarchy lets callers catch every kfuse error at once, or only their own mistakes
  try {
    (void)add(f32({4, 3}), f32({5}));
    FAIL() << "no error";
  } catch (const Error& e) { EXPECT_NE(dynamic_cast<const UserError*>(&e), nullptr); }
}

}  // namespace
