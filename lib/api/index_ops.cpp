// Index ops (include/kfuse/index_ops.hpp). Work in progress: the declarations are stable.
#include "kfuse/index_ops.hpp"

namespace kfuse {

namespace {
[[noreturn]] void pending(const char* op) { throw UserError(std::string(op) + ": not implemented yet"); }
}  // namespace

Tensor gather(const Tensor&, int64_t, const Tensor&) { pending("gather"); }
Tensor index_select(const Tensor&, int64_t, const Tensor&) { pending("index_select"); }
Tensor embedding(const Tensor&, const Tensor&) { pending("embedding"); }
Tensor embedding_bag(const Tensor&, const Tensor&, const Tensor&, BagMode, const Tensor&, std::optional<int64_t>) {
  pending("embedding_bag");
}

}  // namespace kfuse
