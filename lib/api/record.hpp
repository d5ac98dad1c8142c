// Helpers shared by the files that record ops (lib/api/*.cpp): operand descriptions for error
// messages, broadcasting and node construction.
#pragma once
#include <string>
#include <vector>

#include "kfuse/error.hpp"
#include "kfuse/tensor.hpp"

namespace kfuse::detail {

/// "[4, 3] f32"
std::string describe(const Tensor& t);
/// "add([4, 3] f32, [5] f32)"
std::string describe_call(const char* op, const std::vector<Tensor>& args);
/// Throws UserError("<op>: <msg>") when `t` is undefined.
void require_defined(const char* op, const Tensor& t);
/// All operands must live on one device; throws UserError otherwise.
Device common_device(const char* op, const std::vector<Tensor>& args);

/// NumPy broadcast of two shapes; throws UserError naming `op` when incompatible.
Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b);
/// Reshape (prepend 1s) and Expand `t` to `shape`; identity when already equal.
Tensor broadcast_to_shape(const Tensor& t, const Shape& shape);

/// A constant tensor of `shape` (hash-consed: equal constants are one node).
Tensor make_const(double value, DType dtype, const Shape& shape, Device dev = Device::cpu());

/// Records a node with the given inputs.
Tensor record(Op op, DType dtype, Shape shape, std::vector<Tensor> inputs, Attrs attrs = {});
/// The same over input nodes (moved into the node when it is new), on the first input's
/// device: the element-wise hot path, which builds no vector of Tensors.
Tensor record_nodes(Op op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs = {});

/// Sorted, unique, normalised axes of `x` (empty input = all axes); errors name the call.
std::vector<int64_t> normalize_axes(const char* op, const Axes& axes, const Tensor& x);
/// Normalises a possibly negative axis of `x`; `new_axis` allows one past the end (unsqueeze).
/// Throws UserError naming the call, the operand and the valid range.
int64_t tensor_axis(const char* op, const Tensor& x, int64_t axis, bool new_axis = false);

/// A double for messages: "2", "0.5", "1e+20", "nan" (not std::to_string's "2.000000").
std::string num_str(double v);

/// Casts when the dtype differs (no node otherwise).
Tensor cast_if_needed(const Tensor& t, DType dt);

}  // namespace kfuse::detail
