// Software prefetch of the rows a segment kernel gathers (embedding bags), used by the column
// tiles of lower_kernel.cpp.
//
// Why: a bag reads one table row per id, rows scattered over a table larger than the L3, and the
// hardware prefetchers cannot guess the next row (its address is data: the next id). Each row
// read then waits a full memory latency, while the work per row (D / 8 vector adds) is a few
// cycles. Issuing llvm.prefetch for the rows of the ids a few positions ahead (the classic
// caffe2/FBGEMM EmbeddingLookup scheme) keeps several misses in flight. How far ahead, and into
// L1 or L2, follows the tables' size (backend/gather_prefetch.hpp, shared with xbyak).
//
// Which loads: those of the phase's accumulator values whose index reads memory and moves with
// the reduce position (table[ids[r] * D + lane], the 8-bit table's scale/bias row), not the id
// load itself (a sequential walk the hardware prefetcher follows). The lines prefetched span the
// addresses of the tile's first and last lane, capped at kMaxLines per load.
//
// Cost: a bag's work per id is a few vector adds, so the prefetch must be cheap too. When a
// load's index moves by a constant step per lane (f32, f16, 8-bit rows, a lane-invariant scale),
// the row's span in bytes is the same for every id: RowPrefetch computes it once per tile, and
// per id emits the first lane's address and one prefetch per line, unrolled when the tile width
// is a compile-time constant (the register blocks of D = 64 f32: 4 lines and the span's last
// byte, no loop). Before, every id computed the first and last lane's addresses, their min/max
// and a line count, and ran a loop: about 45% of a bag kernel's samples in cache. Other lane
// patterns (4-bit nibbles at lane / 2) keep that per-id computation.
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Metadata.h>

#include <algorithm>
#include <functional>
#include <optional>
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

RowPrefetch::RowPrefetch(Builder& b, ExprEmitter& ex, std::vector<const ir::Expr*> loads,
                         const std::vector<llvm::Value*>& outer, llvm::Value* width)
    : b_(b), ex_(ex) {
  const int lane = static_cast<int>(outer.size()) - 1;
  for (const ir::Expr* l : loads) {
    Row r{l};
    std::optional<int64_t> step = ir::affine_step(l->args[0].get(), ir::Space::Outer, lane);
    if (step && *step >= 0) {
      // Bytes from the first lane's element to the last lane's last byte, less one: the same for
      // every id (the row moves, its shape does not), so computed here once per tile.
      const int64_t e = static_cast<int64_t>(dtype_size(l->dtype));
      r.span = *step == 0 ? b.getInt64(e - 1)
                          : b.CreateAdd(b.CreateMul(b.CreateSub(width, b.getInt64(1)), b.getInt64(*step * e)),
                                        b.getInt64(e - 1));
      r.step0 = *step == 0;
    } else {
      r.last_lane = b.CreateSub(b.CreateAdd(outer.back(), width), b.getInt64(1));
    }
    rows_.push_back(r);
  }
  // The tables' bytes the rows span (the rows a clamped id selects x the bytes read per row),
  // known when every row's span is a compile-time constant (register blocks); else unknown.
  int64_t table_bytes = 0, id_bytes = 0;
  bool rows_only = true;
  for (const Row& r : rows_) {
    auto* cs = r.span ? llvm::dyn_cast<llvm::ConstantInt>(r.span) : nullptr;
    const int64_t bytes = cs ? cs->getSExtValue() + 1 : -1;
    table_bytes = add_table_bytes(table_bytes, ir::clamped_rows(r.load->args[0].get()).value_or(-1), bytes);
    id_bytes = id_bytes < 0 || bytes < 0 ? -1 : id_bytes + bytes;
    rows_only &= !r.step0;
  }
  how_ = gather_prefetch(table_bytes, id_bytes, rows_only);
  if (how_.ahead == 0) rows_.clear();  // a table of rows in the L2: no prefetch (empty())
}

llvm::Value* RowPrefetch::address(const ir::Expr* l, llvm::Value* lane, const std::vector<llvm::Value*>& outer,
                                  llvm::Value* pos) {
  ex_.reset();
  ex_.outer = outer;
  ex_.outer.back() = lane;
  ex_.reduce = {pos};
  llvm::Value* idx = ex_.convert(ex_.emit(l->args[0]), l->args[0]->dtype, DType::I64);
  llvm::Value* p = b_.CreateGEP(mem_type(b_.getContext(), l->dtype), ex_.buffers.at(l->index), idx);
  return b_.CreatePtrToInt(p, b_.getInt64Ty());
}

void RowPrefetch::line(llvm::Value* addr) {
  // read, into L2 (locality 2) or L1 (3) by the tables' size (gather_prefetch.hpp), data cache
  b_.CreateIntrinsic(
      llvm::Intrinsic::prefetch, {b_.getPtrTy()},
      {b_.CreateIntToPtr(addr, b_.getPtrTy()), b_.getInt32(0), b_.getInt32(how_.to_l2 ? 2 : 3), b_.getInt32(1)});
}

// for (i = 0; i < lines; ++i) prefetch(first + 64 i), not unrolled: a few lines per row, and a
// bag kernel emits this for every unrolled point of its tile (unrolled 8-fold it doubled the
// compile time of a bag kernel).
void RowPrefetch::line_loop(llvm::Value* first, llvm::Value* lines) {
  llvm::LLVMContext& c = b_.getContext();
  llvm::Function* f = b_.GetInsertBlock()->getParent();
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* body = llvm::BasicBlock::Create(c, "pf", f);
  auto* after = llvm::BasicBlock::Create(c, "pf_after", f);
  b_.CreateBr(body);
  b_.SetInsertPoint(body);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2);
  i->addIncoming(b_.getInt64(0), pre);
  line(b_.CreateAdd(first, b_.CreateShl(i, b_.getInt64(kLineShift))));
  llvm::Value* i1 = b_.CreateAdd(i, b_.getInt64(1));
  i->addIncoming(i1, body);
  llvm::BranchInst* br = b_.CreateCondBr(b_.CreateICmpULT(i1, lines), body, after);
  llvm::MDNode* no_unroll = llvm::MDNode::get(c, llvm::MDString::get(c, "llvm.loop.unroll.disable"));
  llvm::MDNode* loop_id = llvm::MDNode::getDistinct(c, {nullptr, no_unroll});
  loop_id->replaceOperandWith(0, loop_id);
  br->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
  b_.SetInsertPoint(after);
}

void RowPrefetch::emit(const std::vector<llvm::Value*>& outer, llvm::Value* pos) {
  for (const Row& r : rows_) {
    llvm::Value* a0 = address(r.load, outer.back(), outer, pos);
    if (r.span) {
      // The lines of [a0, a0 + span]: a0 + 64 i for i < ceil((span + 1) / 64), then the span's
      // last byte (a row not aligned to a line touches one line more; aligned, it repeats the
      // line before, which costs no memory traffic). One element (step 0) is within a line.
      if (r.step0) {
        line(a0);
        continue;
      }
      llvm::Value* last = b_.CreateAdd(a0, r.span);
      if (auto* cs = llvm::dyn_cast<llvm::ConstantInt>(r.span)) {  // a constant tile width
        const int64_t n = std::min(kMaxLines, (static_cast<int64_t>(cs->getZExtValue()) + kLine) >> kLineShift);
        for (int64_t i = 0; i < n; ++i) line(b_.CreateAdd(a0, b_.getInt64(i << kLineShift)));
        if (n == kMaxLines) continue;
      } else {
        llvm::Value* n = b_.CreateLShr(b_.CreateAdd(r.span, b_.getInt64(kLine)), b_.getInt64(kLineShift));
        line_loop(a0, b_.CreateIntrinsic(llvm::Intrinsic::umin, {b_.getInt64Ty()}, {n, b_.getInt64(kMaxLines)}));
      }
      line(last);
      continue;
    }
    // Any other lane pattern (4-bit nibbles at lane / 2): the lines between the addresses of the
    // first and the last lane.
    llvm::Value* a1 = address(r.load, r.last_lane, outer, pos);
    llvm::Value* lo = b_.CreateIntrinsic(llvm::Intrinsic::umin, {b_.getInt64Ty()}, {a0, a1});
    llvm::Value* hi = b_.CreateIntrinsic(llvm::Intrinsic::umax, {b_.getInt64Ty()}, {a0, a1});
    llvm::Value* first_line = b_.CreateAnd(lo, b_.getInt64(~(kLine - 1)));
    llvm::Value* lines =
        b_.CreateAdd(b_.CreateLShr(b_.CreateSub(hi, first_line), b_.getInt64(kLineShift)), b_.getInt64(1));
    lines = b_.CreateIntrinsic(llvm::Intrinsic::umin, {b_.getInt64Ty()}, {lines, b_.getInt64(kMaxLines)});
    line_loop(first_line, lines);
  }
  ex_.reset();
}

}  // namespace kfuse::detail::llvmjit
