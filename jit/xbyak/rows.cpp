// xbyak backend: the row walk of a kernel, members of Gen (gen.hpp): the loop over the rows of a
// thread's range (and the cursors of Frame::ways), the stream pointers of a row computed from
// their index expressions (or stepped by a fixed amount per row of a pointwise walk), the
// prefetch slots of the next rows, and the base register of a stream. The phase loops that run
// inside a row are emitter.cpp's.
#include <functional>

#include "gen.hpp"
#include "ir/expr_util.hpp"

namespace kfuse::detail::xb {

template <class Vmm>
void Gen<Vmm>::row_loop(const std::function<void()>& body) {
  Label top, done;
  const bool ways = p_.mode == Mode::Row;  // Frame::ways: rows taken from several cursors
  mov(r12, qword[rdi + frame_off::row_begin]);
  mov(r13, qword[rdi + frame_off::row_end]);
  if (ways) {
    Label one;
    cmp(qword[rdi + frame_off::ways], 1);
    jle(one, T_NEAR);
    mov(rax, qword[rdi + frame_off::cursors]);  // cursor 0 starts at row_begin
    mov(r13, qword[rax + frame_off::cursor_end]);
    L(one);
  }
  // A pointwise walk over rows moves every stream pointer by a fixed step (params: evaluated
  // once here) while only the innermost row index advances: the pointers are recomputed from
  // their index expressions only on a carry. Recomputing them per row cost ~40 instructions, as
  // much as the row itself for rows of 64 floats (a permuted head split [8,512,16,64]: 0.9 ms
  // against LLVM's 0.5).
  const std::vector<ExprRef> steps = ways ? std::vector<ExprRef>{} : row_steps();
  for (size_t b = 0; b < steps.size(); ++b) {
    if (!steps[b] || ir::is_const(steps[b], 0)) continue;
    ieval(steps[b].get(), r8, ieval_pool());
    shl(r8, 2);
    mov(qword[rsp + step_slot(b)], r8);
  }
  Label resume;
  L(top);
  cmp(r12, r13);
  jge(done, T_NEAR);
  compute_addrs();
  L(resume);
  nvslots_ = 0;
  body();
  // advance the row index and its decomposition (idx[] with carries)
  inc(r12);
  if (p_.row_dims > 0) {
    Label adv_done;
    for (int d = p_.row_dims - 1; d >= 0; --d) {
      Label carry;
      mov(rax, qword[rdi + frame_off::idx + 8 * d]);
      inc(rax);
      cmp(rax, qword[rdi + frame_off::ext + 8 * d]);
      jge(carry, T_NEAR);
      mov(qword[rdi + frame_off::idx + 8 * d], rax);
      if (d == p_.row_dims - 1 && !steps.empty()) {
        cmp(r12, r13);
        jge(done, T_NEAR);
        for (size_t a = 0; a < p_.addrs.size(); ++a) {
          const int b = p_.addrs[a].base;
          // (scratch rows and streams that do not move with the row, e.g. a bias, stay)
          if (b < 0 || !steps[static_cast<size_t>(b)] || ir::is_const(steps[static_cast<size_t>(b)], 0)) continue;
          mov(rax, qword[rsp + step_slot(static_cast<size_t>(b))]);  // (bytes of f32 elements)
          if (const int s = esz(static_cast<int>(a)); s < 4) sar(rax, s == 2 ? 1 : 2);
          add(qword[rsp + ptr_slot(static_cast<int>(a))], rax);
        }
        prefetch_slots();
        jmp(resume, T_NEAR);
        L(carry);
        mov(qword[rdi + frame_off::idx + 8 * d], 0);
        continue;
      }
      jmp(adv_done, T_NEAR);
      L(carry);
      mov(qword[rdi + frame_off::idx + 8 * d], 0);
    }
    L(adv_done);
  }
  if (ways) next_cursor();
  jmp(top, T_NEAR);
  L(done);
}

// Frame::ways > 1: the row state (r12, r13, Frame::idx) goes back to its cursor and the next
// cursor's comes in; after the last cursor, or one that has run out (sizes do not increase, so
// every later one has too), cursor 0 again, which ends the loop when it has run out.
template <class Vmm>
void Gen<Vmm>::next_cursor() {
  using namespace frame_off;
  Label one, have;
  cmp(qword[rdi + ways], 1);
  jle(one, T_NEAR);
  imul(rax, qword[rdi + way], cursor_bytes);  // rax = this cursor
  add(rax, qword[rdi + cursors]);
  mov(qword[rax + cursor_row], r12);
  for (int d = 0; d < p_.row_dims; ++d) {
    mov(rdx, qword[rdi + idx + 8 * d]);
    mov(qword[rax + cursor_idx + 8 * d], rdx);
  }
  mov(rax, qword[rdi + way]);
  inc(rax);
  xor_(edx, edx);
  cmp(rax, qword[rdi + ways]);
  cmovge(rax, rdx);
  mov(qword[rdi + way], rax);
  imul(rax, rax, cursor_bytes);  // rax = the next cursor, or cursor 0 when it has run out
  add(rax, qword[rdi + cursors]);
  mov(r12, qword[rax + cursor_row]);
  cmp(r12, qword[rax + cursor_end]);
  jl(have, T_NEAR);
  mov(qword[rdi + way], 0);
  mov(rax, qword[rdi + cursors]);
  mov(r12, qword[rax + cursor_row]);
  L(have);
  mov(r13, qword[rax + cursor_end]);
  mov(rdx, qword[rax + cursor_pf_rows]);
  mov(qword[rdi + pf_rows], rdx);
  for (int d = 0; d < p_.row_dims; ++d) {
    mov(rdx, qword[rax + cursor_idx + 8 * d]);
    mov(qword[rdi + idx + 8 * d], rdx);
  }
  L(one);
}

template <class Vmm>
void Gen<Vmm>::compute_addrs() {
  for (size_t b = 0; b < p_.bases.size(); ++b) {
    bool used = false;
    for (const auto& a : p_.addrs) used |= a.base == static_cast<int>(b);
    if (!used) continue;
    ieval(p_.bases[b].get(), r8, ieval_pool());
    for (size_t a = 0; a < p_.addrs.size(); ++a) {
      if (p_.addrs[a].base != static_cast<int>(b)) continue;
      if (p_.addrs[a].buffer == kIndexBuffer) {  // the value itself (index_masks.cpp)
        mov(qword[rsp + ptr_slot(static_cast<int>(a))], r8);
        continue;
      }
      mov(rax, qword[rdi + frame_off::bufs]);
      mov(rax, qword[rax + 8 * p_.addrs[a].buffer]);
      lea(rax, ptr[rax + r8 * esz(static_cast<int>(a))]);
      mov(qword[rsp + ptr_slot(static_cast<int>(a))], rax);
    }
  }
  prefetch_slots();
}

template <class Vmm>
void Gen<Vmm>::prefetch_slots() {
  for (size_t i = 0; i < row_pf_.size(); ++i) {  // where the row loop's prefetch reaches
    imul(rax, qword[rdi + frame_off::pf_rows], static_cast<int>(row_pf_[i].second * esz(row_pf_[i].first)));
    add(rax, qword[rsp + ptr_slot(row_pf_[i].first)]);
    mov(qword[rsp + pf_slot(i)], rax);
  }
}

// Per base, its step along the innermost row index when every used base has one computable
// once per launch (params and constants only); empty when some base has none (an idiv/imod of
// that index): row_loop then recomputes the pointers every row.
template <class Vmm>
std::vector<ExprRef> Gen<Vmm>::row_steps() const {
  if (p_.mode != Mode::Pointwise || p_.row_dims == 0) return {};
  std::vector<ExprRef> steps(p_.bases.size());
  for (const auto& a : p_.addrs) {
    if (a.base < 0 || steps[static_cast<size_t>(a.base)]) continue;
    auto st = ir::symbolic_step(p_.bases[static_cast<size_t>(a.base)], ir::Space::Outer, p_.row_dims - 1);
    if (!st || ir::contains(st->get(), ExprKind::Var) || ir::contains(st->get(), ExprKind::Load)) return {};
    steps[static_cast<size_t>(a.base)] = *st;
  }
  return steps;
}

// Pointer slot/register prev_ptr_[a] is the previous row's pointer of stream a (pipeline).
template <class Vmm>
void Gen<Vmm>::load_ptr_regs() {
  const size_t n = static_cast<size_t>(nptrs_);
  for (size_t a = 0; a < n && a < ptr_pool().size(); ++a)
    mov(ptr_pool()[a], qword[rsp + ptr_slot(static_cast<int>(a))]);
}

// base register of a stream (rax reloaded for overflow streams); the previous row's in prev_row_
template <class Vmm>
Reg64 Gen<Vmm>::stream(int addr) {
  if (prev_row_) addr = prev_ptr_[static_cast<size_t>(addr)];
  if (addr < static_cast<int>(ptr_pool().size())) return ptr_pool()[addr];
  mov(rax, qword[rsp + ptr_slot(addr)]);
  return rax;
}

#define KFUSE_XB_ROW_MEMBERS(V)                                 \
  template void Gen<V>::row_loop(const std::function<void()>&); \
  template void Gen<V>::next_cursor();                          \
  template void Gen<V>::compute_addrs();                        \
  template void Gen<V>::prefetch_slots();                       \
  template std::vector<ExprRef> Gen<V>::row_steps() const;      \
  template void Gen<V>::load_ptr_regs();                        \
  template Reg64 Gen<V>::stream(int);
KFUSE_XB_ROW_MEMBERS(Xbyak::Zmm)
KFUSE_XB_ROW_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_ROW_MEMBERS

}  // namespace kfuse::detail::xb
