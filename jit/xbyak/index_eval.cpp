// xbyak backend: integer index arithmetic in general registers, the Gen member (gen.hpp) that
// every strategy uses for the values it computes once per row or per id: a row's stream bases and
// steps (rows.cpp), a segment kernel's bag bounds, row ids, row pointers and shared values
// (segment.cpp: those add the id position, accumulators and index loads as leaves).
#include <optional>

#include "gen.hpp"
#include "segment.hpp"

namespace kfuse::detail::xb {

// Integer expression e into d; `f` are the registers it may use besides d (not rax or rdx when
// e divides: idiv takes them).
template <class Vmm>
void Gen<Vmm>::ieval(const ir::Expr* e, const Reg64& d, std::vector<Reg64> f) {
  if (seg_use_cse_)
    if (auto it = seg_cse_.find(e); it != seg_cse_.end()) {
      if (it->second >= 0) mov(d, qword[rsp + it->second]);
      else if (~it->second != d.getIdx()) mov(d, Reg64(~it->second));
      return;
    }
  auto take = [&]() {
    if (f.empty()) throw DeclineError("xbyak: index arithmetic needs more registers than are free");
    Reg64 r = f.front();
    f.erase(f.begin());
    return r;
  };
  auto small = [](const ir::Expr* x) {
    return x->kind == ExprKind::Const && x->value >= -2147483648.0 && x->value <= 2147483647.0;
  };
  switch (e->kind) {
    case ExprKind::Const: mov(d, static_cast<int64_t>(e->value)); return;
    case ExprKind::Param:
      if (const Reg64* r = gpr_inv(GprInv::Param, e->index)) {
        mov(d, *r);
        return;
      }
      mov(d, qword[rdi + frame_off::params]);
      mov(d, qword[d + 8 * e->index]);
      return;
    case ExprKind::Var:
      if (e->space == ir::Space::Reduce && p_.segment) {  // a segment kernel's id position
        mov(d, seg_r0_);
        return;
      }
      if (e->space != ir::Space::Outer || e->index >= p_.row_dims)
        throw DeclineError("xbyak: internal: inner var in a row's index");
      if (seg_last_bag_ && e->index == p_.row_dims - 1) {  // the bag dim's last index
        mov(d, qword[rdi + frame_off::ext + 8 * e->index]);
        dec(d);
        return;
      }
      mov(d, qword[rdi + frame_off::idx + 8 * e->index]);
      return;
    case ExprKind::IDiv:
    case ExprKind::IMod: {
      const Reg64 t = take();
      if (t.getIdx() == rax.getIdx() || t.getIdx() == rdx.getIdx())
        throw DeclineError("xbyak: internal: a division's divisor in rax/rdx");
      ieval(e->args[0].get(), d, f);
      ieval(e->args[1].get(), t, f);
      // idiv takes rax and rdx, which may hold an enclosing expression's value (segment
      // kernels evaluate into rax): kept across it, on the stack (nothing between the push
      // and the pop addresses rsp).
      const bool keep_rax = d.getIdx() != rax.getIdx(), keep_rdx = d.getIdx() != rdx.getIdx();
      if (keep_rax) push(rax);
      if (keep_rdx) push(rdx);
      mov(rax, d);
      cqo();
      idiv(t);
      mov(d, e->kind == ExprKind::IDiv ? rax : rdx);
      if (keep_rdx) pop(rdx);
      if (keep_rax) pop(rax);
      return;
    }
    case ExprKind::Acc:
    case ExprKind::Load:
      if (!p_.segment) throw DeclineError("xbyak: internal: an accumulator or a load in a row's index");
      break;
    case ExprKind::Op: break;
    default: throw DeclineError("xbyak: internal: index expression");
  }
  switch (e->kind) {
    case ExprKind::Acc: mov(d, qword[rsp + seg_acc_q_.at(e->index)]); return;
    case ExprKind::Load: {
      const bool i64 = k_.buffers[static_cast<size_t>(e->index)].dtype == DType::I64;
      // ids[r0] (every bag's row id): indexed by the id position's register itself
      const ir::Expr* ix = e->args[0].get();
      const bool at_r0 =
          ix->kind == ExprKind::Var && ix->space == ir::Space::Reduce && !(seg_use_cse_ && seg_cse_.count(ix));
      if (!at_r0) ieval(ix, d, f);
      const Reg64 idx = at_r0 ? seg_r0_ : d;
      const Reg64 t = take();
      Label zero, done;
      if (e->args.size() > 1) {  // masked: no access when the mask is false
        ieval(e->args[1].get(), t, f);
        test(t, t);
        jz(zero, T_NEAR);
      }
      const Reg64* pinned = gpr_inv(GprInv::Buffer, e->index);
      if (!pinned) mov(t, qword[rsp + seg_buf_q_.at(static_cast<size_t>(e->index))]);
      const Reg64& base = pinned ? *pinned : t;
      if (i64) mov(d, qword[base + idx * 8]);
      else movsxd(d, dword[base + idx * 4]);
      if (e->args.size() > 1) {
        jmp(done, T_NEAR);
        L(zero);
        xor_(d.cvt32(), d.cvt32());
        L(done);
      }
      return;
    }
    default: break;
  }
  // An id clamped into [0, c] (min(max(x, 0), c), either nesting) inside an id loop: one
  // unsigned compare (a negative x is above c too) and a branch to a fix-up after the loop. The
  // ids were checked when the bag was recorded, so the branch is never taken unless the buffer
  // changed since: the fix-up still clamps, so no id reads outside the table. The in-line form
  // took six instructions per id (two constants into a register, two compares, two cmovs).
  if (seg_cold_ok_ && (e->op == Op::Minimum || e->op == Op::Maximum) && !seg_unclamped_) {
    const Op outer = e->op, inner = outer == Op::Minimum ? Op::Maximum : Op::Minimum;
    auto konst = [](const ir::Expr* x) -> std::optional<int64_t> {
      if (x->kind != ExprKind::Const || x->value < 0 || x->value > 2147483647.0) return std::nullopt;
      return static_cast<int64_t>(x->value);
    };
    for (int i = 0; i < 2; ++i) {
      const ir::Expr* k1 = e->args[static_cast<size_t>(i)].get();
      const ir::Expr* in = e->args[static_cast<size_t>(1 - i)].get();
      if (!konst(k1) || in->kind != ExprKind::Op || in->op != inner) continue;
      for (int j = 0; j < 2; ++j) {
        const ir::Expr* k2 = in->args[static_cast<size_t>(j)].get();
        if (!konst(k2)) continue;
        const int64_t lo = outer == Op::Minimum ? *konst(k2) : *konst(k1);
        const int64_t hi = outer == Op::Minimum ? *konst(k1) : *konst(k2);
        if (lo != 0) continue;
        ieval(in->args[static_cast<size_t>(1 - j)].get(), d, f);
        Label& fix = seg_cold_labels_.emplace_back();
        Label& back = seg_cold_labels_.emplace_back();
        Label& neg = seg_cold_labels_.emplace_back();
        cmp(d, static_cast<int32_t>(hi));
        ja(fix, T_NEAR);
        L(back);
        seg_cold_.push_back([this, d, hi, &fix, &back, &neg] {
          L(fix);
          test(d, d);
          js(neg, T_NEAR);
          mov(d, hi);
          jmp(back, T_NEAR);
          L(neg);
          xor_(d.cvt32(), d.cvt32());
          jmp(back, T_NEAR);
        });
        return;
      }
    }
  }
  // A prefetch address (seg_prefetch) skips the clamps of the id ahead: a prefetch never
  // faults, and the id itself was checked when the bag was recorded. (7 instructions per id
  // fewer: the f32 bag's id ahead was clamped as its row load's id is.)
  if (seg_unclamped_ && (e->op == Op::Minimum || e->op == Op::Maximum))
    for (int i = 0; i < 2; ++i)
      if (e->args[static_cast<size_t>(1 - i)]->kind == ExprKind::Const) {
        ieval(e->args[static_cast<size_t>(i)].get(), d, f);
        return;
      }
  const ir::Expr* a0 = e->args[0].get();
  ieval(a0, d, f);
  switch (e->op) {
    case Op::Not: xor_(d, 1); return;
    case Op::Cast:
      if (e->dtype == DType::Bool) {
        test(d, d);
        setne(d.cvt8());
        movzx(d.cvt32(), d.cvt8());
      } else if (e->dtype == DType::I32 && a0->dtype == DType::I64) {
        movsxd(d, d.cvt32());
      }
      return;
    case Op::Where: {
      const Reg64 t1 = take(), t2 = take();  // (f no longer holds them: both stay live)
      ieval(e->args[1].get(), t1, f);
      ieval(e->args[2].get(), t2, f);
      test(d, d);
      cmovnz(t2, t1);
      mov(d, t2);
      return;
    }
    default: break;
  }
  const ir::Expr* a1 = e->args[1].get();
  const bool imm = small(a1) && (e->op == Op::Add || e->op == Op::Sub || e->op == Op::Mul);
  if (imm) {
    const auto v = static_cast<int32_t>(a1->value);
    if (e->op == Op::Add) add(d, v);
    else if (e->op == Op::Sub) sub(d, v);
    else imul(d, d, v);
    return;
  }
  // (the ops below only read t: a pinned parameter is its own operand)
  const Reg64* pinned = a1->kind == ExprKind::Param ? gpr_inv(GprInv::Param, a1->index) : nullptr;
  const Reg64 t = pinned ? *pinned : take();
  if (!pinned) ieval(a1, t, f);
  auto setcc = [&](void (Xbyak::CodeGenerator::*set)(const Xbyak::Operand&)) {
    cmp(d, t);
    (this->*set)(d.cvt8());
    movzx(d.cvt32(), d.cvt8());
  };
  switch (e->op) {
    case Op::Add: add(d, t); return;
    case Op::Sub: sub(d, t); return;
    case Op::Mul: imul(d, t); return;
    case Op::And: and_(d, t); return;
    case Op::Or: or_(d, t); return;
    case Op::Minimum:
      cmp(d, t);
      cmovg(d, t);
      return;
    case Op::Maximum:
      cmp(d, t);
      cmovl(d, t);
      return;
    case Op::Eq: setcc(&Xbyak::CodeGenerator::sete); return;
    case Op::Ne: setcc(&Xbyak::CodeGenerator::setne); return;
    case Op::Lt: setcc(&Xbyak::CodeGenerator::setl); return;
    case Op::Le: setcc(&Xbyak::CodeGenerator::setle); return;
    case Op::Gt: setcc(&Xbyak::CodeGenerator::setg); return;
    case Op::Ge: setcc(&Xbyak::CodeGenerator::setge); return;
    default: throw DeclineError(std::string("xbyak: index op ") + op_name(e->op) + " not supported");
  }
}

template <class Vmm>
const Reg64* Gen<Vmm>::gpr_inv(GprInv kind, int index) const {
  const uint64_t key = gpr_key(kind, index);
  for (const auto& [k, r] : gpr_inv_)
    if (k == key) return &r;
  return nullptr;
}

#define KFUSE_XB_IEVAL(V)                                                         \
  template void Gen<V>::ieval(const ir::Expr*, const Reg64&, std::vector<Reg64>); \
  template const Reg64* Gen<V>::gpr_inv(GprInv, int) const;
KFUSE_XB_IEVAL(Xbyak::Zmm)
KFUSE_XB_IEVAL(Xbyak::Ymm)
#undef KFUSE_XB_IEVAL

}  // namespace kfuse::detail::xb
