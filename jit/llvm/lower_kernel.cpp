// Over 800 lines: one kernel lowering (phases, cascaded sums, accumulators, stores) kept in one
// place so its invariants read together; vector math and column tiles are already separate files.
// Kernel IR -> one LLVM module (entry points in llvm_jit.hpp).
//
// kf_main walks a chunk [begin, end) of the flattened outer domain as a sequence of SEGMENTS:
// each segment unravels its first point into outer indices once and then runs a plain counted
// loop along the innermost outer dim (so pointwise kernels vectorise along the contiguous axis).
// Per outer point the phases run in order; an over_reduce phase is a nest of counted loops over
// the reduce dims (compile-time extents, innermost dim innermost), its accumulators are
// loop-carried values (phis), so the loop vectoriser recognises row reductions:
//   Sum/Prod of floats fold with `reassoc contract` fadd/fmul (never nnan/ninf): the order is
//   then fixed by the compiled code and independent of threads; Max/Min fold with
//   llvm.maximum/minimum (NaN propagates; -0 < +0); ArgMax/ArgMin keep (best, index) and take
//   the first extreme, a NaN counting as the extreme (scalar loop).
// Column kernels with lane-contiguous accesses (LaunchPlan::column_tile, column_tiles.cpp) are
// interchanged instead: each segment runs as tiles of adjacent outer points, every phase loops
// over the reduce domain outside and over the tile's lanes inside, with per-lane accumulator
// slots in stack arrays, so the vectoriser widens the lane loop (contiguous row runs). Segment
// kernels (bags) take the same tiles over their per-bag range, with row prefetches (tile_segment)
// and, at tile widths of 16, 32 or 64k f32 lanes, register blocks (the bag's sums in vector
// registers across its ids).
// Pointwise kernels that read an input transposed (LaunchPlan::transpose_tile,
// transpose_tiles.cpp) walk their two innermost dims in tiles (tiled_range) instead of row by row.
// Pointwise kernels whose innermost index is compared with constants (concat, pad) walk each row
// in pieces between the constants, each with its stores folded (range_pieces, row_pieces.cpp).
// Global reductions that qualify (LaunchPlan::split) get kf_part/kf_fin instead: fixed-size
// blocks of the reduce domain folded independently, then combined in block order.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "ir/decompose.hpp"
#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

using llvm::Value;

namespace {

constexpr int64_t kSplitBlock = 16384;  // reduce points per block of a split global reduction
// Column tiles: consecutive points of the innermost reduce dim folded per visit of a lane (still
// one after the other, so the order and the bits are unchanged), which loads and stores the
// lane's state once per 4 rows instead of every row. Only phases with accumulators (a store-only
// phase has no state). [4096, 4096] f32, 1 thread: sum axis 0 3.1 -> 2.6 ms (sum axis 1: 2.5 ms),
// max axis 0 3.7 -> 2.7 ms; [5e5, 3] sum 1.1 -> 0.47 ms (the state's store-to-load chain through
// memory is what bounds narrow tiles); compile time +10%.
constexpr int64_t kTileRowUnroll = 4;
// Rows of a contraction's register block (Lowerer::row_block).
constexpr int64_t kRowBlockRows = 6;

bool is_arg(ir::AccKind k) { return k == ir::AccKind::ArgMax || k == ir::AccKind::ArgMin; }

// Loop-carried state of one accumulator: {value} or {best value, best index} for Arg*.
struct AccState {
  std::vector<Value*> v;
};

class Lowerer {
 public:
  Lowerer(const ir::Kernel& k, const LaunchPlan& plan, llvm::Module& m, const MathLib& math)
      : k_(k), plan_(plan), m_(m), c_(m.getContext()), b_(c_), math_(math) {}

  void lower() {
    emit_main();
    if (plan_.row_block > 0)  // the scratch its kf_main wants (RowMainFn)
      new llvm::GlobalVariable(m_, b_.getInt64Ty(), true, llvm::GlobalValue::ExternalLinkage,
                               b_.getInt64(row_scratch_bytes_), kScratchName);
    if (plan_.split) {
      emit_part();
      emit_fin();
    }
  }

 private:
  // ---- function scaffolding ----
  // Every entry point takes (ptr bufs, ptr params, ...). The buffers are loaded into an inner
  // function with noalias arguments (outputs never alias inputs), which is always inlined into
  // the entry point, so the alias facts survive as scoped metadata.
  llvm::Function* begin_function(const char* name, std::vector<llvm::Type*> extra, ExprEmitter& ex,
                                 std::vector<Value*>& extra_args) {
    auto* ptr = b_.getPtrTy();
    std::vector<llvm::Type*> outer_ps = {ptr, ptr};
    outer_ps.insert(outer_ps.end(), extra.begin(), extra.end());
    auto* entry_fn = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), outer_ps, false),
                                            llvm::Function::ExternalLinkage, name, m_);
    std::vector<llvm::Type*> inner_ps(k_.buffers.size(), ptr);
    inner_ps.push_back(ptr);
    inner_ps.insert(inner_ps.end(), extra.begin(), extra.end());
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), inner_ps, false),
                                      llvm::Function::InternalLinkage, std::string(name) + "_body", m_);
    fn->addFnAttr(llvm::Attribute::AlwaysInline);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      fn->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      fn->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoCapture);
      if (!k_.buffers[i].output) fn->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
    for (auto* f : {entry_fn, fn}) {
      f->addFnAttr(llvm::Attribute::NoUnwind);
      int bits = math_.vector_bits();
      f->addFnAttr("prefer-vector-width", std::to_string(bits));
      f->addFnAttr("min-legal-vector-width", std::to_string(bits));
    }
    // entry point: load the buffer pointers, call the body
    b_.SetInsertPoint(llvm::BasicBlock::Create(c_, "entry", entry_fn));
    std::vector<Value*> call_args;
    for (size_t i = 0; i < k_.buffers.size(); ++i)
      call_args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, entry_fn->getArg(0), i)));
    call_args.push_back(entry_fn->getArg(1));
    for (size_t i = 0; i < extra.size(); ++i) call_args.push_back(entry_fn->getArg(static_cast<unsigned>(2 + i)));
    b_.CreateCall(fn, call_args);
    b_.CreateRetVoid();
    // body prologue: params are loaded once
    b_.SetInsertPoint(llvm::BasicBlock::Create(c_, "entry", fn));
    ex.buffers.clear();
    for (size_t i = 0; i < k_.buffers.size(); ++i) ex.buffers.push_back(fn->getArg(static_cast<unsigned>(i)));
    Value* params = fn->getArg(static_cast<unsigned>(k_.buffers.size()));
    ex.params.clear();
    for (size_t i = 0; i < k_.params.size(); ++i)
      ex.params.push_back(b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), params, i)));
    extra_args.clear();
    for (size_t i = 0; i < extra.size(); ++i)
      extra_args.push_back(fn->getArg(static_cast<unsigned>(k_.buffers.size() + 1 + i)));
    ex.accs.assign(k_.accs.size(), nullptr);
    return fn;
  }

  // i64 minimum and maximum (loop bounds, tile and piece edges).
  Value* smin(Value* x, Value* y) { return b_.CreateIntrinsic(llvm::Intrinsic::smin, {b_.getInt64Ty()}, {x, y}); }
  Value* smax(Value* x, Value* y) { return b_.CreateIntrinsic(llvm::Intrinsic::smax, {b_.getInt64Ty()}, {x, y}); }

  // ---- loops ----
  using Carried = std::vector<Value*>;

  // for (iv = 0; iv < n; ++iv) with loop-carried values; `n_positive` skips the guard; `loop_md`
  // (optional) becomes the loop's llvm.loop metadata.
  Carried counted_loop(Value* n, bool n_positive, const Carried& init,
                       const std::function<Carried(Value* iv, const Carried& cur)>& body,
                       llvm::MDNode* loop_md = nullptr) {
    llvm::Function* f = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* hdr = llvm::BasicBlock::Create(c_, "loop", f);
    auto* after = llvm::BasicBlock::Create(c_, "after", f);
    if (n_positive) b_.CreateBr(hdr);
    else b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt64(0)), hdr, after);
    b_.SetInsertPoint(hdr);
    llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, "iv");
    iv->addIncoming(b_.getInt64(0), pre);
    Carried phis;
    for (Value* v : init) {
      auto* p = b_.CreatePHI(v->getType(), 2);
      p->addIncoming(v, pre);
      phis.push_back(p);
    }
    Carried next = body(iv, phis);
    Value* iv1 = b_.CreateAdd(iv, b_.getInt64(1), "", true, true);
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    llvm::BranchInst* br = b_.CreateCondBr(b_.CreateICmpSLT(iv1, n), hdr, after);
    if (loop_md) br->setMetadata(llvm::LLVMContext::MD_loop, loop_md);
    iv->addIncoming(iv1, latch);
    return close_loop(phis, init, next, pre, latch, after, n_positive);
  }

  // Wires the back edge of the carried phis and returns the values after the loop (merged with
  // `init` when the loop may be skipped).
  Carried close_loop(const Carried& phis, const Carried& init, const Carried& next, llvm::BasicBlock* pre,
                     llvm::BasicBlock* latch, llvm::BasicBlock* after, bool always_runs) {
    for (size_t i = 0; i < phis.size(); ++i) llvm::cast<llvm::PHINode>(phis[i])->addIncoming(next[i], latch);
    b_.SetInsertPoint(after);
    if (always_runs) return next;
    Carried out;
    for (size_t i = 0; i < init.size(); ++i) {
      auto* p = b_.CreatePHI(init[i]->getType(), 2);
      p->addIncoming(init[i], pre);
      p->addIncoming(next[i], latch);
      out.push_back(p);
    }
    return out;
  }

  using PointBody = std::function<Carried(const std::vector<Value*>&, const Carried&)>;
  // seg(indices of the segment's first point, its length >= 1, carried values)
  using SegmentBody = std::function<Carried(const std::vector<Value*>&, Value*, const Carried&)>;

  // Visits the points [begin, end) of the row-major domain `extents` (begin < end required
  // unless !known_nonempty) as segments along the innermost dim; body gets the indices.
  Carried flat_range(Value* begin, Value* end, const std::vector<Value*>& extents, bool known_nonempty,
                     const Carried& init, const PointBody& body) {
    const size_t nd = extents.size();
    if (nd == 0) return body({}, init);  // a single point (the caller guarantees begin < end)
    return flat_segments(begin, end, extents, known_nonempty, init,
                         [&](const std::vector<Value*>& idx, Value* len, const Carried& cur) {
                           return counted_loop(len, true, cur, [&](Value* j, const Carried& c2) {
                             std::vector<Value*> at = idx;
                             at.back() = b_.CreateAdd(idx.back(), j, "", true, true);
                             return body(at, c2);
                           });
                         });
  }

  // Visits the points [begin, end) of the row-major domain `extents` (nd >= 2) in tiles of its
  // two innermost dims (transpose_tiles.cpp): the partial rows at either end of the range point
  // by point, the whole rows between in blocks of kTransposeRows rows, each block walked T
  // columns at a time, row by row. Rows of a block may belong to different points of the leading
  // dims (they are consecutive rows of the flattened domain); every point is visited once.
  void tiled_range(Value* begin, Value* end, const std::vector<Value*>& extents, int64_t T, ExprEmitter& ex,
                   const std::vector<const ir::Expr*>& tloads,
                   const std::function<void(const std::vector<Value*>&)>& body) {
    const int64_t QB = kTransposeRows;
    const size_t nd = extents.size();
    auto point = [&](const std::vector<Value*>& idx, const Carried&) {
      body(idx);
      return Carried{};
    };
    Value* C = extents.back();
    Value* one = b_.getInt64(1);
    // whole rows [q0, q1) of the flattened leading dims; C > 0 whenever begin < end
    Value* cpos = smax(C, one);
    Value* q0 = b_.CreateSDiv(b_.CreateAdd(begin, b_.CreateSub(cpos, one)), cpos);
    Value* q1 = b_.CreateSDiv(end, cpos);
    Value* head_end = smin(end, b_.CreateMul(q0, cpos));
    flat_range(begin, head_end, extents, false, {}, point);
    Value* rows = b_.CreateSub(q1, q0);
    if_else(
        b_.CreateICmpSGT(rows, b_.getInt64(0)),
        [&] {
          Value* tv = b_.getInt64(T);
          Value* qv = b_.getInt64(QB);
          Value* nblk = b_.CreateSDiv(b_.CreateAdd(rows, b_.getInt64(QB - 1)), qv);
          Value* ncol = b_.CreateSDiv(b_.CreateAdd(C, b_.getInt64(T - 1)), tv);
          // One block of nr rows x nc columns from (qb, c0), row by row.
          auto tile = [&](Value* qb, Value* c0, Value* nr, Value* nc) {
            counted_loop(nr, true, {}, [&](Value* r, const Carried&) {
              std::vector<Value*> idx = unravel(b_.CreateAdd(qb, r), extents, nd - 1);
              idx.push_back(nullptr);  // the column, set per point
              counted_loop(nc, true, {}, [&](Value* j, const Carried&) {
                std::vector<Value*> at = idx;
                at[nd - 1] = b_.CreateAdd(c0, j, "", true, true);
                body(at);
                return Carried{};
              });
              return Carried{};
            });
          };
          // With transposed loads read as 8 x 8 tiles (transpose_tile8), rows [qb, qb + nr) go by chunks of
          // kTransposeChunk whole 8-column blocks, each chunk by groups of 8 rows inside one run of
          // the next-to-innermost dim, each group along the chunk's blocks: a group writes its rows'
          // chunk whole and reads the chunk's input lines, which the next group reads on from L1
          // or L2. (Blocks outermost as above left each output line half written for a whole block
          // of rows; groups along whole rows read more input lines than a power-of-two stride lets
          // the L2's sets keep.) The rows of no group, and the columns past the last whole block,
          // go by points.
          auto chunks8 = [&](Value* qb, Value* nr) {
            Value* eight = b_.getInt64(8);
            Value* groups = b_.CreateUDiv(b_.CreateAdd(nr, b_.getInt64(7)), eight);
            Value* full = b_.CreateUDiv(C, eight);
            Value* per = b_.getInt64(kTransposeChunk);
            Value* nchunk = b_.CreateUDiv(b_.CreateAdd(full, b_.getInt64(kTransposeChunk - 1)), per);
            counted_loop(nchunk, false, {}, [&](Value* h, const Carried&) {
              Value* k0 = b_.CreateMul(h, per);
              Value* kn = smin(per, b_.CreateSub(full, k0));
              counted_loop(groups, true, {}, [&](Value* g, const Carried&) {
                Value* q = b_.CreateAdd(qb, b_.CreateMul(g, eight));
                Value* rows = smin(eight, b_.CreateSub(nr, b_.CreateMul(g, eight)));
                std::vector<Value*> idx = unravel(q, extents, nd - 1);
                Value* fits = b_.CreateAnd(b_.CreateICmpEQ(rows, eight),
                                           b_.CreateICmpSLE(b_.CreateAdd(idx[nd - 2], eight), extents[nd - 2]));
                counted_loop(kn, true, {}, [&](Value* ci, const Carried&) {
                  Value* c0 = b_.CreateMul(b_.CreateAdd(k0, ci), eight);
                  if_else(
                      fits, [&] { transpose_tile8(b_, ex, tloads, idx, c0, body); }, [&] { tile(q, c0, rows, tv); });
                  return Carried{};
                });
                return Carried{};
              });
              return Carried{};
            });
            Value* c0 = b_.CreateMul(full, eight);
            if_else(
                b_.CreateICmpSLT(c0, C), [&] { tile(qb, c0, nr, b_.CreateSub(C, c0)); }, [] {});
          };
          counted_loop(nblk, true, {}, [&](Value* bi, const Carried&) {
            Value* qb = b_.CreateAdd(q0, b_.CreateMul(bi, qv));
            Value* nr = smin(qv, b_.CreateSub(q1, qb));
            if (!tloads.empty() && T == 8) {
              chunks8(qb, nr);
              return Carried{};
            }
            counted_loop(ncol, true, {}, [&](Value* ci, const Carried&) {
              Value* c0 = b_.CreateMul(ci, tv);
              Value* nc = smin(tv, b_.CreateSub(C, c0));
              // Whole column blocks with a constant trip count (unrolled: the loop with a
              // run-time count tested its exit after every point), the edge with the count it has.
              if_else(
                  b_.CreateICmpEQ(nc, tv), [&] { tile(qb, c0, nr, tv); }, [&] { tile(qb, c0, nr, nc); });
              return Carried{};
            });
            return Carried{};
          });
        },
        [] {});
    Value* tail_begin = smax(head_end, b_.CreateMul(q1, cpos));
    flat_range(tail_begin, end, extents, false, {}, point);
  }

  // The indices of flat position `pos` in the row-major domain of the first `nd` >= 1 `extents`.
  std::vector<Value*> unravel(Value* pos, const std::vector<Value*>& extents, size_t nd) {
    std::vector<Value*> idx(nd);
    for (size_t d = nd; d-- > 1;) {
      idx[d] = b_.CreateURem(pos, extents[d]);
      pos = b_.CreateUDiv(pos, extents[d]);
    }
    idx[0] = pos;
    return idx;
  }

  // if (cond) then_fn() else else_fn(), no values merged.
  void if_else(Value* cond, const std::function<void()>& then_fn, const std::function<void()>& else_fn) {
    llvm::Function* f = b_.GetInsertBlock()->getParent();
    auto* then_bb = llvm::BasicBlock::Create(c_, "then", f);
    auto* else_bb = llvm::BasicBlock::Create(c_, "else", f);
    auto* join_bb = llvm::BasicBlock::Create(c_, "join", f);
    b_.CreateCondBr(cond, then_bb, else_bb);
    b_.SetInsertPoint(then_bb);
    then_fn();
    b_.CreateBr(join_bb);
    b_.SetInsertPoint(else_bb);
    else_fn();
    b_.CreateBr(join_bb);
    b_.SetInsertPoint(join_bb);
  }

  // The segments of flat_range: maximal runs of [begin, end) along the innermost dim (nd >= 1).
  Carried flat_segments(Value* begin, Value* end, const std::vector<Value*>& extents, bool known_nonempty,
                        const Carried& init, const SegmentBody& seg_body) {
    const size_t nd = extents.size();
    llvm::Function* f = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* seg = llvm::BasicBlock::Create(c_, "seg", f);
    auto* after = llvm::BasicBlock::Create(c_, "seg_after", f);
    if (known_nonempty) b_.CreateBr(seg);
    else b_.CreateCondBr(b_.CreateICmpSLT(begin, end), seg, after);
    b_.SetInsertPoint(seg);
    llvm::PHINode* pos = b_.CreatePHI(b_.getInt64Ty(), 2, "pos");
    pos->addIncoming(begin, pre);
    Carried phis;
    for (Value* v : init) {
      auto* p = b_.CreatePHI(v->getType(), 2);
      p->addIncoming(v, pre);
      phis.push_back(p);
    }
    std::vector<Value*> idx = unravel(pos, extents, nd);
    Value* left = b_.CreateSub(end, pos, "", true, true);
    Value* row_left = b_.CreateSub(extents[nd - 1], idx[nd - 1], "", true, true);
    Value* len = smin(left, row_left);
    Carried next = seg_body(idx, len, phis);
    Value* pos1 = b_.CreateAdd(pos, len, "", true, true);
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    b_.CreateCondBr(b_.CreateICmpSLT(pos1, end), seg, after);
    pos->addIncoming(pos1, latch);
    return close_loop(phis, init, next, pre, latch, after, known_nonempty);
  }

  // ---- accumulators ----
  llvm::Type* acc_type(int a) { return reg_type(c_, k_.accs[a].dtype); }

  Value* identity(int a) {
    const ir::Accumulator& A = k_.accs[a];
    llvm::Type* t = acc_type(a);
    const bool fl = is_float(A.dtype);
    switch (A.kind) {
      case ir::AccKind::Sum: return fl ? llvm::ConstantFP::get(t, 0.0) : llvm::ConstantInt::get(t, 0);
      case ir::AccKind::Prod: return fl ? llvm::ConstantFP::get(t, 1.0) : llvm::ConstantInt::get(t, 1);
      case ir::AccKind::Max:
        if (fl) return llvm::ConstantFP::getInfinity(t, true);
        return A.dtype == DType::Bool
                   ? b_.getFalse()
                   : llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(t->getIntegerBitWidth()));
      case ir::AccKind::Min:
        if (fl) return llvm::ConstantFP::getInfinity(t, false);
        return A.dtype == DType::Bool
                   ? b_.getTrue()
                   : llvm::ConstantInt::get(t, llvm::APInt::getSignedMaxValue(t->getIntegerBitWidth()));
      default: break;
    }
    return nullptr;
  }

  AccState init_state(int a) {
    const ir::Accumulator& A = k_.accs[a];
    if (!is_arg(A.kind)) return {{identity(a)}};
    // best starts at the far end of the value range (a first element equal to it keeps index 0)
    DType vt = A.value->dtype;
    llvm::Type* t = reg_type(c_, vt);
    const bool mx = A.kind == ir::AccKind::ArgMax;
    Value* best;
    if (is_float(vt)) best = llvm::ConstantFP::getInfinity(t, mx);
    else if (vt == DType::Bool) best = b_.getInt1(!mx);
    else {
      unsigned w = t->getIntegerBitWidth();
      best = llvm::ConstantInt::get(t, mx ? llvm::APInt::getSignedMinValue(w) : llvm::APInt::getSignedMaxValue(w));
    }
    return {{best, b_.getInt64(0)}};
  }

  // Folds `x` (already in the accumulator's dtype) into state value `s`. `reassoc` lets the
  // vectoriser reorder a loop-carried fold (row reductions); without it the fold is one plain
  // IEEE operation (column tiles, the block-order combine of split reductions).
  Value* fold(int a, Value* s, Value* x, bool reassoc = true) {
    const ir::Accumulator& A = k_.accs[a];
    const bool fl = is_float(A.dtype);
    const bool bl = A.dtype == DType::Bool;
    llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
    llvm::FastMathFlags fmf;
    if (reassoc) {
      fmf.setAllowReassoc();
      fmf.setAllowContract();
    }
    b_.setFastMathFlags(fmf);
    switch (A.kind) {
      case ir::AccKind::Sum:
        if (fl) return b_.CreateFAdd(s, x);
        return bl ? b_.CreateOr(s, x) : b_.CreateAdd(s, x);
      case ir::AccKind::Prod:
        if (fl) return b_.CreateFMul(s, x);
        return bl ? b_.CreateAnd(s, x) : b_.CreateMul(s, x);
      case ir::AccKind::Max:
        if (bl) return b_.CreateOr(s, x);
        return b_.CreateIntrinsic(fl ? llvm::Intrinsic::maximum : llvm::Intrinsic::smax, {s->getType()}, {s, x});
      case ir::AccKind::Min:
        if (bl) return b_.CreateAnd(s, x);
        return b_.CreateIntrinsic(fl ? llvm::Intrinsic::minimum : llvm::Intrinsic::smin, {s->getType()}, {s, x});
      default: break;
    }
    throw BackendError("llvm: fold of an arg accumulator");
  }

  // ArgMax/ArgMin step: take x when best is not NaN and (x is NaN or x beats best).
  AccState fold_arg(int a, const AccState& st, Value* x, Value* flat) {
    const ir::Accumulator& A = k_.accs[a];
    DType vt = A.value->dtype;
    const bool mx = A.kind == ir::AccKind::ArgMax;
    Value* best = st.v[0];
    Value* take;
    if (is_float(vt)) {
      Value* beats = mx ? b_.CreateFCmpOGT(x, best) : b_.CreateFCmpOLT(x, best);
      Value* x_nan = b_.CreateFCmpUNO(x, x);
      Value* best_ok = b_.CreateFCmpORD(best, best);
      take = b_.CreateAnd(best_ok, b_.CreateOr(x_nan, beats));
    } else if (vt == DType::Bool) {
      take = mx ? b_.CreateICmpUGT(x, best) : b_.CreateICmpULT(x, best);
    } else {
      take = mx ? b_.CreateICmpSGT(x, best) : b_.CreateICmpSLT(x, best);
    }
    return {{b_.CreateSelect(take, x, best), b_.CreateSelect(take, flat, st.v[1])}};
  }

  // A contraction's float sum of products folds each product with one rounding (llvm.fma, one
  // instruction where the target has FMA), as the xbyak GEMM and BLAS do: the column tiles'
  // plain (reassoc-free) fadd of an fmul was two instructions and two roundings per term. The
  // point path (reassoc) keeps fadd/fmul: its vectorised reduction forms FMAs where it may.
  bool fused_product(const ir::Accumulator& A) const {
    const ir::Expr* v = A.value.get();
    return k_.kind == ir::KernelKind::Contraction && math_.tier != MathLib::Tier::SSE2 && A.kind == ir::AccKind::Sum &&
           (A.dtype == DType::F32 || A.dtype == DType::F64) && v->kind == ir::ExprKind::Op && v->op == Op::Mul &&
           v->dtype == A.dtype && v->args[0]->dtype == A.dtype && v->args[1]->dtype == A.dtype;
  }

  Value* final_value(int a, const AccState& st) { return is_arg(k_.accs[a].kind) ? st.v[1] : st.v[0]; }

  // One reduce point of a phase: fold the phase's accumulators and run its stores.
  Carried reduce_point(const ir::Phase& ph, ExprEmitter& ex, const std::vector<Value*>& ridx, const Carried& cur,
                       bool reassoc = true) {
    ex.reduce = ridx;
    ex.reset();
    Carried next;
    size_t pos = 0;
    for (int a : ph.accs) {
      const ir::Accumulator& A = k_.accs[a];
      if (!reassoc && fused_product(A)) {
        Value* p = ex.emit(A.value->args[0]);
        Value* q = ex.emit(A.value->args[1]);
        next.push_back(b_.CreateIntrinsic(llvm::Intrinsic::fma, {acc_type(a)}, {p, q, cur[pos]}));
        pos += 1;
        continue;
      }
      Value* x = ex.emit(A.value);
      if (is_arg(A.kind)) {
        Value* flat = b_.getInt64(0);
        for (size_t d = 0; d < k_.reduce.size(); ++d)
          flat = b_.CreateAdd(b_.CreateMul(flat, b_.getInt64(k_.reduce[d])), ridx[d], "", true, true);
        AccState st = fold_arg(a, {{cur[pos], cur[pos + 1]}}, x, flat);
        next.insert(next.end(), st.v.begin(), st.v.end());
        pos += 2;
      } else {
        next.push_back(fold(a, cur[pos], ex.convert(x, A.value->dtype, A.dtype), reassoc));
        pos += 1;
      }
    }
    run_stores(ph, ex);
    return next;
  }

  void run_stores(const ir::Phase& ph, ExprEmitter& ex) {
    for (const auto& s : ph.stores) {
      Value* idx = ex.convert(ex.emit(s.index), s.index->dtype, DType::I64);
      Value* v = ex.emit(s.value);
      ex.store(s.buffer, idx, ex.convert(v, s.value->dtype, k_.buffers[s.buffer].dtype));
    }
  }

  Carried initial_states(const ir::Phase& ph) {
    Carried init;
    for (int a : ph.accs) {
      AccState st = init_state(a);
      init.insert(init.end(), st.v.begin(), st.v.end());
    }
    return init;
  }

  void finish_accs(const ir::Phase& ph, ExprEmitter& ex, const Carried& states) {
    size_t pos = 0;
    for (int a : ph.accs) {
      bool arg = is_arg(k_.accs[a].kind);
      AccState st{{states[pos]}};
      if (arg) st.v.push_back(states[pos + 1]);
      ex.accs[a] = final_value(a, st);
      pos += arg ? 2 : 1;
    }
  }

  // An empty reduce domain's accumulator value: the reference's initial one (Prod 1, else 0).
  Value* empty_value(int a) {
    const ir::Accumulator& A = k_.accs[a];
    llvm::Type* t = acc_type(a);
    double v = A.kind == ir::AccKind::Prod ? 1.0 : 0.0;
    return is_float(A.dtype) ? llvm::ConstantFP::get(t, v)
                             : (A.dtype == DType::Bool ? static_cast<Value*>(b_.getInt1(v != 0))
                                                       : llvm::ConstantInt::get(t, static_cast<uint64_t>(v)));
  }

  // A phase over a dynamic reduce domain (segment kernels): one counted loop over this point's
  // [begin, end); an empty range gives empty_value, as an empty compile-time domain does.
  void dynamic_phase(const ir::Phase& ph, ExprEmitter& ex) {
    Value* lo = ex.emit(k_.reduce_begin);
    Value* n = b_.CreateSub(ex.emit(k_.reduce_end), lo);
    Carried fin = counted_loop(n, false, initial_states(ph), [&](Value* iv, const Carried& cur) {
      return reduce_point(ph, ex, {b_.CreateAdd(lo, iv, "", true, true)}, cur);
    });
    ex.reset();
    ex.reduce.clear();
    finish_accs(ph, ex, fin);
    Value* any = b_.CreateICmpSGT(n, b_.getInt64(0));
    for (int a : ph.accs) ex.accs[a] = b_.CreateSelect(any, ex.accs[a], empty_value(a));
  }

  // All phases (from `first`) of one outer point.
  void outer_point(ExprEmitter& ex, size_t first) {
    for (size_t p = first; p < k_.phases.size(); ++p) {
      const ir::Phase& ph = k_.phases[p];
      ex.reset();
      ex.reduce.clear();
      if (!ph.over_reduce) {
        run_stores(ph, ex);
        continue;
      }
      if (k_.dynamic_reduce()) {
        dynamic_phase(ph, ex);
        continue;
      }
      if (k_.reduce_numel() == 0) {
        for (int a : ph.accs) ex.accs[a] = empty_value(a);
        continue;
      }
      if (cascades(ph) && k_.reduce_numel() > kCascadeLeaf) {
        Carried fin =
            cascade(ph, ex, cascade_levels(k_.reduce_numel()), b_.getInt64(0), b_.getInt64(k_.reduce_numel()));
        ex.reset();
        ex.reduce.clear();
        finish_accs(ph, ex, fin);
        continue;
      }
      std::vector<Value*> ridx(k_.reduce.size());
      std::function<Carried(size_t, const Carried&)> nest = [&](size_t d, const Carried& cur) -> Carried {
        if (d == k_.reduce.size()) return reduce_point(ph, ex, ridx, cur);
        return counted_loop(b_.getInt64(k_.reduce[d]), true, cur, [&](Value* iv, const Carried& c2) {
          ridx[d] = iv;
          return nest(d + 1, c2);
        });
      };
      Carried fin = nest(0, initial_states(ph));
      ex.reset();
      ex.reduce.clear();
      finish_accs(ph, ex, fin);
    }
  }

  // ---- cascaded sums ----
  // Why: a reduce loop folds its points one after the other (the vectoriser spreads them over
  // its lanes, 32 on AVX2, each lane still adding n/32 in a row), so the rounding error of a
  // float sum grows like n/L * u (u = 2^-24): 2^20 copies of 0.1f were off by 4.5e-6.
  // How: a phase with a float Sum (and no Arg accumulator) walks its flat reduce domain as
  // leaf blocks of kCascadeLeaf points, each its own (vectorised) loop from the identity; a level
  // folds kCascadeFan blocks of the level below, in order, with plain operations; as many levels
  // as cover the domain. An element goes through leaf/L roundings in its lane, log2(L) in the
  // vector's horizontal fold and at most kCascadeFan - 1 per level, so
  //   |sum - exact| <= (8 * ceil(log8 n) + 8) * u * sum|x|
  // (the leaf loop vectorised, L >= 16 lanes). Blocks are fixed positions of the reduce domain
  // and each point runs in one thread: the order stays a function of the code alone.
  static constexpr int64_t kCascadeLeaf = 256;
  static constexpr int64_t kCascadeFan = 8;

  bool cascades(const ir::Phase& ph) const {
    bool sum = false;
    for (int a : ph.accs) {
      if (is_arg(k_.accs[a].kind)) return false;
      sum |= k_.accs[a].kind == ir::AccKind::Sum && is_float(k_.accs[a].dtype);
    }
    return sum;
  }

  static int cascade_levels(int64_t n) {
    int l = 0;
    for (int64_t s = kCascadeLeaf; s < n; s *= kCascadeFan) ++l;
    return l;
  }

  // Phase ph's states over the flat reduce points [start, start + count) (1 <= count <=
  // kCascadeLeaf * kCascadeFan^level), folded from the identity.
  Carried cascade(const ir::Phase& ph, ExprEmitter& ex, int level, Value* start, Value* count) {
    if (level == 0) {
      std::vector<Value*> ext;
      for (int64_t r : k_.reduce) ext.push_back(b_.getInt64(r));
      return flat_range(
          start, b_.CreateAdd(start, count, "", true, true), ext, true, initial_states(ph),
          [&](const std::vector<Value*>& ridx, const Carried& cur) { return reduce_point(ph, ex, ridx, cur); });
    }
    int64_t S = kCascadeLeaf;
    for (int l = 1; l < level; ++l) S *= kCascadeFan;
    Value* nsub = b_.CreateUDiv(b_.CreateAdd(count, b_.getInt64(S - 1), "", true, true), b_.getInt64(S));
    return counted_loop(nsub, true, initial_states(ph), [&](Value* j, const Carried& cur) {
      Value* off = b_.CreateMul(j, b_.getInt64(S), "", true, true);
      Value* len = smin(b_.getInt64(S), b_.CreateSub(count, off, "", true, true));
      Carried part = cascade(ph, ex, level - 1, b_.CreateAdd(start, off, "", true, true), len);
      Carried next;
      for (size_t i = 0; i < ph.accs.size(); ++i) next.push_back(fold(ph.accs[i], cur[i], part[i], false));
      return next;
    });
  }

  // ---- column tiles (plan_.column_tile > 0, see column_tiles.cpp) ----
  // Each accumulator's state (value; ArgMax/ArgMin: value, index) lives in stack arrays of one
  // slot per lane of the tile, allocated once per call in the entry block. Bool is i8 there.
  std::vector<llvm::Type*> state_types(int a) {
    const ir::Accumulator& A = k_.accs[a];
    if (is_arg(A.kind)) return {reg_type(c_, A.value->dtype), b_.getInt64Ty()};
    return {acc_type(a)};
  }
  static llvm::Type* slot_type(llvm::Type* t) { return t->isIntegerTy(1) ? llvm::Type::getInt8Ty(t->getContext()) : t; }

  void alloc_tile_slots() {
    slots_.assign(k_.accs.size(), {});
    levels_.assign(k_.accs.size(), {});
    auto array = [&](llvm::Type* t, int64_t n) {
      llvm::AllocaInst* p = b_.CreateAlloca(slot_type(t), b_.getInt64(n));
      p->setAlignment(llvm::Align(64));
      return p;
    };
    reg_lanes_ = register_lanes();
    pair_lanes_ = plan_lane_pairs(k_);
    plan_row_block();
    regs_.assign(k_.accs.size(), {});
    rows_.assign(k_.accs.size(), {});
    row_state_.assign(k_.accs.size(), {});
    if (row_pack_) row_packed_ = b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_, b_.getInt64(row_packed_off_));
    for (size_t a = 0; a < k_.accs.size(); ++a) {
      for (llvm::Type* t : state_types(static_cast<int>(a))) {
        slots_[a].push_back(array(t, plan_.column_tile));
        if (reg_lanes_ > 0) regs_[a].push_back(array(t, reg_lanes_));
      }
      if (row_rows_ > 0)  // the sum, then its cascade levels
        for (int l = 0; l <= row_levels(static_cast<int>(a)); ++l) {
          rows_[a].push_back(array(acc_type(static_cast<int>(a)), row_rows_ * row_lanes_));
          if (row_pack_)
            row_state_[a].push_back(b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_, b_.getInt64(row_state_off_[a][l])));
        }
      if (k_.accs[a].kind == ir::AccKind::Sum && is_float(k_.accs[a].dtype))
        for (int l = 0; l < tile_levels(); ++l)
          levels_[a].push_back(array(acc_type(static_cast<int>(a)), plan_.column_tile));
    }
  }

  // Cascaded sums in column tiles (see cascade): a lane's partial closes every kTileLeaf of its
  // points (4 visits) into level 1 of its column, level l every kTileLeaf * kCascadeFan^(l-1)
  // into level l + 1 (arrays like the state's), so |err| stays within the bound of cascade.
  // A contraction's leaf is longer: its row blocks (row_block) close their register sums into
  // the level arrays in memory, a load, add and store per sum, once per leaf.
  static constexpr int64_t kTileLeaf = 16, kContractionLeaf = 64;
  int64_t tile_leaf() const { return k_.kind == ir::KernelKind::Contraction ? kContractionLeaf : kTileLeaf; }
  int tile_levels() const {
    int l = 0;
    for (int64_t s = tile_leaf(); s < k_.reduce_numel(); s *= kCascadeFan) ++l;
    return l;
  }
  std::vector<int> tile_cascade_accs(const ir::Phase& ph) const {
    std::vector<int> out;
    if (!cascades(ph) || tile_levels() == 0) return out;
    for (int a : ph.accs)
      if (!levels_[a].empty()) out.push_back(a);
    return out;
  }
  Value* level_ptr(int a, int l, Value* lane) { return b_.CreateInBoundsGEP(acc_type(a), levels_[a][l - 1], lane); }
  // The points up to flat reduce position `after` were folded, the last `count` of them by the
  // visit just made: close every level whose block ended within them.
  void tile_close(const std::vector<int>& cs, Value* w, Value* after, int64_t count, int l = 1) {
    int64_t S = tile_leaf();
    for (int i = 1; i < l; ++i) S *= kCascadeFan;
    Value* crossed = b_.CreateICmpULT(b_.CreateURem(after, b_.getInt64(S)), b_.getInt64(count));
    if_else(
        crossed,
        [&] {
          counted_loop(w, true, {}, [&](Value* j, const Carried&) {
            for (int a : cs) {
              Value* lower = l == 1 ? load_state(a, j).v[0] : b_.CreateLoad(acc_type(a), level_ptr(a, l - 1, j));
              Value* up = b_.CreateLoad(acc_type(a), level_ptr(a, l, j));
              b_.CreateStore(fold(a, up, lower, false), level_ptr(a, l, j));
              if (l == 1) store_state(a, j, init_state(a));
              else b_.CreateStore(identity(a), level_ptr(a, l - 1, j));
            }
            return Carried{};
          });
          if (l < tile_levels()) tile_close(cs, w, after, count, l + 1);
        },
        [] {});
  }

  using StateArrays = std::vector<std::vector<Value*>>;  // per accumulator, its state arrays
  AccState load_state(int a, Value* lane, const StateArrays* arrays = nullptr) {
    const StateArrays& arr = arrays ? *arrays : slots_;
    AccState st;
    std::vector<llvm::Type*> ts = state_types(a);
    for (size_t i = 0; i < ts.size(); ++i) {
      llvm::Type* mt = slot_type(ts[i]);
      Value* v = b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, arr[a][i], lane));
      st.v.push_back(mt == ts[i] ? v : b_.CreateTrunc(v, ts[i]));
    }
    return st;
  }

  void store_state(int a, Value* lane, const AccState& st, const StateArrays* arrays = nullptr) {
    const StateArrays& arr = arrays ? *arrays : slots_;
    for (size_t i = 0; i < st.v.size(); ++i) {
      llvm::Type* mt = slot_type(st.v[i]->getType());
      Value* v = mt == st.v[i]->getType() ? st.v[i] : b_.CreateZExt(st.v[i], mt);
      b_.CreateStore(v, b_.CreateInBoundsGEP(mt, arr[a][i], lane));
    }
  }

  // Lanes [base, base + n) of a tile (base null: 0); their states live in `arrays` at index
  // lane - base (arrays null: the tile's slots_ at index lane).
  struct LaneBlock {
    Value* n;
    Value* base;
    const StateArrays* arrays;
    bool pairs = false;  // two lanes per iteration (a bag's nibble rows: plan_lane_pairs)
  };

  // The points [first, first + len) along the innermost outer dim (one segment of a chunk) as
  // tiles of plan_.column_tile lanes; the last tile takes the rest, so tiles never straddle
  // segments or thread chunks (and a lane's result never depends on its tile anyway).
  void column_segment(ExprEmitter& ex, const std::vector<Value*>& first, Value* len) {
    const int64_t T = plan_.column_tile;
    Value* ntiles = b_.CreateUDiv(b_.CreateAdd(len, b_.getInt64(T - 1), "", true, true), b_.getInt64(T));
    counted_loop(ntiles, true, {}, [&](Value* t, const Carried&) {
      Value* off = b_.CreateMul(t, b_.getInt64(T), "", true, true);
      Value* w = smin(b_.getInt64(T), b_.CreateSub(len, off, "", true, true));
      std::vector<Value*> at = first;
      at.back() = b_.CreateAdd(first.back(), off, "", true, true);
      column_tile(ex, at, w);
      return Carried{};
    });
  }

  // All phases of the `w` (>= 1) adjacent points starting at `first`: each phase is its usual
  // loop nest with a unit-stride lane loop innermost (what the vectoriser widens). A lane folds
  // its column's values in row-major reduce order with plain operations (no reassociation: the
  // vector lanes are independent columns, nothing needs reordering), so a column's bits do not
  // depend on the tile width, where its tile starts, or vector body vs remainder.
  void column_tile(ExprEmitter& ex, const std::vector<Value*>& first, Value* w) {
    std::vector<bool> done(k_.accs.size(), false);
    // body(j) for lane j of `blk` at column `col` (null: first.back() + its lane), with the
    // lane's outer indices and finished accumulators bound in `ex`
    auto lane_body = [&](const LaneBlock& blk, Value* j, Value* col, const std::function<void(Value*)>& body) {
      ex.reset();
      Value* lane = blk.base ? b_.CreateAdd(blk.base, j, "", true, true) : j;
      std::vector<Value*> at = first;
      at.back() = col ? col : b_.CreateAdd(first.back(), lane, "", true, true);
      ex.outer = at;
      for (size_t a = 0; a < k_.accs.size(); ++a)
        ex.accs[a] = done[a] ? final_value(static_cast<int>(a), load_state(static_cast<int>(a), lane)) : nullptr;
      body(j);
    };
    // body(j) for the lanes j of `blk` (in pairs when blk.pairs: lane_pairs)
    auto lanes_of = [&](const LaneBlock& blk, const std::function<void(Value*)>& body) {
      if (blk.pairs) {
        lane_pairs(blk, first.back(), [&](Value* j, Value* col) { lane_body(blk, j, col, body); });
        return;
      }
      counted_loop(
          blk.n, true, {},
          [&](Value* j, const Carried&) {
            lane_body(blk, j, nullptr, body);
            return Carried{};
          },
          blk.arrays ? register_lane_loop() : nullptr);
    };
    const LaneBlock all{w, nullptr, nullptr};
    auto lanes = [&](const std::function<void(Value*)>& body) { lanes_of(all, body); };
    for (const ir::Phase& ph : k_.phases) {
      ex.reduce.clear();
      if (!ph.over_reduce) {
        lanes([&](Value*) { run_stores(ph, ex); });
        continue;
      }
      const std::vector<int> cs = tile_cascade_accs(ph);
      lanes([&](Value* j) {
        for (int a : ph.accs) store_state(a, j, init_state(a));
        for (int a : cs)
          for (int l = 1; l <= tile_levels(); ++l) b_.CreateStore(identity(a), level_ptr(a, l, j));
      });
      const size_t nr = k_.dynamic_reduce() ? 1 : k_.reduce.size();
      std::vector<Value*> ridx(nr);
      auto close_after = [&](int64_t count) {  // after the visit of `count` points at ridx
        if (cs.empty()) return;
        Value* flat = b_.getInt64(0);
        for (size_t d = 0; d < nr; ++d) {
          Value* i = d + 1 == nr ? b_.CreateAdd(ridx[d], b_.getInt64(count), "", true, true) : ridx[d];
          flat = b_.CreateAdd(b_.CreateMul(flat, b_.getInt64(k_.reduce[d]), "", true, true), i, "", true, true);
        }
        tile_close(cs, w, flat, count);
      };
      // `count` consecutive points of the innermost reduce dim from ridx[nr - 1] on, in order,
      // with one load and one store of the lane's state (in blk's arrays)
      auto fold_points = [&](int64_t count, const LaneBlock& blk) {
        lanes_of(blk, [&](Value* j) {
          Carried cur;
          for (int a : ph.accs) {
            AccState st = load_state(a, j, blk.arrays);
            cur.insert(cur.end(), st.v.begin(), st.v.end());
          }
          std::vector<Value*> at = ridx;
          for (int64_t u = 0; u < count; ++u) {
            at[nr - 1] = b_.CreateAdd(ridx[nr - 1], b_.getInt64(u), "", true, true);
            cur = reduce_point(ph, ex, at, cur, /*reassoc=*/false);
          }
          size_t pos = 0;
          for (int a : ph.accs) {
            size_t n = state_types(a).size();
            store_state(a, j, {Carried(cur.begin() + pos, cur.begin() + pos + n)}, blk.arrays);
            pos += n;
          }
        });
      };
      std::function<void(size_t)> nest = [&](size_t d) {
        const int64_t ext = k_.reduce[d];
        if (d + 1 == nr) {
          const int64_t u = std::min(ph.accs.empty() ? 1 : kTileRowUnroll, ext);
          if (ext / u > 0)
            counted_loop(b_.getInt64(ext / u), true, {}, [&](Value* iv, const Carried&) {
              ridx[d] = b_.CreateMul(iv, b_.getInt64(u), "", true, true);
              fold_points(u, all);
              close_after(u);
              return Carried{};
            });
          if (ext % u) {
            ridx[d] = b_.getInt64(ext - ext % u);
            fold_points(ext % u, all);
            close_after(ext % u);
          }
          return;
        }
        counted_loop(b_.getInt64(ext), true, {}, [&](Value* iv, const Carried&) {
          ridx[d] = iv;
          nest(d + 1);
          return Carried{};
        });
      };
      if (k_.dynamic_reduce()) tile_segment(ph, ex, first, w, ridx[0], fold_points, lanes_of);
      else nest(0);
      if (!cs.empty())  // each lane's partial takes its levels, lowest first
        lanes([&](Value* j) {
          for (int a : cs) {
            Value* v = load_state(a, j).v[0];
            for (int l = 1; l <= tile_levels(); ++l)
              v = fold(a, v, b_.CreateLoad(acc_type(a), level_ptr(a, l, j)), false);
            store_state(a, j, {{v}});
          }
        });
      for (int a : ph.accs) done[a] = true;
    }
    ex.reduce.clear();
  }

  // The dynamic reduce phase `ph` of a column tile (a segment kernel: the lanes are columns of
  // one bag, whose id range plan_column_tile checked to be lane-invariant): the bag's points in
  // order, kTileRowUnroll per visit of a lane (as a compile-time domain), so each id and its
  // lane-invariant values (weight, row address, dequantisation scale) are loaded once per tile
  // and the lane loop reads the row as vectors. Every point also prefetches the rows of the point
  // a few positions ahead (RowPrefetch, prefetch_rows.cpp), in the next bag near the end of this
  // one. An empty range gives every lane the empty value, as dynamic_phase does.
  //
  // Register blocks: a tile whose width is a multiple of reg_lanes_ (at most kRegMaxBlocks of
  // them: a bag row of D = 64 f32 is one block), or exactly a narrower power of two down to
  // kRegMinLanes (D = 16, 32), walks the bag once per block of R lanes
  // with the block's states in regs_, arrays of a compile-time length that are only ever
  // indexed by constant-trip lane loops: once the vectoriser has widened those loops and the
  // unroller flattened them, SROA turns the arrays into vector registers carried across the ids
  // (a <8 x float> phi per 8 lanes on AVX2), so a point costs its row loads and the folds, not a
  // load and a store of every lane's state. The block copies its states into slots_ at the end,
  // and everything after (empty bags, later phases) is the tile's usual code. Each lane still
  // folds its column's ids in order with plain operations: the bits are the generic path's.
  void tile_segment(const ir::Phase& ph, ExprEmitter& ex, const std::vector<Value*>& first, Value* w, Value*& pos,
                    const std::function<void(int64_t, const LaneBlock&)>& fold_points,
                    const std::function<void(const LaneBlock&, const std::function<void(Value*)>&)>& lanes_of) {
    auto range = [&](const std::vector<Value*>& at) {
      ex.reset();
      ex.reduce.clear();
      ex.outer = at;
      std::pair<Value*, Value*> r{ex.emit(k_.reduce_begin), ex.emit(k_.reduce_end)};
      ex.reset();
      return r;
    };
    Value *lo, *hi;  // (not a structured binding: the lambdas below capture them)
    std::tie(lo, hi) = range(first);
    Value* n = smax(b_.CreateSub(hi, lo), b_.getInt64(0));
    // The next bag (the next index of the outer dim before the lanes), empty past the last one.
    const size_t nd = first.size();
    std::vector<Value*> next = first;
    Value* next_lo = b_.getInt64(0);
    Value* next_hi = next_lo;
    if (nd >= 2) {
      Value* o1 = b_.CreateAdd(first[nd - 2], b_.getInt64(1));
      Value* has_next = b_.CreateICmpSLT(o1, outer_ext_[nd - 2]);
      next[nd - 2] = b_.CreateSelect(has_next, o1, first[nd - 2]);  // a bag that exists: loads stay in range
      std::tie(next_lo, next_hi) = range(next);
      next_hi = b_.CreateSelect(has_next, next_hi, next_lo);
    }
    const std::vector<const ir::Expr*> rows = gathered_row_loads(ph, k_);
    // The bag's points for the lanes of `blk`, `u` per visit of a lane, each with the prefetch of
    // point + pf.ahead().
    auto walk = [&](const LaneBlock& blk, int64_t u) {
      std::vector<Value*> at0 = first;
      if (blk.base) at0.back() = b_.CreateAdd(first.back(), blk.base, "", true, true);
      RowPrefetch pf(b_, ex, rows, at0, blk.n);
      auto prefetch = [&](Value* p) {  // the rows of point p + pf.ahead(), if it exists
        if (pf.empty()) return;
        Value* q = b_.CreateAdd(p, b_.getInt64(pf.ahead()));
        Value* here = b_.CreateICmpSLT(q, hi);
        Value* q_next = b_.CreateAdd(next_lo, b_.CreateSub(q, hi));
        Value* any = b_.CreateOr(here, b_.CreateICmpSLT(q_next, next_hi));
        if_else(
            any,
            [&] {
              std::vector<Value*> at = at0;
              if (nd >= 2) at[nd - 2] = b_.CreateSelect(here, first[nd - 2], next[nd - 2]);
              pf.emit(at, b_.CreateSelect(here, q, q_next));
            },
            [] {});
      };
      Value* steps = b_.CreateUDiv(n, b_.getInt64(u));
      counted_loop(steps, false, {}, [&](Value* iv, const Carried&) {
        pos = b_.CreateAdd(lo, b_.CreateMul(iv, b_.getInt64(u), "", true, true), "", true, true);
        for (int64_t i = 0; i < u; ++i) prefetch(b_.CreateAdd(pos, b_.getInt64(i), "", true, true));
        fold_points(u, blk);
        return Carried{};
      });
      if (u == 1) return;
      Value* tail = b_.CreateAdd(lo, b_.CreateMul(steps, b_.getInt64(u), "", true, true), "", true, true);
      counted_loop(b_.CreateSub(n, b_.CreateMul(steps, b_.getInt64(u))), false, {}, [&](Value* iv, const Carried&) {
        pos = b_.CreateAdd(tail, iv, "", true, true);
        prefetch(pos);
        fold_points(1, blk);
        return Carried{};
      });
    };
    const LaneBlock all{w, nullptr, nullptr};
    const LaneBlock generic{w, nullptr, nullptr, pair_lanes_};
    // Blocks of R lanes: R = reg_lanes_ for widths of 1 to kRegMaxBlocks such blocks, then
    // narrower single blocks (w == R) down to kRegMinLanes, else the generic tile.
    std::function<void(int64_t)> blocks = [&](int64_t R) {
      Value* fits = R == reg_lanes_ ? b_.CreateAnd(b_.CreateICmpEQ(b_.CreateURem(w, b_.getInt64(R)), b_.getInt64(0)),
                                                   b_.CreateICmpULE(w, b_.getInt64(R * kRegMaxBlocks)))
                                    : b_.CreateICmpEQ(w, b_.getInt64(R));
      if_else(
          fits,
          [&] {
            counted_loop(b_.CreateUDiv(w, b_.getInt64(R)), true, {}, [&](Value* i, const Carried&) {
              const LaneBlock blk{b_.getInt64(R), b_.CreateMul(i, b_.getInt64(R), "", true, true), &regs_};
              lanes_of(blk, [&](Value* j) {
                for (int a : ph.accs) store_state(a, j, init_state(a), &regs_);
              });
              walk(blk, kRegRowUnroll);
              lanes_of(blk, [&](Value* j) {
                for (int a : ph.accs)
                  store_state(a, b_.CreateAdd(blk.base, j, "", true, true), load_state(a, j, &regs_));
              });
              return Carried{};
            });
          },
          [&] {
            if (R / 2 >= kRegMinLanes) blocks(R / 2);
            else walk(generic, kTileRowUnroll);
          });
    };
    if (reg_lanes_ > 0 && !ph.accs.empty()) blocks(reg_lanes_);
    else walk(generic, kTileRowUnroll);
    if (ph.accs.empty()) return;
    if_else(
        b_.CreateICmpEQ(n, b_.getInt64(0)),
        [&] {
          lanes_of(all, [&](Value* j) {
            for (int a : ph.accs) {
              AccState st = init_state(a);
              if (!is_arg(k_.accs[a].kind)) st.v[0] = empty_value(a);
              store_state(a, j, st);  // (an Arg state's index is already 0, its empty value)
            }
          });
        },
        [] {});
  }

  // f(j, column) for the lanes j in [0, blk.n) of a tile starting at column c0 + blk.base, two
  // per iteration p (lanes 2p and 2p + 1), then the last one when blk.n is odd. The columns are
  // written as 2 * x | bit with x = h + p (+ r) (c0 + base = 2h + r): the udiv by 2 of a
  // nibble's byte index then folds to x, which moves by one per iteration whatever the parity.
  void lane_pairs(const LaneBlock& blk, Value* c0, const std::function<void(Value*, Value*)>& f) {
    Value* start = blk.base ? b_.CreateAdd(c0, blk.base, "", true, true) : c0;
    Value* h = b_.CreateLShr(start, 1);
    Value* r = b_.CreateAnd(start, 1);
    Value* r1 = b_.CreateXor(r, 1);
    auto col = [&](Value* x, Value* bit) {
      return b_.CreateAdd(b_.CreateShl(x, 1, "", true, true), bit, "", true, true);  // (bit < 2: an or)
    };
    counted_loop(b_.CreateLShr(blk.n, 1), false, {}, [&](Value* p, const Carried&) {  // (none for 1 lane)
      Value* x = b_.CreateAdd(h, p, "", true, true);
      Value* j = b_.CreateShl(p, 1, "", true, true);
      f(j, col(x, r));
      f(b_.CreateAdd(j, b_.getInt64(1), "", true, true), col(b_.CreateAdd(x, r, "", true, true), r1));
      return Carried{};
    });
    if_else(
        b_.CreateICmpNE(b_.CreateAnd(blk.n, 1), b_.getInt64(0)),
        [&] {
          Value* j = b_.CreateSub(blk.n, b_.getInt64(1), "", true, true);
          f(j, b_.CreateAdd(start, j, "", true, true));
        },
        [] {});
  }

  // ---- row blocks of a contraction (plan_row_blocks, column_tiles.cpp) ----
  // Register tile: kRowBlockRows (6) rows x 4 vectors of lanes on AVX-512 (24 of the 32
  // registers hold sums; B's vectors for one k take 4 more, A's elements are broadcast from
  // memory), 6 x 2 on AVX2 (12 of 16). Rows per pass over B's columns (row_panel_): as many as
  // keep that panel of A (rows x K, or rows x kRowKc when packed) within kRowPanelBytes, in L2
  // while each block of lanes of B is read once per block of rows.
  //
  // Packed B (K > kRowKc and one plain f32/f64/i32/i64 load moves with the lane: B's): a panel's
  // columns go in blocks of row_nc_ lanes; in each, K goes in steps of kRowKc (the panel's rows
  // x kRowKc of A stay in L2 across the block), and each step copies kRowKc x lanes of B per
  // block of lanes into a contiguous stack array that every block of rows of the panel then
  // reads. The sums (and cascade levels) of the panel's rows x row_nc_ lanes are carried from
  // step to step in the scratch kf_main gets (row_state_). Read in place, a block's B rows lie
  // a row length apart: at 2048 f64 columns (16 KiB) each is on its own page and in one of 8
  // sets of L2, and a 2048^3 f64 GEMM ran at 35% of the FMA peak (1024^3: 85%).
  static constexpr int64_t kRowPanelBytes = 256 << 10;
  static constexpr int64_t kRowKc = 1024;             // a multiple of kContractionLeaf
  static constexpr int64_t kRowStateBytes = 4 << 20;  // row_state_ (the scratch) at most
  static constexpr int64_t kRowMaxNc = 2048;          // lanes of a pass's column block at most
  static constexpr int64_t kRowPassRows = 504;        // rows of a pass (packed B)
  void plan_row_block() {
    row_rows_ = row_lanes_ = row_panel_ = 0;
    row_pack_ = nullptr;
    if (plan_.row_block == 0 || math_.tier == MathLib::Tier::SSE2) return;
    int64_t bytes = 1;
    for (const auto& A : k_.accs) bytes = std::max<int64_t>(bytes, dtype_size(A.dtype));
    const int64_t vectors = math_.tier == MathLib::Tier::AVX512 ? 4 : 2;
    const int64_t lanes = vectors * math_.vector_bits() / 8 / bytes;
    if (lanes > plan_.column_tile) return;  // (a forced narrow tile, Options::llvm_column_tile)
    row_rows_ = plan_.row_block;
    row_lanes_ = lanes;
    const int64_t K = k_.reduce_numel();
    // B is packed when K is long (its rows a row length apart: see above) or when it is read
    // along K (x @ w.T: a lane's elements K apart), whatever K.
    const ir::Expr* B = contraction_b(k_);
    const int lane = static_cast<int>(k_.outer.size()) - 1;
    if (B && (K > kRowKc || ir::affine_step(B->args[0].get(), ir::Space::Outer, lane) != 1)) row_pack_ = B;
    const int64_t depth = std::min(K, kRowKc);
    row_panel_ = std::clamp<int64_t>(kRowPanelBytes / std::max<int64_t>(1, depth * bytes), row_rows_, 512);
    row_panel_ = std::max(row_rows_, row_panel_ / row_rows_ * row_rows_);
    row_scratch_bytes_ = 0;
    row_pass_ = row_panel_;
    if (!row_pack_) return;
    row_pass_ = kRowPassRows;
    int64_t state = 0;  // bytes per (row, lane): each accumulator's sum and levels
    for (int x : k_.phases[0].accs) state += dtype_size(k_.accs[x].dtype) * (1 + row_levels(x));
    row_nc_ =
        std::clamp<int64_t>(kRowStateBytes / (state * row_pass_), row_lanes_, kRowMaxNc) / row_lanes_ * row_lanes_;
    row_state_off_.assign(k_.accs.size(), {});
    for (int x : k_.phases[0].accs)
      for (int l = 0; l <= row_levels(x); ++l) {
        row_state_off_[x].push_back(row_scratch_bytes_);
        row_scratch_bytes_ += (row_pass_ * row_nc_ * dtype_size(k_.accs[x].dtype) + 63) / 64 * 64;
      }
    row_packed_off_ = row_scratch_bytes_;
    row_scratch_bytes_ += kRowKc * row_nc_ * dtype_size(row_pack_->dtype);
  }
  // Cascade levels of accumulator a in a row block (those of the column tile: tile_levels()).
  int row_levels(int a) const { return is_float(k_.accs[a].dtype) ? tile_levels() : 0; }

  // g = start; while (g < limit) g = body(g);
  void while_loop(Value* start, Value* limit, const std::function<Value*(Value*)>& body) {
    llvm::Function* f = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* hdr = llvm::BasicBlock::Create(c_, "while", f);
    auto* after = llvm::BasicBlock::Create(c_, "while_after", f);
    b_.CreateCondBr(b_.CreateICmpSLT(start, limit), hdr, after);
    b_.SetInsertPoint(hdr);
    llvm::PHINode* g = b_.CreatePHI(b_.getInt64Ty(), 2, "g");
    g->addIncoming(start, pre);
    Value* next = body(g);
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    b_.CreateCondBr(b_.CreateICmpSLT(next, limit), hdr, after);
    g->addIncoming(next, latch);
    b_.SetInsertPoint(after);
  }

  // The points [begin, end) of a row-blocked contraction as pieces: a partial row (where the
  // chunk starts or ends inside one) is a piece of one row and part of its columns; whole rows
  // go in panels of at most row_panel_ rows of one batch. Every piece is a row_panel, so the
  // column tile is emitted once (each copy is tens of ms of O3 and codegen). Every point's value
  // is the column tile's bits (row_block), so where a chunk starts never changes a result.
  void row_range(ExprEmitter& ex, Value* begin, Value* end, const std::vector<Value*>& ext) {
    const size_t nd = ext.size();
    Value* C = smax(ext.back(), b_.getInt64(1));
    while_loop(begin, end, [&](Value* pos) {
      Value* q = b_.CreateUDiv(pos, C);
      Value* c = b_.CreateURem(pos, C);
      Value* left = b_.CreateSub(end, pos);
      std::vector<Value*> idx = unravel(q, ext, nd - 1);
      Value* partial = b_.CreateOr(b_.CreateICmpNE(c, b_.getInt64(0)), b_.CreateICmpSLT(left, C));
      // the rows left in this batch and chunk, in as few pieces of at most row_pass_ rows as
      // the plain split (a last piece of a few rows packed B again for them), row_rows_ apart
      Value* avail = smin(b_.CreateUDiv(left, C), b_.CreateSub(ext[nd - 2], idx[nd - 2], "", true, true));
      Value* pieces = b_.CreateUDiv(b_.CreateAdd(avail, b_.getInt64(row_pass_ - 1)), b_.getInt64(row_pass_));
      Value* even =
          b_.CreateUDiv(b_.CreateAdd(avail, b_.CreateSub(pieces, b_.getInt64(1))), smax(pieces, b_.getInt64(1)));
      even = b_.CreateMul(b_.CreateUDiv(b_.CreateAdd(even, b_.getInt64(row_rows_ - 1)), b_.getInt64(row_rows_)),
                          b_.getInt64(row_rows_));
      Value* whole = smin(avail, even);
      Value* rows = b_.CreateSelect(partial, b_.getInt64(1), whole);
      Value* c1 = b_.CreateSelect(partial, smin(C, b_.CreateAdd(c, left)), C);
      row_panel(ex, idx, rows, c, c1);
      return b_.CreateAdd(pos, b_.CreateMul(rows, b_.CreateSub(c1, c)), "", true, true);
    });
  }

  // Rows idx[nd - 2] + [0, rows) (idx: leading outer indices; one batch) x columns [c0, c1):
  // for each block of row_lanes_ columns, the blocks of row_rows_ rows (row_block; with packed B
  // kRowKc of K at a time); then, as column tiles in one loop, the rows left over in each block
  // of columns and the columns past the last whole block in every row.
  void row_panel(ExprEmitter& ex, const std::vector<Value*>& idx, Value* rows, Value* c0, Value* c1) {
    const int64_t MR = row_rows_, R = row_lanes_, K = k_.reduce_numel();
    auto at = [&](Value* r, Value* col) {
      std::vector<Value*> p = idx;
      p.back() = b_.CreateAdd(idx.back(), r, "", true, true);
      p.push_back(col);
      return p;
    };
    Value* W = b_.CreateSub(c1, c0);
    Value* nfull = b_.CreateUDiv(W, b_.getInt64(R));
    // Blocks of MR rows; 2 to MR - 1 rows over make one more block, its missing rows repeating
    // its last one (computed again, stored again with the same bits), where a column tile per
    // row was 2.5x slower per element; a single row over runs as column tiles.
    Value* full_groups = b_.CreateUDiv(rows, b_.getInt64(MR));
    Value* over = b_.CreateSub(rows, b_.CreateMul(full_groups, b_.getInt64(MR)));
    Value* padded = b_.CreateICmpSGE(over, b_.getInt64(2));
    Value* groups = b_.CreateAdd(full_groups, b_.CreateZExt(padded, b_.getInt64Ty()));
    Value* grouped = smin(rows, b_.CreateMul(groups, b_.getInt64(MR)));  // rows the blocks cover
    auto valid = [&](Value* r0) { return smin(b_.getInt64(MR), b_.CreateSub(rows, r0)); };
    auto blocks = [&](Value* n0, const RowPart& part) {  // every block of rows at columns n0
      counted_loop(groups, false, {}, [&](Value* gi, const Carried&) {
        Value* r0 = b_.CreateMul(gi, b_.getInt64(MR), "", true, true);
        RowPart p = part;
        p.state_row = part.state_row ? r0 : nullptr;
        p.rows = valid(r0);
        row_block(ex, at(r0, n0), p);
        return Carried{};
      });
    };
    if (!row_pack_) {
      counted_loop(nfull, false, {}, [&](Value* t, const Carried&) {
        blocks(b_.CreateAdd(c0, b_.CreateMul(t, b_.getInt64(R), "", true, true), "", true, true),
               {b_.getInt64(0), K, nullptr, nullptr, nullptr, nullptr, true});
        return Carried{};
      });
    } else {
      // Blocks of row_nc_ columns; in each, the sums of the pass's rows start from the identity
      // and K goes in steps of kRowKc (the last one finishes): each step packs its kRowKc x
      // columns of B once (pack_rows, one sliver per block of lanes), then runs the rows in
      // panels of row_panel_, each panel along the slivers (its rows x kRowKc of A in L2).
      const int64_t NB = row_nc_ / R, steps = (K - 1) / kRowKc;
      Value* any = b_.CreateAnd(b_.CreateICmpSGT(groups, b_.getInt64(0)), b_.CreateICmpSGT(nfull, b_.getInt64(0)));
      if_else(
          any,
          [&] {
            Value* ncb = b_.CreateUDiv(b_.CreateAdd(nfull, b_.getInt64(NB - 1)), b_.getInt64(NB));
            counted_loop(ncb, true, {}, [&](Value* cb, const Carried&) {
              Value* tb0 = b_.CreateMul(cb, b_.getInt64(NB), "", true, true);
              Value* nb = smin(b_.getInt64(NB), b_.CreateSub(nfull, tb0));
              auto col = [&](Value* t) {  // first column of sliver t of this block
                return b_.CreateAdd(c0,
                                    b_.CreateMul(b_.CreateAdd(tb0, t, "", true, true), b_.getInt64(R), "", true, true),
                                    "", true, true);
              };
              counted_loop(b_.CreateMul(groups, b_.getInt64(MR)), true, {}, [&](Value* r, const Carried&) {
                counted_loop(b_.CreateMul(nb, b_.getInt64(R)), true, {}, [&](Value* j, const Carried&) {
                  Value* at = b_.CreateAdd(b_.CreateMul(r, b_.getInt64(row_nc_), "", true, true), j, "", true, true);
                  for (int a : k_.phases[0].accs)
                    for (int l = 0; l <= row_levels(a); ++l)
                      b_.CreateStore(identity(a), b_.CreateInBoundsGEP(acc_type(a), row_state_[a][l], at));
                  return Carried{};
                });
                return Carried{};
              });
              const int64_t PG = row_panel_ / MR;  // blocks of rows per panel
              auto step = [&](Value* k0, int64_t n, bool last) {
                counted_loop(nb, true, {}, [&](Value* t, const Carried&) {
                  pack_rows(ex, at(b_.getInt64(0), col(t)), k0, n, sliver(t));
                  return Carried{};
                });
                Value* npanels = b_.CreateUDiv(b_.CreateAdd(groups, b_.getInt64(PG - 1)), b_.getInt64(PG));
                counted_loop(npanels, true, {}, [&](Value* pi, const Carried&) {
                  Value* g0 = b_.CreateMul(pi, b_.getInt64(PG), "", true, true);
                  Value* ng = smin(b_.getInt64(PG), b_.CreateSub(groups, g0));
                  counted_loop(nb, true, {}, [&](Value* t, const Carried&) {
                    counted_loop(ng, true, {}, [&](Value* gi, const Carried&) {
                      Value* r0 = b_.CreateMul(b_.CreateAdd(g0, gi, "", true, true), b_.getInt64(MR), "", true, true);
                      row_block(
                          ex, at(r0, col(t)),
                          {k0, n, r0, b_.CreateMul(t, b_.getInt64(R), "", true, true), sliver(t), valid(r0), last});
                      return Carried{};
                    });
                    return Carried{};
                  });
                  return Carried{};
                });
              };
              counted_loop(b_.getInt64(steps), false, {}, [&](Value* st, const Carried&) {
                step(b_.CreateMul(st, b_.getInt64(kRowKc), "", true, true), kRowKc, false);
                return Carried{};
              });
              step(b_.getInt64(steps * kRowKc), K - steps * kRowKc, true);
              return Carried{};
            });
          },
          [] {});
    }
    // items [0, left * nfull): row grouped + i / nfull, block i % nfull (the row over, if one);
    // then one per row, the columns [ct, c1) when there are any
    Value* ct = b_.CreateAdd(c0, b_.CreateMul(nfull, b_.getInt64(R), "", true, true), "", true, true);
    Value* cw = b_.CreateSub(c1, ct);
    Value* left = b_.CreateMul(b_.CreateSub(rows, grouped), nfull);
    Value* items = b_.CreateAdd(left, b_.CreateSelect(b_.CreateICmpSGT(cw, b_.getInt64(0)), rows, b_.getInt64(0)));
    counted_loop(items, false, {}, [&](Value* i, const Carried&) {
      Value* in_blocks = b_.CreateICmpULT(i, left);
      Value* nb = smax(nfull, b_.getInt64(1));  // (no blocks: no items of the first kind)
      Value* r = b_.CreateSelect(in_blocks, b_.CreateAdd(grouped, b_.CreateUDiv(i, nb)), b_.CreateSub(i, left));
      Value* col = b_.CreateSelect(in_blocks, b_.CreateAdd(c0, b_.CreateMul(b_.CreateURem(i, nb), b_.getInt64(R))), ct);
      column_tile(ex, at(r, col), b_.CreateSelect(in_blocks, b_.getInt64(R), cw));
      return Carried{};
    });
  }

  // Constant-trip loop over the lanes of a row block, widened to full vectors (SROA then keeps
  // the arrays it indexes by constants in registers).
  void row_lanes(const std::function<void(Value*)>& body) {
    counted_loop(
        b_.getInt64(row_lanes_), true, {},
        [&](Value* j, const Carried&) {
          body(j);
          return Carried{};
        },
        register_lane_loop());
  }

  // B's values (row_pack_) at reduce points [k0, k0 + n) for the lanes from `first` into
  // dst[k - k0][lane] (a sliver of the scratch: sliver()).
  Value* sliver(Value* t) {
    return b_.CreateInBoundsGEP(reg_type(c_, row_pack_->dtype), row_packed_,
                                b_.CreateMul(t, b_.getInt64(kRowKc * row_lanes_), "", true, true));
  }
  void pack_rows(ExprEmitter& ex, const std::vector<Value*>& first, Value* k0, int64_t n, Value* dst) {
    llvm::Type* t = reg_type(c_, row_pack_->dtype);
    counted_loop(b_.getInt64(n), true, {}, [&](Value* kk, const Carried&) {
      row_lanes([&](Value* j) {
        ex.reset();
        ex.outer = first;
        ex.outer.back() = b_.CreateAdd(first.back(), j, "", true, true);
        ex.reduce = {b_.CreateAdd(k0, kk, "", true, true)};
        Value* at = b_.CreateAdd(b_.CreateMul(kk, b_.getInt64(row_lanes_), "", true, true), j, "", true, true);
        b_.CreateStore(ex.emit(ir::ExprRef(row_pack_, [](const ir::Expr*) {})), b_.CreateInBoundsGEP(t, dst, at));
      });
      return Carried{};
    });
    ex.reset();
    ex.reduce.clear();
  }

  // What one row_block call computes: reduce points [k0, k0 + n) (k0 a multiple of tile_leaf()
  // unless n is all of K). state_row: null, or the block's first row in row_state_ (rows of
  // row_nc_ lanes; state_col its first lane there) (its sums are
  // read from there before and written back after, unless `last`); B's values from row_packed_
  // then. `last`: the sums are complete; finish them and run the later phases.
  struct RowPart {
    Value* k0;
    int64_t n;
    Value* state_row;  // (and state_col: the block's first lane there)
    Value* state_col;
    Value* packed;  // with state_row: B's sliver for these lanes (pack_rows)
    Value* rows;    // the block's rows that exist, 2..row_rows_ (the others repeat the last)
    bool last;
  };

  // All phases of rows first[nd - 2] + [0, row_rows_) x columns first[nd - 1] + [0, row_lanes_)
  // over the points of `part`. The sums live in rows_ arrays indexed only by constant-trip lane
  // loops and constants (the rows are unrolled), which the vectoriser, the unroller and SROA
  // turn into vector registers carried across K, as tile_segment's register blocks. Each (row,
  // lane) folds its products in k order and closes its cascade levels after the same points as
  // column_tile does (every tile_leaf() points, level l every tile_leaf() * kCascadeFan^(l-1)),
  // so its bits are the column tile's.
  void row_block(ExprEmitter& ex, const std::vector<Value*>& first, const RowPart& part) {
    const ir::Phase& ph = k_.phases[0];
    const size_t nd = first.size();
    const int64_t MR = row_rows_, R = row_lanes_;
    const std::vector<int> cs = tile_cascade_accs(ph);
    const int levels = cs.empty() ? 0 : tile_levels();
    auto cell = [&](int a, int l, int64_t i, Value* j) {  // l = 0: the sum, l >= 1: its level l
      return b_.CreateInBoundsGEP(acc_type(a), rows_[a][l], b_.CreateAdd(b_.getInt64(i * R), j, "", true, true));
    };
    auto saved = [&](int a, int l, int64_t i, Value* j) {  // the cell's place in row_state_
      Value* r = b_.CreateAdd(part.state_row, b_.getInt64(i), "", true, true);
      Value* col = b_.CreateAdd(part.state_col, j, "", true, true);
      return b_.CreateInBoundsGEP(
          acc_type(a), row_state_[a][l],
          b_.CreateAdd(b_.CreateMul(r, b_.getInt64(row_nc_), "", true, true), col, "", true, true));
    };
    auto bind = [&](int64_t i, Value* j) {  // ex at row i (past the block's rows: its last), lane j
      ex.reset();
      std::vector<Value*> p = first;
      Value* r = smin(b_.getInt64(i), b_.CreateSub(part.rows, b_.getInt64(1)));
      p[nd - 2] = b_.CreateAdd(first[nd - 2], r, "", true, true);
      p[nd - 1] = b_.CreateAdd(first[nd - 1], j, "", true, true);
      ex.outer = p;
    };
    auto each_cell = [&](const std::function<void(int, int, int64_t, Value*)>& f) {
      row_lanes([&](Value* j) {
        for (int64_t i = 0; i < MR; ++i)
          for (int a : ph.accs)
            for (int l = 0; l <= row_levels(a); ++l) f(a, l, i, j);
      });
    };
    each_cell([&](int a, int l, int64_t i, Value* j) {
      b_.CreateStore(part.state_row ? b_.CreateLoad(acc_type(a), saved(a, l, i, j)) : identity(a), cell(a, l, i, j));
    });
    llvm::Type* bt = row_pack_ ? reg_type(c_, row_pack_->dtype) : nullptr;
    auto points = [&](Value* k0, int64_t n) {  // reduce points [k0, k0 + n), n >= 1
      counted_loop(b_.getInt64(n), true, {}, [&](Value* kk, const Carried&) {
        Value* k = b_.CreateAdd(k0, kk, "", true, true);
        Value* kp = b_.CreateSub(k, part.k0);  // the point's row of row_packed_
        row_lanes([&](Value* j) {
          if (part.state_row) {
            Value* at = b_.CreateAdd(b_.CreateMul(kp, b_.getInt64(R), "", true, true), j, "", true, true);
            ex.fixed[row_pack_] = b_.CreateLoad(bt, b_.CreateInBoundsGEP(bt, part.packed, at));
          }
          for (int64_t i = 0; i < MR; ++i) {
            bind(i, j);
            Carried cur;
            for (int a : ph.accs) cur.push_back(b_.CreateLoad(acc_type(a), cell(a, 0, i, j)));
            Carried next = reduce_point(ph, ex, {k}, cur, /*reassoc=*/false);
            for (size_t q = 0; q < ph.accs.size(); ++q) b_.CreateStore(next[q], cell(ph.accs[q], 0, i, j));
          }
          ex.fixed.erase(row_pack_);
        });
        return Carried{};
      });
    };
    // level l takes level l - 1 (the sum for l = 1), which restarts from the identity
    auto close = [&](int l) {
      row_lanes([&](Value* j) {
        for (int64_t i = 0; i < MR; ++i)
          for (int a : cs) {
            Value* up = b_.CreateLoad(acc_type(a), cell(a, l, i, j));
            Value* lower = b_.CreateLoad(acc_type(a), cell(a, l - 1, i, j));
            b_.CreateStore(fold(a, up, lower, false), cell(a, l, i, j));
            b_.CreateStore(identity(a), cell(a, l - 1, i, j));
          }
      });
    };
    const int64_t L = levels > 0 ? tile_leaf() : part.n;
    if (part.n / L > 0)  // (a last step of K can be shorter than a leaf)
      counted_loop(b_.getInt64(part.n / L), true, {}, [&](Value* leaf, const Carried&) {
        Value* k0 = b_.CreateAdd(part.k0, b_.CreateMul(leaf, b_.getInt64(L), "", true, true), "", true, true);
        points(k0, L);
        if (levels == 0) return Carried{};
        close(1);
        Value* after = b_.CreateAdd(k0, b_.getInt64(L), "", true, true);
        int64_t S = L;
        std::function<void(int)> up = [&](int l) {  // levels l.. when their block ended at `after`
          if (l > levels) return;
          S *= kCascadeFan;
          if_else(
              b_.CreateICmpEQ(b_.CreateURem(after, b_.getInt64(S)), b_.getInt64(0)),
              [&] {
                close(l);
                up(l + 1);
              },
              [] {});
        };
        up(2);
        return Carried{};
      });
    if (part.n % L) points(b_.CreateAdd(part.k0, b_.getInt64(part.n - part.n % L), "", true, true), part.n % L);
    if (!part.last) {
      each_cell([&](int a, int l, int64_t i, Value* j) {
        b_.CreateStore(b_.CreateLoad(acc_type(a), cell(a, l, i, j)), saved(a, l, i, j));
      });
      ex.reset();
      ex.reduce.clear();
      return;
    }
    // each sum takes its levels, lowest first; then the later phases, phase by phase
    row_lanes([&](Value* j) {
      for (int64_t i = 0; i < MR; ++i)
        for (int a : cs) {
          Value* v = b_.CreateLoad(acc_type(a), cell(a, 0, i, j));
          for (int l = 1; l <= levels; ++l) v = fold(a, v, b_.CreateLoad(acc_type(a), cell(a, l, i, j)), false);
          b_.CreateStore(v, cell(a, 0, i, j));
        }
    });
    for (size_t p = 1; p < k_.phases.size(); ++p)
      row_lanes([&](Value* j) {
        for (int64_t i = 0; i < MR; ++i) {
          bind(i, j);
          ex.reduce.clear();
          for (int a : ph.accs) ex.accs[a] = b_.CreateLoad(acc_type(a), cell(a, 0, i, j));
          run_stores(k_.phases[p], ex);
        }
      });
    ex.reset();
    ex.reduce.clear();
  }

  // Lanes of a register block (tile_segment) for this kernel's accumulator states: as many as
  // fill kRegVectors vector registers, at most kRegBytes (8 AVX2 registers, 4 AVX-512 ones; 8
  // SSE2 registers are 128 bytes: 32 f32 lanes), 0 when the kernel takes none (not a segment
  // kernel, an ArgMax/ArgMin state). Kernel alone, f32 sum, 1 thread, AVX2 (EPYC), ns per id,
  // generic tile -> register blocks: D = 64 in cache 7.3 -> 3.9 (a hand-written AVX2 kernel:
  // 3.3), out of cache (512 MiB table) 39 -> 28-30 (hand: 27); D = 128 (two blocks) in cache
  // 12.6 -> 8.1, out of cache 118 -> 63 (docs/performance.md).
  // Blocks per tile at most: D = 256 f32 as four blocks vs the generic tile, in cache 27 -> 24
  // ns per id, out of cache 140 -> 105-130 (noisy); D = 512 as eight ties in cache (55 ns).
  static constexpr int64_t kRegBytes = 256;
  static constexpr int64_t kRegVectors = 8;
  static constexpr int64_t kRegMaxBlocks = 4;
  // Narrower single blocks (w == R) down to kRegMinLanes: each is one more copy of the bag's
  // walk, ~25 ms of compile time (f32 bag kernel: 97 ms with 64-lane blocks only, 124 with 32,
  // 153 with 16, 176 with 8). Kernel alone in cache, ns per id, generic tile -> block: D = 32
  // 3.3 -> 2.5, D = 16 2.9 -> 2.1, D = 8 4.2 -> 2.0 (not taken: D = 8 bags are rare).
  static constexpr int64_t kRegMinLanes = 16;
  // Points per visit of a register block's lanes: its state costs no memory traffic, so the
  // unroll that amortises it in the generic tile only lengthens the code. D = 64 f32 in cache,
  // ns per id (min of 3): 1: 4.0, 2: 4.5, 4: 4.6, 8: 4.8; out of cache 1 and 4 tie (27).
  static constexpr int64_t kRegRowUnroll = 1;
  // The register blocks' lane loops vectorise at the full vector width of the accumulator type:
  // left to the cost model, an f16 row (fpext half -> float) took <4 x float>, 16 accumulators
  // for D = 64, all 16 AVX2 registers.
  llvm::MDNode* register_lane_loop() {
    int64_t bytes = 1;
    for (const auto& A : k_.accs) bytes = std::max<int64_t>(bytes, dtype_size(A.dtype));
    auto* i32 = b_.getInt32Ty();
    llvm::Metadata* width[] = {llvm::MDString::get(c_, "llvm.loop.vectorize.width"),
                               llvm::ConstantAsMetadata::get(
                                   llvm::ConstantInt::get(i32, std::max<int64_t>(1, math_.vector_bits() / 8 / bytes)))};
    llvm::Metadata* enable[] = {llvm::MDString::get(c_, "llvm.loop.vectorize.enable"),
                                llvm::ConstantAsMetadata::get(llvm::ConstantInt::getTrue(c_))};
    llvm::MDNode* id =
        llvm::MDNode::getDistinct(c_, {nullptr, llvm::MDNode::get(c_, width), llvm::MDNode::get(c_, enable)});
    id->replaceOperandWith(0, id);
    return id;
  }
  // Only when every load of the accumulators' values moves by a constant step per lane: a row
  // read as vectors (f32, f16, 8-bit rows, a lane-invariant scale or weight). 4-bit nibbles
  // (lane / 2, imod) do not vectorise into register blocks: D = 64 as one block ran at 24-38 ms
  // where the generic tile takes 14-23 (kfuse_bag, uniform ids).
  int64_t register_lanes() const {
    if (!k_.dynamic_reduce() || k_.accs.empty() || k_.outer.empty()) return 0;
    const int lane = static_cast<int>(k_.outer.size()) - 1;
    int64_t bytes = 0;
    bool affine = true;
    std::set<const ir::Expr*> seen;
    std::function<void(const ir::Expr*)> visit = [&](const ir::Expr* e) {
      if (!seen.insert(e).second) return;
      if (e->kind == ir::ExprKind::Load && !ir::affine_step(e->args[0].get(), ir::Space::Outer, lane)) affine = false;
      for (const auto& a : e->args) visit(a.get());
    };
    for (const auto& A : k_.accs) {
      if (is_arg(A.kind)) return 0;
      bytes += std::max<int64_t>(1, dtype_size(A.dtype));
      visit(A.value.get());
    }
    if (!affine) return 0;
    int64_t lanes = 1;
    const int64_t budget = std::min<int64_t>(kRegBytes, kRegVectors * math_.vector_bits() / 8);
    while (lanes * 2 * bytes <= budget) lanes *= 2;
    return std::min(lanes, plan_.column_tile);
  }

  std::vector<Value*> outer_extents(ExprEmitter& ex) {
    std::vector<Value*> e;
    for (const auto& o : k_.outer) e.push_back(ex.convert(ex.emit(o), o->dtype, DType::I64));
    return e;
  }

  void emit_main() {
    ExprEmitter ex(b_, k_, math_);
    std::vector<Value*> a;
    std::vector<llvm::Type*> extra = {b_.getInt64Ty(), b_.getInt64Ty()};
    if (plan_.row_block > 0) extra.push_back(b_.getPtrTy());
    begin_function(kMainName, extra, ex, a);
    if (plan_.row_block > 0) scratch_ = a[2];
    std::vector<Value*> ext = outer_extents(ex);
    outer_ext_ = ext;
    ex.reset();
    if (ext.empty()) {
      // one outer point: run it when the chunk is non-empty
      llvm::Function* f = b_.GetInsertBlock()->getParent();
      auto* body = llvm::BasicBlock::Create(c_, "point", f);
      auto* done = llvm::BasicBlock::Create(c_, "done", f);
      b_.CreateCondBr(b_.CreateICmpSLT(a[0], a[1]), body, done);
      b_.SetInsertPoint(body);
      outer_point(ex, 0);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    } else {
      auto point_by_point = [&] {
        if (range_pieces(ex, a[0], a[1], ext)) return;
        flat_range(a[0], a[1], ext, false, {}, [&](const std::vector<Value*>& idx, const Carried&) {
          ex.outer = idx;
          outer_point(ex, 0);
          return Carried{};
        });
      };
      if (plan_.transpose_tile > 0) {
        tiled_range(a[0], a[1], ext, plan_.transpose_tile, ex, transpose_tile_loads(k_),
                    [&](const std::vector<Value*>& idx) {
                      ex.outer = idx;
                      outer_point(ex, 0);
                    });
      } else if (plan_.column_tile == 0) {
        point_by_point();
      } else {
        // Tiles or points is chosen from the shape of the launch, never from the chunk (a chunk
        // boundary only shortens a tile), so every column's result is chunk-independent.
        alloc_tile_slots();
        auto tiles = [&] {
          if (row_rows_ > 0) {
            row_range(ex, a[0], a[1], ext);
            return;
          }
          flat_segments(a[0], a[1], ext, false, {}, [&](const std::vector<Value*>& first, Value* len, const Carried&) {
            column_segment(ex, first, len);
            return Carried{};
          });
        };
        // Segment kernels take tiles even for one column: the point path of a bag is as large
        // as its tile path (both in one kernel doubled its compile time), and it would win only
        // on tables of one column.
        if (k_.kind == ir::KernelKind::Segment) tiles();
        else if_else(tiles_wanted(ext), tiles, point_by_point);
      }
    }
    b_.CreateRetVoid();
  }

  // Whether a launch of a tiled kernel runs as tiles: at least kColumnTileMinLen columns and,
  // for a contraction reading B along K (x @ w.T), enough rows for its row blocks: with fewer,
  // each output is the point path's dot product of two contiguous runs, where a column tile
  // would read B lane by lane, K elements apart. (Decided by the launch's shape, never its
  // chunk: a column's bits do not change within a launch.)
  static constexpr int64_t kStridedBMinRows = 12;
  Value* tiles_wanted(const std::vector<Value*>& ext) {
    Value* wide = b_.CreateICmpSGE(ext.back(), b_.getInt64(kColumnTileMinLen));
    const ir::Expr* B = k_.kind == ir::KernelKind::Contraction ? contraction_b(k_) : nullptr;
    const int lane = static_cast<int>(ext.size()) - 1;
    if (!B || ir::affine_step(B->args[0].get(), ir::Space::Outer, lane) == 1) return wide;
    if (row_rows_ == 0) return b_.getFalse();
    return b_.CreateAnd(wide, b_.CreateICmpSGE(ext[ext.size() - 2], b_.getInt64(kStridedBMinRows)));
  }

  // Index-set splitting of a pointwise kernel's rows (plan_row_pieces, row_pieces.cpp): each row
  // segment runs as one counted loop per piece, with the piece's folded stores. False (nothing
  // emitted) for a kernel without pieces.
  bool range_pieces(ExprEmitter& ex, Value* begin, Value* end, const std::vector<Value*>& ext) {
    const std::vector<RowPiece> pieces = plan_row_pieces(k_);
    if (pieces.empty()) return false;
    flat_segments(begin, end, ext, false, {}, [&](const std::vector<Value*>& idx, Value* len, const Carried&) {
      Value* s0 = idx.back();
      Value* s1 = b_.CreateAdd(s0, len, "", true, true);
      for (const RowPiece& p : pieces) {
        Value* lo = smax(s0, b_.getInt64(p.lo));
        Value* n = b_.CreateSub(smin(s1, b_.getInt64(p.hi)), lo);
        counted_loop(n, false, {}, [&](Value* j, const Carried&) {
          std::vector<Value*> at = idx;
          at.back() = b_.CreateAdd(lo, j, "", true, true);
          ex.outer = at;
          for (const ir::Phase& ph : p.phases) {
            ex.reset();
            ex.reduce.clear();
            run_stores(ph, ex);
          }
          return Carried{};
        });
      }
      return Carried{};
    });
    return true;
  }

  // kf_part: blocks [b0, b1) of phase 0's reduce domain -> partials[blk * nacc + i].
  void emit_part() {
    ExprEmitter ex(b_, k_, math_);
    std::vector<Value*> a;
    begin_function(kPartName, {b_.getInt64Ty(), b_.getInt64Ty(), b_.getPtrTy()}, ex, a);
    const ir::Phase& ph = k_.phases[0];
    std::vector<Value*> ext;
    for (int64_t r : k_.reduce) ext.push_back(b_.getInt64(r));
    Value* n = b_.CreateSub(a[1], a[0]);
    counted_loop(n, false, {}, [&](Value* i, const Carried&) {
      Value* blk = b_.CreateAdd(a[0], i, "", true, true);
      Value* rb = b_.CreateMul(blk, b_.getInt64(plan_.block), "", true, true);
      Value* re = smin(b_.CreateAdd(rb, b_.getInt64(plan_.block)), b_.getInt64(k_.reduce_numel()));
      Carried fin = cascades(ph)
                        ? cascade(ph, ex, cascade_levels(plan_.block), rb, b_.CreateSub(re, rb, "", true, true))
                        : flat_range(rb, re, ext, true, initial_states(ph),
                                     [&](const std::vector<Value*>& ridx, const Carried& cur) {
                                       return reduce_point(ph, ex, ridx, cur);
                                     });
      for (size_t j = 0; j < ph.accs.size(); ++j) {
        Value* slot = b_.CreateAdd(b_.CreateMul(blk, b_.getInt64(plan_.nacc)), b_.getInt64(j));
        b_.CreateStore(fin[j], b_.CreateInBoundsGEP(b_.getInt64Ty(), a[2], slot));
      }
      return Carried{};
    });
    b_.CreateRetVoid();
  }

  // kf_fin: combine the partials in block order, then run phases 1.. for the single point.
  void emit_fin() {
    ExprEmitter ex(b_, k_, math_);
    std::vector<Value*> a;
    begin_function(kFinName, {b_.getPtrTy(), b_.getInt64Ty()}, ex, a);
    const ir::Phase& ph = k_.phases[0];
    // Float sums of the block partials in double (rounded once at the end): their error does
    // not grow with the block count (see cascade).
    auto wide = [&](size_t j) {
      llvm::Type* t = acc_type(ph.accs[j]);
      return k_.accs[ph.accs[j]].kind == ir::AccKind::Sum && t->isFloatingPointTy() && !t->isDoubleTy();
    };
    Carried init = initial_states(ph);
    for (size_t j = 0; j < ph.accs.size(); ++j)
      if (wide(j)) init[j] = llvm::ConstantFP::get(b_.getDoubleTy(), 0.0);
    Carried fin = counted_loop(a[1], false, init, [&](Value* blk, const Carried& cur) {
      Carried next;
      for (size_t j = 0; j < ph.accs.size(); ++j) {
        Value* slot = b_.CreateAdd(b_.CreateMul(blk, b_.getInt64(plan_.nacc)), b_.getInt64(j));
        Value* x = b_.CreateLoad(acc_type(ph.accs[j]), b_.CreateInBoundsGEP(b_.getInt64Ty(), a[0], slot));
        // plain (not reassociated) combine: the block order is the order
        if (wide(j)) next.push_back(b_.CreateFAdd(cur[j], b_.CreateFPExt(x, b_.getDoubleTy())));
        else next.push_back(fold(ph.accs[j], cur[j], x, false));
      }
      return next;
    });
    for (size_t j = 0; j < ph.accs.size(); ++j)
      if (wide(j)) fin[j] = b_.CreateFPTrunc(fin[j], acc_type(ph.accs[j]));
    finish_accs(ph, ex, fin);
    outer_point(ex, 1);
    b_.CreateRetVoid();
  }

  const ir::Kernel& k_;
  const LaunchPlan& plan_;
  llvm::Module& m_;
  llvm::LLVMContext& c_;
  Builder b_;
  const MathLib& math_;
  std::vector<std::vector<Value*>> slots_;           // column tiles: per accumulator, its state arrays
  std::vector<std::vector<Value*>> levels_;          // ... and its cascade levels (float sums)
  std::vector<std::vector<Value*>> regs_;            // ... and its register block states (tile_segment)
  int64_t reg_lanes_ = 0;                            // lanes of a register block, 0: none
  bool pair_lanes_ = false;                          // the generic tile's walk takes lanes in pairs (plan_lane_pairs)
  std::vector<std::vector<Value*>> rows_;            // row blocks: per accumulator, its sum and levels [rows x lanes]
  int64_t row_rows_ = 0, row_lanes_ = 0;             // ... their shape, 0: none (plan_row_block)
  int64_t row_panel_ = 0;                            // ... rows of C per pass over B's columns (row_range)
  const ir::Expr* row_pack_ = nullptr;               // ... B's load when packed (plan_row_block), else null
  Value* row_packed_ = nullptr;                      // ... its kRowKc x lanes values (pack_rows)
  std::vector<std::vector<Value*>> row_state_;       // ... per accumulator, a panel's sums and levels [rows x row_nc_]
  std::vector<std::vector<int64_t>> row_state_off_;  // ... their offsets in the scratch
  int64_t row_nc_ = 0, row_scratch_bytes_ = 0;       // ... lanes of a column block; the scratch kf_main wants
  int64_t row_pass_ = 0, row_packed_off_ = 0;        // ... rows of a piece of whole rows; B's slivers in the scratch
  Value* scratch_ = nullptr;                         // kf_main's scratch argument (row-blocked contractions)
  std::vector<Value*> outer_ext_;                    // kf_main: the outer extents
};

}  // namespace

LaunchPlan plan_launch(const ir::Kernel& k) {
  LaunchPlan p;
  const int64_t rn = k.reduce_numel();
  int over = 0;
  for (const auto& ph : k.phases) over += ph.over_reduce ? 1 : 0;
  p.work_per_point = std::max<int64_t>(1, rn * std::max(over, 1));
  p.column_tile = plan_column_tile(k);
  p.transpose_tile = plan_transpose_tile(k);
  p.row_block = plan_row_blocks(k) ? kRowBlockRows : 0;
  bool ok = k.outer.empty() && rn > kSplitBlock && !k.phases.empty() && k.phases[0].over_reduce &&
            k.phases[0].stores.empty() && over == 1 && !k.phases[0].accs.empty();
  if (ok)
    for (int a : k.phases[0].accs) ok = ok && !is_arg(k.accs[a].kind) && k.accs[a].dtype != DType::Bool;
  if (!ok) return p;
  p.split = true;
  p.block = kSplitBlock;
  p.nblocks = (rn + kSplitBlock - 1) / kSplitBlock;
  p.nacc = static_cast<int>(k.phases[0].accs.size());
  return p;
}

std::unique_ptr<llvm::Module> lower_kernel(const ir::Kernel& k, const LaunchPlan& plan, llvm::LLVMContext& ctx,
                                           const MathLib& math, llvm::TargetMachine& tm) {
  auto m = std::make_unique<llvm::Module>(k.name.empty() ? "kfuse_kernel" : k.name, ctx);
  m->setDataLayout(tm.createDataLayout());
  m->setTargetTriple(tm.getTargetTriple().str());
  ir::Kernel prim = k;  // composites in primitive ops: the one definition every backend computes
  ir::decompose_composites(prim);
  Lowerer(prim, plan, *m, math).lower();
  if (prefers_no_gather(prim)) {
    const std::string features = tm.getTargetFeatureString().str();
    for (llvm::Function& f : *m)
      if (!f.isDeclaration())
        f.addFnAttr("target-features", features + (features.empty() ? "" : ",") + "+prefer-no-gather");
  }
  return m;
}

}  // namespace kfuse::detail::llvmjit
