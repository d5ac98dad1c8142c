// Software prefetch of the rows a segment kernel gathers (embedding bags), used by the column
// tiles of lower_kernel.cpp.
//
// Why: a bag reads one table row per id, rows scattered over a table larger than the L3, and the
// hardware prefetchers cannot guess the next row (its address is data: the next id). Each row
// read then waits a full memory latency, while the work per row (D / 8 vector adds) is a few
// cycles. Issuing llvm.prefetch for the rows of the ids a few positions ahead (the classic
// caffe2/FBGEMM EmbeddingLookup scheme) keeps several misses in flight.
//
// Which loads: those of the phase's accumulator values whose index reads memory and moves with
// the reduce position (table[ids[r] * D + lane], the 8-bit table's scale/bias row), not the id
// load itself (a sequential walk the hardware prefetcher follows). The lines prefetched span the
// addresses of the tile's first and last lane, so any lane pattern (f32, f16, 8-bit, 4-bit
// nibbles at lane / 2) is covered, capped at kMaxLines per load.
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Metadata.h>

#include <functional>
#include <set>

#include "ir/expr_util.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

namespace {
constexpr int kLineShift = 6;  // 64-byte cache lines
constexpr int64_t kLine = int64_t{1} << kLineShift;
constexpr int64_t kMaxLines = 32;  // 2 KiB: a row wider than that is streamed by the hardware
}  // namespace

std::vector<const ir::Expr*> gathered_row_loads(const ir::Phase& ph, const ir::Kernel& k) {
  std::vector<const ir::Expr*> out;
  std::set<const ir::Expr*> seen;
  std::function<void(const ir::Expr*)> visit = [&](const ir::Expr* e) {
    if (!seen.insert(e).second) return;
    if (e->kind == ir::ExprKind::Load && ir::contains(e->args[0].get(), ir::ExprKind::Load) &&
        ir::depends_on(e->args[0].get(), ir::Space::Reduce, 0))
      out.push_back(e);
    for (const auto& a : e->args) visit(a.get());
  };
  for (int a : ph.accs) visit(k.accs[a].value.get());
  return out;
}

void prefetch_rows(Builder& b, ExprEmitter& ex, const std::vector<const ir::Expr*>& loads,
                   const std::vector<llvm::Value*>& outer, llvm::Value* last_lane, llvm::Value* pos) {
  llvm::LLVMContext& c = b.getContext();
  auto address = [&](const ir::Expr* l, llvm::Value* lane) {
    ex.reset();
    ex.outer = outer;
    ex.outer.back() = lane;
    ex.reduce = {pos};
    llvm::Value* idx = ex.convert(ex.emit(l->args[0]), l->args[0]->dtype, DType::I64);
    llvm::Value* p = b.CreateGEP(mem_type(c, l->dtype), ex.buffers.at(l->index), idx);
    return b.CreatePtrToInt(p, b.getInt64Ty());
  };
  for (const ir::Expr* l : loads) {
    llvm::Value* a0 = address(l, outer.back());
    llvm::Value* a1 = address(l, last_lane);
    llvm::Value* lo = b.CreateIntrinsic(llvm::Intrinsic::umin, {b.getInt64Ty()}, {a0, a1});
    llvm::Value* hi = b.CreateIntrinsic(llvm::Intrinsic::umax, {b.getInt64Ty()}, {a0, a1});
    llvm::Value* first_line = b.CreateAnd(lo, b.getInt64(~(kLine - 1)));
    llvm::Value* lines = b.CreateAdd(b.CreateLShr(b.CreateSub(hi, first_line), b.getInt64(kLineShift)), b.getInt64(1));
    lines = b.CreateIntrinsic(llvm::Intrinsic::umin, {b.getInt64Ty()}, {lines, b.getInt64(kMaxLines)});
    // for (i = 0; i < lines; ++i) prefetch(first_line + 64 i): read, high locality, data cache
    llvm::Function* f = b.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b.GetInsertBlock();
    auto* body = llvm::BasicBlock::Create(c, "pf", f);
    auto* after = llvm::BasicBlock::Create(c, "pf_after", f);
    b.CreateBr(body);
    b.SetInsertPoint(body);
    llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2);
    i->addIncoming(b.getInt64(0), pre);
    llvm::Value* at = b.CreateIntToPtr(b.CreateAdd(first_line, b.CreateShl(i, b.getInt64(kLineShift))), b.getPtrTy());
    b.CreateIntrinsic(llvm::Intrinsic::prefetch, {b.getPtrTy()}, {at, b.getInt32(0), b.getInt32(3), b.getInt32(1)});
    llvm::Value* i1 = b.CreateAdd(i, b.getInt64(1));
    i->addIncoming(i1, body);
    // not unrolled: a few lines per row, and a bag kernel emits this loop for every unrolled
    // point of its tile (unrolled 8-fold it doubled the compile time of a bag kernel)
    llvm::BranchInst* br = b.CreateCondBr(b.CreateICmpULT(i1, lines), body, after);
    llvm::MDNode* no_unroll = llvm::MDNode::get(c, llvm::MDString::get(c, "llvm.loop.unroll.disable"));
    llvm::MDNode* loop_id = llvm::MDNode::getDistinct(c, {nullptr, no_unroll});
    loop_id->replaceOperandWith(0, loop_id);
    br->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
    b.SetInsertPoint(after);
  }
  ex.reset();
}

}  // namespace kfuse::detail::llvmjit
