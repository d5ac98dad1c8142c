// Kernel IR -> one LLVM module (entry points in llvm_jit.hpp): the Lowerer (lowerer.hpp) and its
// scaffolding, loops, accumulators, point path, cascaded sums and entry points; its column tiles
// are lower_tiles.cpp, a contraction's row blocks lower_rows.cpp.
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
// Contractions with a row dim (LaunchPlan::row_block) run their whole rows as register blocks
// of rows x lanes (lower_rows.cpp), the rest as column tiles.
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
#include "lowerer.hpp"

namespace kfuse::detail::llvmjit {

void Lowerer::lower() {
  emit_main();
  if (plan_.row_block > 0)  // the scratch its kf_main wants (RowMainFn)
    new llvm::GlobalVariable(m_, b_.getInt64Ty(), true, llvm::GlobalValue::ExternalLinkage,
                             b_.getInt64(row_scratch_bytes_), kScratchName);
  if (plan_.split) {
    emit_part();
    emit_fin();
  }
}

// ---- function scaffolding ----
// Every entry point takes (ptr bufs, ptr params, ...). The buffers are loaded into an inner
// function with noalias arguments (outputs never alias inputs), which is always inlined into
// the entry point, so the alias facts survive as scoped metadata.
llvm::Function* Lowerer::begin_function(const char* name, std::vector<llvm::Type*> extra, ExprEmitter& ex,
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

// for (iv = 0; iv < n; ++iv) with loop-carried values; `n_positive` skips the guard; `loop_md`
// (optional) becomes the loop's llvm.loop metadata.
Lowerer::Carried Lowerer::counted_loop(Value* n, bool n_positive, const Carried& init,
                                       const std::function<Carried(Value* iv, const Carried& cur)>& body,
                                       llvm::MDNode* loop_md) {
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
Lowerer::Carried Lowerer::close_loop(const Carried& phis, const Carried& init, const Carried& next,
                                     llvm::BasicBlock* pre, llvm::BasicBlock* latch, llvm::BasicBlock* after,
                                     bool always_runs) {
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

// Visits the points [begin, end) of the row-major domain `extents` (begin < end required
// unless !known_nonempty) as segments along the innermost dim; body gets the indices.
//
// With `parallel` the innermost loop's loads and stores join one access group that the loop
// declares parallel (llvm.loop.parallel_accesses): the caller's points each write their own
// elements and read none another writes (outputs never alias inputs), which the vectoriser cannot
// always prove: several stores into one buffer at offsets of a run-time stride (a concat of
// equal parts, lower_group.cpp) needed run-time alias checks, and past 16 parts, more than it
// emits, it left the loop scalar (17 parts [512, 1, 64]: 0.72 ms, 64 parts 6.8 ms).
Lowerer::Carried Lowerer::flat_range(Value* begin, Value* end, const std::vector<Value*>& extents, bool known_nonempty,
                                     const Carried& init, const PointBody& body, bool parallel) {
  const size_t nd = extents.size();
  if (nd == 0) return body({}, init);  // a single point (the caller guarantees begin < end)
  llvm::MDNode* group = nullptr;
  llvm::MDNode* loop_md = nullptr;
  if (parallel) {
    group = llvm::MDNode::getDistinct(c_, {});
    llvm::Metadata* par[] = {llvm::MDString::get(c_, "llvm.loop.parallel_accesses"), group};
    loop_md = llvm::MDNode::getDistinct(c_, {nullptr, llvm::MDNode::get(c_, par)});
    loop_md->replaceOperandWith(0, loop_md);
  }
  return flat_segments(begin, end, extents, known_nonempty, init,
                       [&](const std::vector<Value*>& idx, Value* len, const Carried& cur) {
                         llvm::Function* f = b_.GetInsertBlock()->getParent();
                         llvm::BasicBlock* last = &f->back();  // the loop's blocks follow it
                         Carried out = counted_loop(
                             len, true, cur,
                             [&](Value* j, const Carried& c2) {
                               std::vector<Value*> at = idx;
                               at.back() = b_.CreateAdd(idx.back(), j, "", true, true);
                               return body(at, c2);
                             },
                             loop_md);
                         if (group)
                           for (auto bb = std::next(last->getIterator()); bb != f->end(); ++bb)
                             for (llvm::Instruction& i : *bb)
                               if (i.mayReadOrWriteMemory()) i.setMetadata(llvm::LLVMContext::MD_access_group, group);
                         return out;
                       });
}

// The indices of flat position `pos` in the row-major domain of the first `nd` >= 1 `extents`.
std::vector<Value*> Lowerer::unravel(Value* pos, const std::vector<Value*>& extents, size_t nd) {
  std::vector<Value*> idx(nd);
  for (size_t d = nd; d-- > 1;) {
    idx[d] = b_.CreateURem(pos, extents[d]);
    pos = b_.CreateUDiv(pos, extents[d]);
  }
  idx[0] = pos;
  return idx;
}

// if (cond) then_fn() else else_fn(), no values merged.
void Lowerer::if_else(Value* cond, const std::function<void()>& then_fn, const std::function<void()>& else_fn) {
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
Lowerer::Carried Lowerer::flat_segments(Value* begin, Value* end, const std::vector<Value*>& extents,
                                        bool known_nonempty, const Carried& init, const SegmentBody& seg_body) {
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

Value* Lowerer::identity(int a) {
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

AccState Lowerer::init_state(int a) {
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
Value* Lowerer::fold(int a, Value* s, Value* x, bool reassoc) {
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
AccState Lowerer::fold_arg(int a, const AccState& st, Value* x, Value* flat) {
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
bool Lowerer::fused_product(const ir::Accumulator& A) const {
  const ir::Expr* v = A.value.get();
  return k_.kind == ir::KernelKind::Contraction && math_.tier != MathLib::Tier::SSE2 && A.kind == ir::AccKind::Sum &&
         (A.dtype == DType::F32 || A.dtype == DType::F64) && v->kind == ir::ExprKind::Op && v->op == Op::Mul &&
         v->dtype == A.dtype && v->args[0]->dtype == A.dtype && v->args[1]->dtype == A.dtype;
}

// One reduce point of a phase: fold the phase's accumulators and run its stores.
Lowerer::Carried Lowerer::reduce_point(const ir::Phase& ph, ExprEmitter& ex, const std::vector<Value*>& ridx,
                                       const Carried& cur, bool reassoc) {
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

void Lowerer::run_stores(const ir::Phase& ph, ExprEmitter& ex) {
  for (const auto& s : ph.stores) {
    Value* idx = ex.convert(ex.emit(s.index), s.index->dtype, DType::I64);
    Value* v = ex.emit(s.value);
    ex.store(s.buffer, idx, ex.convert(v, s.value->dtype, k_.buffers[s.buffer].dtype));
  }
}

Lowerer::Carried Lowerer::initial_states(const ir::Phase& ph) {
  Carried init;
  for (int a : ph.accs) {
    AccState st = init_state(a);
    init.insert(init.end(), st.v.begin(), st.v.end());
  }
  return init;
}

void Lowerer::finish_accs(const ir::Phase& ph, ExprEmitter& ex, const Carried& states) {
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
Value* Lowerer::empty_value(int a) {
  const ir::Accumulator& A = k_.accs[a];
  llvm::Type* t = acc_type(a);
  double v = A.kind == ir::AccKind::Prod ? 1.0 : 0.0;
  return is_float(A.dtype) ? llvm::ConstantFP::get(t, v)
                           : (A.dtype == DType::Bool ? static_cast<Value*>(b_.getInt1(v != 0))
                                                     : llvm::ConstantInt::get(t, static_cast<uint64_t>(v)));
}

// A phase over a dynamic reduce domain (segment kernels): one counted loop over this point's
// [begin, end); an empty range gives empty_value, as an empty compile-time domain does.
void Lowerer::dynamic_phase(const ir::Phase& ph, ExprEmitter& ex) {
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
void Lowerer::outer_point(ExprEmitter& ex, size_t first) {
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
      Carried fin = cascade(ph, ex, cascade_levels(k_.reduce_numel()), b_.getInt64(0), b_.getInt64(k_.reduce_numel()));
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

bool Lowerer::cascades(const ir::Phase& ph) const {
  bool sum = false;
  for (int a : ph.accs) {
    if (is_arg(k_.accs[a].kind)) return false;
    sum |= k_.accs[a].kind == ir::AccKind::Sum && is_float(k_.accs[a].dtype);
  }
  return sum;
}

int Lowerer::cascade_levels(int64_t n) {
  int l = 0;
  for (int64_t s = kCascadeLeaf; s < n; s *= kCascadeFan) ++l;
  return l;
}

// Phase ph's states over the flat reduce points [start, start + count) (1 <= count <=
// kCascadeLeaf * kCascadeFan^level), folded from the identity.
Lowerer::Carried Lowerer::cascade(const ir::Phase& ph, ExprEmitter& ex, int level, Value* start, Value* count) {
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

std::vector<Value*> Lowerer::outer_extents(ExprEmitter& ex) {
  std::vector<Value*> e;
  for (const auto& o : k_.outer) e.push_back(ex.convert(ex.emit(o), o->dtype, DType::I64));
  return e;
}

void Lowerer::emit_main() {
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
      // (a pointwise kernel's points, without scratch memory shared between them, are parallel)
      const bool parallel = k_.kind == ir::KernelKind::Pointwise && plan_.row_block == 0;
      flat_range(
          a[0], a[1], ext, false, {},
          [&](const std::vector<Value*>& idx, const Carried&) {
            ex.outer = idx;
            outer_point(ex, 0);
            return Carried{};
          },
          parallel);
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

// Index-set splitting of a pointwise kernel's rows (plan_row_pieces, row_pieces.cpp): each row
// segment runs as one counted loop per piece, with the piece's folded stores. False (nothing
// emitted) for a kernel without pieces.
bool Lowerer::range_pieces(ExprEmitter& ex, Value* begin, Value* end, const std::vector<Value*>& ext) {
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
void Lowerer::emit_part() {
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
    Carried fin = cascades(ph) ? cascade(ph, ex, cascade_levels(plan_.block), rb, b_.CreateSub(re, rb, "", true, true))
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
void Lowerer::emit_fin() {
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

LaunchPlan plan_launch(const ir::Kernel& k) {
  LaunchPlan p;
  const int64_t rn = k.reduce_numel();
  int over = 0;
  for (const auto& ph : k.phases) over += ph.over_reduce ? 1 : 0;
  p.work_per_point = std::max<int64_t>(1, rn * std::max(over, 1));
  p.column_tile = plan_column_tile(k);
  p.transpose_tile = plan_transpose_tile(k);
  p.row_block = plan_row_blocks(k, p.column_tile) ? kRowBlockRows : 0;
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
