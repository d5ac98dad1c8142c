// Index ops (include/kfuse/index_ops.hpp). Every one records a Gather node (a load at a
// data-dependent position, which fuses with the producers of the gathered values and with its
// consumers); embedding_bag adds a segment reduction over the bags (SegmentSum/SegmentMax, whose
// per-bag extent is data), or a plain reduction for 2-D ids (fixed-size bags).
#include "kfuse/index_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "eval/check_index.hpp"
#include "eval/index_scan.hpp"
#include "eval/reference_eval.hpp"
#include "record.hpp"

namespace kfuse {
using namespace detail;

namespace {

void require_index_dtype(const char* op, const char* what, const Tensor& t, const std::vector<Tensor>& call) {
  if (t.dtype() != DType::I32 && t.dtype() != DType::I64)
    throw UserError(describe_call(op, call) + ": " + what + " must be i32 or i64, got " + dtype_name(t.dtype()) +
                    "; cast them first, e.g. ids.cast(DType::I64)");
}

// Whether the host i32/i64 indices in `st` all pass check_indices, scanned in place: converting
// 246k ids to exact values first cost about half of a bag kernel's time (kfuse_bag).
template <typename T>
bool all_valid(const T* v, int64_t n, int64_t size, IndexUse use) {
  if (use == IndexUse::BagOffsets) {
    if (n > 0 && v[0] != 0) return false;
    for (int64_t i = 1; i < n; ++i)
      if (v[i] < v[i - 1]) return false;
  }
  return all_in_range(v, n, size);
}
bool all_valid(const Storage& st, int64_t size, IndexUse use) {
  if (st.device != Device::cpu()) return false;
  if (st.dtype == DType::I64) return all_valid(static_cast<const int64_t*>(st.data), st.numel, size, use);
  if (st.dtype == DType::I32) return all_valid(static_cast<const int32_t*>(st.data), st.numel, size, use);
  return false;
}

// `index` itself when its values are already known (checked now), else `index` behind a
// CheckIndex step that checks them when they are computed, before any kernel reads with them.
Tensor checked(const Tensor& index, int64_t size, IndexUse use) {
  const Node& n = *index.node();
  if (auto st = n.op == Op::Buffer ? n.storage : n.realized()) {
    // (the exact check, and its message, only when the fast scan finds a bad index)
    if (!all_valid(*st, size, use)) check_indices(storage_values(*st), index.shape(), size, use);
    return index;
  }
  return Tensor(make_node(Op::CheckIndex, index.dtype(), index.shape(), {index.node()},
                          Attrs{{size, static_cast<int64_t>(use)}, {}}, index.device()));
}

Tensor record_gather(const Tensor& x, int64_t axis, const Tensor& index) {
  return record(Op::Gather, x.dtype(), index.shape(), {x, index}, Attrs{{axis}, {}});
}

// index_select with the ids check attributed to `use`; none when the caller checked the ids
// before flattening them (a flattened view is not the computed tensor the record-time check needs).
Tensor select_rows(const char* op, const Tensor& x, int64_t axis_in, const Tensor& index, std::optional<IndexUse> use) {
  require_defined(op, x);
  require_defined(op, index);
  common_device(op, {x, index});
  require_index_dtype(op, "indices", index, {x, index});
  if (index.ndim() != 1) throw UserError(describe_call(op, {x, index}) + ": the indices must be 1-D");
  if (x.ndim() == 0) throw UserError(describe_call(op, {x, index}) + ": the input needs at least one dimension");
  const int64_t axis = tensor_axis(op, x, axis_in);
  Tensor idx = use ? checked(index, x.shape()[axis], *use) : index;
  Shape col(x.shape().size(), 1), out = x.shape();
  col[axis] = out[axis] = index.numel();
  return record_gather(x, axis, idx.reshape(col).expand(out));
}

// The fold identity that padding entries contribute (Max: the dtype's lowest value).
double lowest(DType dt) {
  switch (dt) {
    case DType::U8:
    case DType::Bool: return 0;
    case DType::I8: return -128;
    case DType::I32: return std::numeric_limits<int32_t>::min();
    case DType::I64: return static_cast<double>(std::numeric_limits<int64_t>::min());
    default: return -std::numeric_limits<double>::infinity();
  }
}

}  // namespace

Tensor gather(const Tensor& x, int64_t axis_in, const Tensor& index) {
  require_defined("gather", x);
  require_defined("gather", index);
  common_device("gather", {x, index});
  require_index_dtype("gather", "indices", index, {x, index});
  if (index.ndim() != x.ndim() || x.ndim() == 0)
    throw UserError(describe_call("gather", {x, index}) +
                    ": the index must have the input's number of dimensions (at least one); reshape it");
  const int64_t axis = tensor_axis("gather", x, axis_in);
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != axis && index.shape()[d] > x.shape()[d])
      throw UserError(describe_call("gather", {x, index}) + ": index size " + std::to_string(index.shape()[d]) +
                      " along axis " + std::to_string(d) + " exceeds the input's " + std::to_string(x.shape()[d]) +
                      " (only the gather axis may be larger)");
  return record_gather(x, axis, checked(index, x.shape()[axis], IndexUse::Gather));
}

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  return select_rows("index_select", x, axis, index, IndexUse::IndexSelect);
}

Tensor embedding(const Tensor& table, const Tensor& ids) {
  require_defined("embedding", table);
  require_defined("embedding", ids);
  if (table.ndim() != 2)
    throw UserError(describe_call("embedding", {table, ids}) + ": the table must be 2-D [rows, dim]");
  require_index_dtype("embedding", "ids", ids, {table, ids});
  Shape out = ids.shape();
  out.push_back(table.shape()[1]);
  Tensor ok = checked(ids, table.shape()[0], IndexUse::Embedding);
  return select_rows("embedding", table, 0, ok.reshape({ids.numel()}), std::nullopt).reshape(out);
}

Tensor embedding_bag(const Tensor& table, const Tensor& ids, const Tensor& offsets, BagMode mode,
                     const Tensor& per_sample_weights, std::optional<int64_t> padding_idx) {
  const char* op = "embedding_bag";
  require_defined(op, table);
  require_defined(op, ids);
  std::vector<Tensor> call{table, ids};
  if (offsets.defined()) call.push_back(offsets);
  if (per_sample_weights.defined()) call.push_back(per_sample_weights);
  common_device(op, call);
  if (table.ndim() != 2) throw UserError(describe_call(op, call) + ": the table must be 2-D [rows, dim]");
  require_index_dtype(op, "ids", ids, call);
  if (!(ids.ndim() == 1 && offsets.defined() && offsets.ndim() == 1) && !(ids.ndim() == 2 && !offsets.defined()))
    throw UserError(describe_call(op, call) +
                    ": expects 1-D ids [N] with 1-D offsets [B] (bag starts), or 2-D ids [B, L] without offsets");
  if (offsets.defined()) require_index_dtype(op, "offsets", offsets, call);
  if (per_sample_weights.defined()) {
    if (mode != BagMode::Sum)
      throw UserError(describe_call(op, call) + ": per_sample_weights are only supported with BagMode::Sum");
    if (per_sample_weights.shape() != ids.shape())
      throw UserError(describe_call(op, call) + ": per_sample_weights must have the ids' shape " +
                      shape_str(ids.shape()));
  }
  const int64_t R = table.shape()[0], D = table.shape()[1];
  if (padding_idx && (*padding_idx < -R || *padding_idx >= R))
    throw UserError(describe_call(op, call) + ": padding_idx " + std::to_string(*padding_idx) +
                    " is out of range for a table of " + std::to_string(R) + " rows; it must be in [" +
                    std::to_string(-R) + ", " + std::to_string(R) + ")");
  // (a flag and a row rather than an optional: GCC 12 -O2 warns that the optional's value may be
  // read uninitialised, a false positive that -Werror turns into a build failure)
  const bool pad = padding_idx.has_value();
  const int64_t pad_row = pad ? (*padding_idx < 0 ? *padding_idx + R : *padding_idx) : 0;
  // Result dtype: as sum() (integers accumulate in i64, or in the weights' float dtype), mean()
  // (float) and max() (the table's).
  const DType tdt = table.dtype();
  DType dt = tdt;
  if (mode == BagMode::Sum && !is_float(tdt))
    dt = per_sample_weights.defined() && is_float(per_sample_weights.dtype()) ? per_sample_weights.dtype() : DType::I64;
  if (mode == BagMode::Mean && !is_float(tdt)) dt = kDefaultFloat;
  const bool sum_like = mode != BagMode::Max;
  const DType cdt = mode == BagMode::Mean ? dt : DType::I64;  // of the per-bag id count

  const bool fixed = ids.ndim() == 2;  // [B, L]: bags of L ids, a plain reduction over L
  const int64_t N = ids.numel(), B = fixed ? ids.shape()[0] : offsets.numel();
  Shape row_col = fixed ? Shape{B, ids.shape()[1], 1} : Shape{N, 1};  // one value per id, broadcast over D
  Shape rows_shape = fixed ? Shape{B, ids.shape()[1], D} : Shape{N, D};
  Tensor ok = checked(ids, R, IndexUse::EmbeddingBag);
  Tensor v = select_rows(op, table, 0, ok.reshape({N}), std::nullopt).reshape(rows_shape);
  v = cast_if_needed(v, dt);
  if (per_sample_weights.defined()) v = v * cast_if_needed(per_sample_weights, dt).reshape(row_col);
  Tensor keep;  // ids that count (padding_idx skipped)
  if (pad) {
    keep = (ids != static_cast<double>(pad_row)).reshape(row_col).expand(rows_shape);
    v = where(keep, v, make_const(sum_like ? 0.0 : lowest(dt), dt, {}, table.device()));
  }
  if (fixed) {
    const int64_t L = ids.shape()[1];
    if (L == 0) return make_const(0, dt, {B, D}, table.device());
    Tensor r = sum_like ? sum(v, 1) : max(v, 1);
    if (mode == BagMode::Sum) return r;
    if (!pad) return mode == BagMode::Mean ? r / static_cast<double>(L) : r;
    Tensor count = sum(keep.cast(cdt), 1);
    if (mode == BagMode::Mean) return r / maximum(count, 1.0);
    return where(count > 0.0, r, make_const(0, dt, {}, table.device()));
  }
  Tensor starts = checked(offsets, N + 1, IndexUse::BagOffsets).cast(DType::I64);
  if (B == 0) return make_const(0, dt, {0, D}, table.device());
  auto segment = [&](Op o, const Tensor& values) {
    return record(o, values.dtype(), {B, 1, D}, {values, starts}, Attrs{{1}, {}}).reshape({B, D});
  };
  Tensor r = segment(sum_like ? Op::SegmentSum : Op::SegmentMax, v);
  if (mode == BagMode::Sum) return r;
  // The id count of each bag, as a fold over the same bags: subtracting its bounds would need them
  // outside the bag kernel (a second kernel).
  Tensor count = segment(Op::SegmentSum, pad ? keep.cast(cdt) : make_const(1, cdt, {N, D}, table.device()));
  if (mode == BagMode::Mean) return r / maximum(count, 1.0);
  return where(count > 0.0, r, make_const(0, dt, {}, table.device()));
}

}  // namespace kfuse
