// LibTorch peers of the embedding-bag benchmark (the ids and offsets are i64 tensors made once):
//   at::embedding_bag, mode sum, over the f32 table (borrowed with from_blob);
//   quantized::embedding_bag_byte_rowwise_offsets and ..._4bit_rowwise_offsets (PyTorch's
//   quantised bags, registered in libtorch_cpu, called through the dispatcher) over kfuse's
//   8-bit or 4-bit table in the fused rowwise layouts both libraries share
//   (kfuse::pack_fused_rowwise), borrowed: the same codes, scales and biases, checked against
//   the same fp64 bag.
//   (Debian's LibTorch is built without FBGEMM: this bag is PyTorch's portable loop.)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>

#include "../bag_problem.hpp"
#include "torch_threads.hpp"

namespace kbench {

namespace {

struct State {
  at::Tensor table, ids, offsets, y;
};

std::shared_ptr<State> state(const BagProblem& p) {
  auto st = std::make_shared<State>();
  auto i64 = at::TensorOptions().dtype(at::kLong);
  st->ids = at::from_blob(const_cast<int64_t*>(p.ids.data()), {static_cast<int64_t>(p.ids.size())}, i64).clone();
  st->offsets =
      at::from_blob(const_cast<int64_t*>(p.offsets.data()), {static_cast<int64_t>(p.offsets.size())}, i64).clone();
  return st;
}

}  // namespace

Impl torch_bag_fused_impl(const BagProblem& p, const uint8_t* fused, int bits, int threads) {
  auto st = state(p);
  const int64_t width = bits == 8 ? p.cols + 8 : (p.cols + 1) / 2 + 4;
  st->table = at::from_blob(const_cast<uint8_t*>(fused), {p.rows, width}, at::TensorOptions().dtype(at::kByte));
  using Fn = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&, bool, int64_t, bool,
                        const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, bool);
  const char* name =
      bits == 8 ? "quantized::embedding_bag_byte_rowwise_offsets" : "quantized::embedding_bag_4bit_rowwise_offsets";
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
  Impl im;
  im.name = bits == 8 ? "torch 8-bit" : "torch 4-bit";
  im.note = name;
  im.setup = [threads] { set_torch_threads(threads); };
  im.run = [st, op] {
    st->y = op.call(st->table, st->ids, st->offsets, false, 0, false, c10::nullopt, c10::nullopt, false);
  };
  im.result = [st] { return static_cast<const float*>(st->y.data_ptr<float>()); };
  return im;
}

Impl torch_bag_impl(const BagProblem& p, int threads) {
  auto st = state(p);
  st->table = at::from_blob(const_cast<float*>(p.table), {p.rows, p.cols}, at::TensorOptions().dtype(at::kFloat));
  Impl im;
  im.name = "torch f32";
  im.note = "at::embedding_bag, mode sum";
  im.setup = [threads] { set_torch_threads(threads); };
  im.run = [st] { st->y = std::get<0>(at::embedding_bag(st->table, st->ids, st->offsets, false, 0)); };
  im.result = [st] { return static_cast<const float*>(st->y.data_ptr<float>()); };
  return im;
}

}  // namespace kbench
