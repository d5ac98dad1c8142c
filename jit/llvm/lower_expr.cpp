// Kernel-IR expressions -> LLVM instructions. Semantics follow lib/ir/kernel.hpp and the fp64
// reference expressions of include/kfuse/ops.def rounded to the expression's dtype:
//   - f32/f64 + - * / sqrt are single IEEE operations (bitwise equal to the reference);
//   - no fast-math flags here (NaN/Inf and signed zeros propagate as in the reference);
//   - integers wrap; integer division truncates, x/0 gives the dtype minimum (the reference's
//     double quotient is +-inf/NaN, which converts to the minimum);
//   - float -> int casts truncate and give the minimum for NaN and out-of-range values
//     (fptosi alone would be poison there);
//   - bool lives in registers as i1 and in memory as u8 (0/1);
//   - shifts: a count outside [0, bits) gives 0 (shl) or the sign fill (ashr), ops.def's rule
//     (the IR's shl/ashr would be poison there). u8/i8 shift in i32 (widen_narrow.hpp): their
//     zero/sign-extended values give the same bits after the rounding back.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <cmath>
#include <limits>

#include "kfuse/error.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

using llvm::Value;

llvm::Type* reg_type(llvm::LLVMContext& c, DType dt) {
  switch (compute_type(dt)) {  // narrow dtypes live in registers as their compute type
    case DType::Bool: return llvm::Type::getInt1Ty(c);
    case DType::I32: return llvm::Type::getInt32Ty(c);
    case DType::I64: return llvm::Type::getInt64Ty(c);
    case DType::F32: return llvm::Type::getFloatTy(c);
    case DType::F64: return llvm::Type::getDoubleTy(c);
    default: break;  // narrow: never a compute type
  }
  return nullptr;
}

llvm::Type* mem_type(llvm::LLVMContext& c, DType dt) {
  switch (dt) {
    case DType::Bool:
    case DType::U8:
    case DType::I8: return llvm::Type::getInt8Ty(c);
    case DType::F16: return llvm::Type::getHalfTy(c);
    case DType::BF16: return llvm::Type::getInt16Ty(c);  // bit manipulation: exact, vectorises
    default: return reg_type(c, dt);
  }
}

namespace {

Value* const_of(Builder& b, DType dt, double v) {
  llvm::Type* t = reg_type(b.getContext(), dt);
  if (is_float(dt)) return llvm::ConstantFP::get(t, v);
  if (dt == DType::Bool) return b.getInt1(v != 0.0);
  return llvm::ConstantInt::get(t, static_cast<uint64_t>(static_cast<int64_t>(v)), true);
}

Value* int_min(Builder& b, DType dt) {
  return dt == DType::I32 ? b.getInt32(static_cast<uint32_t>(std::numeric_limits<int32_t>::min()))
                          : b.getInt64(static_cast<uint64_t>(std::numeric_limits<int64_t>::min()));
}

}  // namespace

Value* ExprEmitter::truth(Value* v, DType dt) {
  if (dt == DType::Bool) return v;
  if (is_float(dt)) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
  return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
}

// A compute-type value rounded to the narrow dtype `to` (still in the compute type): u8/i8
// wrap, f16 rounds with the hardware conversion (F16C), bf16 with an exact integer sequence
// (round to nearest even; NaN: quiet, keeping the top payload bits) as kfuse/half.hpp.
Value* ExprEmitter::round_narrow(Value* v, DType to) {
  switch (to) {
    case DType::U8: return b_.CreateAnd(v, b_.getInt32(0xff));
    case DType::I8: return b_.CreateAShr(b_.CreateShl(v, b_.getInt32(24)), b_.getInt32(24));
    case DType::F16: return b_.CreateFPExt(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getFloatTy());
    case DType::BF16: {
      Value* x = b_.CreateBitCast(v, b_.getInt32Ty());
      Value* odd = b_.CreateAnd(b_.CreateLShr(x, b_.getInt32(16)), b_.getInt32(1));
      Value* r = b_.CreateAdd(x, b_.CreateAdd(odd, b_.getInt32(0x7fff)));
      Value* is_nan = b_.CreateFCmpUNO(v, v);
      r = b_.CreateSelect(is_nan, b_.CreateOr(x, b_.getInt32(0x400000)), r);
      return b_.CreateBitCast(b_.CreateAnd(r, b_.getInt32(0xffff0000u)), b_.getFloatTy());
    }
    default: return v;
  }
}

Value* ExprEmitter::convert(Value* v, DType from, DType to) {
  if (from == to) return v;
  if (is_narrow(from) || is_narrow(to)) {  // through the compute types (widen_narrow.hpp)
    v = convert(v, compute_type(from), compute_type(to));
    return is_narrow(to) ? round_narrow(v, to) : v;
  }
  llvm::Type* t = reg_type(b_.getContext(), to);
  if (to == DType::Bool) return truth(v, from);
  if (from == DType::Bool) return is_float(to) ? b_.CreateUIToFP(v, t) : b_.CreateZExt(v, t);
  if (is_float(to)) {
    if (is_float(from)) return from == DType::F64 ? b_.CreateFPTrunc(v, t) : b_.CreateFPExt(v, t);
    // The reference goes through double: i64 -> f32 rounds twice; i32 -> f32 once either way.
    if (from == DType::I64 && to == DType::F32) return b_.CreateFPTrunc(b_.CreateSIToFP(v, b_.getDoubleTy()), t);
    return b_.CreateSIToFP(v, t);
  }
  if (is_float(from)) {
    // In range iff lo <= v < -lo (lo = dtype min, a power of two exact in f32/f64); NaN fails.
    double lo = to == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
    Value* vlo = llvm::ConstantFP::get(v->getType(), lo);
    Value* vhi = llvm::ConstantFP::get(v->getType(), -lo);
    Value* ok = b_.CreateAnd(b_.CreateFCmpOGE(v, vlo), b_.CreateFCmpOLT(v, vhi));
    Value* safe = b_.CreateSelect(ok, v, llvm::ConstantFP::get(v->getType(), 0.0));
    return b_.CreateSelect(ok, b_.CreateFPToSI(safe, t), int_min(b_, to));
  }
  return b_.CreateSExtOrTrunc(v, t);  // i32 <-> i64 (wraps when narrowing)
}

bool ExprEmitter::is_index(const ir::Expr* e) {
  auto it = index_like_.find(e);
  if (it != index_like_.end()) return it->second;
  bool r = false;
  switch (e->kind) {
    case ir::ExprKind::Var:
    case ir::ExprKind::Param:
    case ir::ExprKind::IDiv:
    case ir::ExprKind::IMod: r = true; break;
    case ir::ExprKind::Const: r = e->dtype == DType::I64; break;
    case ir::ExprKind::Op:
      r = e->dtype == DType::I64 && (e->op == Op::Add || e->op == Op::Sub || e->op == Op::Mul);
      for (const auto& a : e->args) r = r && is_index(a.get());
      break;
    default: break;
  }
  index_like_[e] = r;
  return r;
}

Value* ExprEmitter::emit(const ir::ExprRef& e) {
  if (!fixed.empty())
    if (auto f = fixed.find(e.get()); f != fixed.end()) return f->second;
  auto it = cache_.find(e.get());
  if (it != cache_.end()) return it->second;
  Value* r = nullptr;
  switch (e->kind) {
    case ir::ExprKind::Const: r = const_of(b_, e->dtype, e->value); break;
    case ir::ExprKind::Var: {
      const auto& vs = e->space == ir::Space::Outer ? outer : reduce;
      if (e->index < 0 || e->index >= static_cast<int>(vs.size()) || !vs[e->index])
        throw BackendError("llvm: variable used outside its loop");
      r = vs[e->index];
      break;
    }
    case ir::ExprKind::Param: r = params.at(e->index); break;
    case ir::ExprKind::Acc:
      r = accs.at(e->index);
      if (!r) throw BackendError("llvm: accumulator read before it is complete");
      r = convert(r, k_.accs[e->index].dtype, e->dtype);
      break;
    case ir::ExprKind::Load: r = emit_load(*e); break;
    case ir::ExprKind::IDiv:
    case ir::ExprKind::IMod: {
      // Operands are non-negative (kernel.hpp): unsigned division is floor division.
      Value* a = convert(emit(e->args[0]), e->args[0]->dtype, DType::I64);
      Value* d = convert(emit(e->args[1]), e->args[1]->dtype, DType::I64);
      r = e->kind == ir::ExprKind::IDiv ? b_.CreateUDiv(a, d) : b_.CreateURem(a, d);
      break;
    }
    case ir::ExprKind::Op: r = emit_op(*e); break;
    case ir::ExprKind::Rand: r = emit_rand(*e); break;
  }
  cache_[e.get()] = r;
  return r;
}

Value* ExprEmitter::widen_loaded(Value* v, DType dt) {
  switch (dt) {
    case DType::Bool: return b_.CreateICmpNE(v, b_.getInt8(0));
    case DType::U8: return b_.CreateZExt(v, b_.getInt32Ty());
    case DType::I8: return b_.CreateSExt(v, b_.getInt32Ty());
    case DType::F16: return b_.CreateFPExt(v, b_.getFloatTy());
    case DType::BF16:
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), b_.getInt32(16)), b_.getFloatTy());
    default: return v;
  }
}

Value* ExprEmitter::emit_load(const ir::Expr& e) {
  Value* idx = convert(emit(e.args[0]), e.args[0]->dtype, DType::I64);
  llvm::Type* mt = mem_type(b_.getContext(), e.dtype);
  auto do_load = [&]() -> Value* {
    Value* p = b_.CreateInBoundsGEP(mt, buffers.at(e.index), idx);
    return widen_loaded(b_.CreateLoad(mt, p), e.dtype);
  };
  if (e.args.size() < 2) return do_load();
  // Masked: the memory access happens only when the mask holds (a branch the vectoriser turns
  // into a masked load or gather); otherwise the value is 0.
  Value* m = truth(emit(e.args[1]), e.args[1]->dtype);
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(m)) return c->isZero() ? const_of(b_, e.dtype, 0) : do_load();
  llvm::Function* f = b_.GetInsertBlock()->getParent();
  auto* then_bb = llvm::BasicBlock::Create(b_.getContext(), "mload", f);
  auto* join_bb = llvm::BasicBlock::Create(b_.getContext(), "mjoin", f);
  llvm::BasicBlock* from = b_.GetInsertBlock();
  b_.CreateCondBr(m, then_bb, join_bb);
  b_.SetInsertPoint(then_bb);
  Value* v = do_load();
  llvm::BasicBlock* then_end = b_.GetInsertBlock();
  b_.CreateBr(join_bb);
  b_.SetInsertPoint(join_bb);
  llvm::PHINode* phi = b_.CreatePHI(v->getType(), 2);
  phi->addIncoming(v, then_end);
  phi->addIncoming(const_of(b_, e.dtype, 0), from);
  return phi;
}

void ExprEmitter::store(int buffer, Value* index, Value* value) {
  DType dt = k_.buffers.at(buffer).dtype;
  llvm::Type* mt = mem_type(b_.getContext(), dt);
  // Narrow values are already rounded (widen_narrow.hpp): these conversions are exact.
  switch (dt) {
    case DType::Bool: value = b_.CreateZExt(value, mt); break;
    case DType::U8:
    case DType::I8: value = b_.CreateTrunc(value, mt); break;
    case DType::F16: value = b_.CreateFPTrunc(value, mt); break;
    case DType::BF16:
      value = b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(value, b_.getInt32Ty()), b_.getInt32(16)), mt);
      break;
    default: break;
  }
  if (captured) return captured->push_back({buffer, index, value});
  b_.CreateStore(value, b_.CreateInBoundsGEP(mt, buffers.at(buffer), index));
}

Value* ExprEmitter::emit_op(const ir::Expr& e) {
  const DType dt = e.dtype;
  const bool fl = is_float(dt);
  const bool f64 = dt == DType::F64;
  llvm::Type* t = reg_type(b_.getContext(), dt);
  auto unsupported = [&]() -> Value* {
    throw BackendError(std::string("llvm: unsupported op ") + op_name(e.op) + "." + dtype_name(dt));
  };
  auto arg_as = [&](int i, DType to) { return convert(emit(e.args.at(i)), e.args[i]->dtype, to); };
  auto fc = [&](double v) -> Value* { return llvm::ConstantFP::get(t, v); };
  auto intrinsic = [&](llvm::Intrinsic::ID id, std::vector<Value*> args) -> Value* {
    return b_.CreateIntrinsic(id, {args[0]->getType()}, args);
  };
  auto math = [&](MathFn f, std::vector<Value*> args) { return math_.call(b_, f, f64, args); };

  if (e.op == Op::Cast) return arg_as(0, dt);
  if (e.op == Op::Where) {
    Value* c = truth(emit(e.args.at(0)), e.args[0]->dtype);
    return b_.CreateSelect(c, arg_as(1, dt), arg_as(2, dt));
  }
  if (e.op == Op::Fma) {  // one rounding (llvm.fma, never fmuladd); integers wrap as * and + do
    Value *a = arg_as(0, dt), *m = arg_as(1, dt), *c = arg_as(2, dt);
    if (fl) return intrinsic(llvm::Intrinsic::fma, {a, m, c});
    if (dt == DType::Bool) return unsupported();
    return b_.CreateAdd(b_.CreateMul(a, m), c);
  }
  // Comparisons and logical ops: operands compared in their common dtype, result bool.
  switch (e.op) {
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge: {
      DType ct = promote_types(e.args.at(0)->dtype, e.args.at(1)->dtype);
      Value* a = arg_as(0, ct);
      Value* c = arg_as(1, ct);
      if (is_float(ct)) {
        switch (e.op) {
          case Op::Eq: return b_.CreateFCmpOEQ(a, c);
          case Op::Ne: return b_.CreateFCmpUNE(a, c);
          case Op::Lt: return b_.CreateFCmpOLT(a, c);
          case Op::Le: return b_.CreateFCmpOLE(a, c);
          case Op::Gt: return b_.CreateFCmpOGT(a, c);
          default: return b_.CreateFCmpOGE(a, c);
        }
      }
      bool u = ct == DType::Bool;  // false < true
      switch (e.op) {
        case Op::Eq: return b_.CreateICmpEQ(a, c);
        case Op::Ne: return b_.CreateICmpNE(a, c);
        case Op::Lt: return u ? b_.CreateICmpULT(a, c) : b_.CreateICmpSLT(a, c);
        case Op::Le: return u ? b_.CreateICmpULE(a, c) : b_.CreateICmpSLE(a, c);
        case Op::Gt: return u ? b_.CreateICmpUGT(a, c) : b_.CreateICmpSGT(a, c);
        default: return u ? b_.CreateICmpUGE(a, c) : b_.CreateICmpSGE(a, c);
      }
    }
    case Op::And:
    case Op::Or:
    case Op::Not: {
      Value* a = truth(emit(e.args.at(0)), e.args[0]->dtype);
      Value* r;
      if (e.op == Op::Not) r = b_.CreateNot(a);
      else {
        Value* c = truth(emit(e.args.at(1)), e.args[1]->dtype);
        r = e.op == Op::And ? b_.CreateAnd(a, c) : b_.CreateOr(a, c);
      }
      return convert(r, DType::Bool, dt);
    }
    default: break;
  }

  const int n = static_cast<int>(e.args.size());
  Value* x = arg_as(0, dt);
  Value* y = n > 1 ? arg_as(1, dt) : nullptr;

  if (dt == DType::Bool) {
    switch (e.op) {
      case Op::Maximum:
      case Op::BitOr: return b_.CreateOr(x, y);
      case Op::Minimum:
      case Op::BitAnd: return b_.CreateAnd(x, y);
      case Op::BitXor: return b_.CreateXor(x, y);
      case Op::BitNot: return b_.CreateNot(x);
      case Op::Abs:
      case Op::Relu:
      case Op::Floor:
      case Op::Ceil:
      case Op::Round:
      case Op::Sign: return x;
      default: return unsupported();
    }
  }

  if (!fl) {
    const bool idx = is_index(&e);  // index arithmetic never overflows: nsw helps SCEV
    switch (e.op) {
      case Op::Neg: return b_.CreateNeg(x);
      case Op::Abs: return intrinsic(llvm::Intrinsic::abs, {x, b_.getFalse()});
      case Op::Square: return b_.CreateMul(x, x);
      case Op::Relu: return intrinsic(llvm::Intrinsic::smax, {x, llvm::ConstantInt::get(t, 0)});
      case Op::Floor:
      case Op::Ceil:
      case Op::Round: return x;
      case Op::Sign: {
        Value* zero = llvm::ConstantInt::get(t, 0);
        Value* s = b_.CreateSelect(b_.CreateICmpSLT(x, zero), llvm::ConstantInt::get(t, -1, true), x);
        return b_.CreateSelect(b_.CreateICmpSGT(x, zero), llvm::ConstantInt::get(t, 1), s);
      }
      case Op::Add: return b_.CreateAdd(x, y, "", false, idx);
      case Op::Sub: return b_.CreateSub(x, y, "", false, idx);
      case Op::Mul: return b_.CreateMul(x, y, "", false, idx);
      case Op::Maximum: return intrinsic(llvm::Intrinsic::smax, {x, y});
      case Op::Minimum: return intrinsic(llvm::Intrinsic::smin, {x, y});
      case Op::BitAnd: return b_.CreateAnd(x, y);
      case Op::BitOr: return b_.CreateOr(x, y);
      case Op::BitXor: return b_.CreateXor(x, y);
      case Op::BitNot: return b_.CreateNot(x);
      case Op::Shl: {
        // The select keeps shl's poison (count >= bits) out of the result; a negative count is
        // a huge unsigned one. x86 folds the pattern into vpsllv, which has this rule.
        Value* bits = llvm::ConstantInt::get(t, t->getIntegerBitWidth());
        return b_.CreateSelect(b_.CreateICmpULT(y, bits), b_.CreateShl(x, y), llvm::ConstantInt::get(t, 0));
      }
      case Op::Shr: {  // counts past bits - 1 (negative ones too, unsigned) shift in the sign alone
        Value* top = llvm::ConstantInt::get(t, t->getIntegerBitWidth() - 1);
        return b_.CreateAShr(x, intrinsic(llvm::Intrinsic::umin, {y, top}));
      }
      case Op::Div: {
        // Truncating division; x/0 -> minimum; x/-1 -> wrapping negation (sdiv would be UB).
        Value* zero = llvm::ConstantInt::get(t, 0);
        Value* m1 = llvm::ConstantInt::get(t, -1, true);
        Value* bad = b_.CreateOr(b_.CreateICmpEQ(y, zero), b_.CreateICmpEQ(y, m1));
        Value* q = b_.CreateSDiv(x, b_.CreateSelect(bad, llvm::ConstantInt::get(t, 1), y));
        Value* special = b_.CreateSelect(b_.CreateICmpEQ(y, zero), int_min(b_, dt), b_.CreateNeg(x));
        return b_.CreateSelect(bad, special, q);
      }
      default: return unsupported();
    }
  }

  switch (e.op) {
    case Op::Neg: return b_.CreateFNeg(x);
    case Op::Abs: return intrinsic(llvm::Intrinsic::fabs, {x});
    case Op::Exp: return math(MathFn::Exp, {x});
    case Op::Exp2: return math(MathFn::Exp2, {x});
    case Op::Log: return math(MathFn::Log, {x});
    case Op::Log2: return math(MathFn::Log2, {x});
    case Op::Log1p:  // SLEEF's log1p overflows to inf for huge x; there log1p(x) == log(x)
      return b_.CreateSelect(b_.CreateFCmpOGT(x, fc(f64 ? 1e300 : 1e30)), math(MathFn::Log, {x}),
                             math(MathFn::Log1p, {x}));
    case Op::Expm1: return math(MathFn::Expm1, {x});
    case Op::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {x});
    case Op::Rsqrt: return b_.CreateFDiv(fc(1.0), intrinsic(llvm::Intrinsic::sqrt, {x}));
    case Op::Recip: return b_.CreateFDiv(fc(1.0), x);
    case Op::Square: return b_.CreateFMul(x, x);
    case Op::Sin: return math(MathFn::Sin, {x});
    case Op::Cos: return math(MathFn::Cos, {x});
    case Op::Tanh: return math(MathFn::Tanh, {x});
    case Op::Erf: return math(MathFn::Erf, {x});
    case Op::Relu:  // x > 0 or NaN -> x; else +0 (relu(-0) = +0)
      return b_.CreateSelect(b_.CreateFCmpUGT(x, fc(0.0)), x, fc(0.0));
    case Op::Floor: return intrinsic(llvm::Intrinsic::floor, {x});
    case Op::Ceil: return intrinsic(llvm::Intrinsic::ceil, {x});
    case Op::Round: return intrinsic(llvm::Intrinsic::roundeven, {x});  // nearbyint, ties to even
    case Op::Sign: {                                                    // 1, -1, or x itself (+-0, NaN)
      Value* s = b_.CreateSelect(b_.CreateFCmpOLT(x, fc(0.0)), fc(-1.0), x);
      return b_.CreateSelect(b_.CreateFCmpOGT(x, fc(0.0)), fc(1.0), s);
    }
    case Op::Add: return b_.CreateFAdd(x, y);
    case Op::Sub: return b_.CreateFSub(x, y);
    case Op::Mul: return b_.CreateFMul(x, y);
    case Op::Div: return b_.CreateFDiv(x, y);
    case Op::Pow: return math(MathFn::Pow, {x, y});
    case Op::Maximum:
    case Op::Minimum: {
      // Reference: NaN if either is NaN, else (a > b ? a : b) (the second operand on ties, so
      // maximum(-0, +0) = +0 and maximum(+0, -0) = -0, unlike llvm.maximum).
      Value* pick = e.op == Op::Maximum ? b_.CreateFCmpOGT(x, y) : b_.CreateFCmpOLT(x, y);
      Value* r = b_.CreateSelect(pick, x, y);
      return b_.CreateSelect(b_.CreateFCmpUNO(x, y), b_.CreateFAdd(x, y), r);
    }
    default: return unsupported();
  }
}

}  // namespace kfuse::detail::llvmjit
