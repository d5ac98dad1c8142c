// LibTorch peer of the embedding-bag benchmark: at::embedding_bag, mode sum, over the f32 table
// (borrowed with from_blob; the ids and offsets are i64 tensors made once).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <memory>

#include "../bag_problem.hpp"
#include "torch_threads.hpp"

namespace kbench {

Impl torch_bag_impl(const BagProblem& p, int threads) {
  struct State {
    at::Tensor table, ids, offsets, y;
  };
  auto st = std::make_shared<State>();
  auto i64 = at::TensorOptions().dtype(at::kLong);
  st->table = at::from_blob(const_cast<float*>(p.table), {p.rows, p.cols}, at::TensorOptions().dtype(at::kFloat));
  st->ids = at::from_blob(const_cast<int64_t*>(p.ids.data()), {static_cast<int64_t>(p.ids.size())}, i64).clone();
  st->offsets =
      at::from_blob(const_cast<int64_t*>(p.offsets.data()), {static_cast<int64_t>(p.offsets.size())}, i64).clone();
  Impl im;
  im.name = "torch f32";
  im.note = "at::embedding_bag, mode sum";
  im.setup = [threads] { set_torch_threads(threads); };
  im.run = [st] { st->y = std::get<0>(at::embedding_bag(st->table, st->ids, st->offsets, false, 0)); };
  im.result = [st] { return static_cast<const float*>(st->y.data_ptr<float>()); };
  return im;
}

}  // namespace kbench
