// xbyak backend: a loop's invariant operands, the Gen members (gen.hpp) that give them to the
// expression code: constants (full vectors in the table after the code, reached RIP-relative),
// and, inside a loop that keeps them in registers (invariants_in_regs), the constants, the
// broadcasts of finished accumulators and the values hoisted into stack slots (hoist_invariants).
#include <algorithm>
#include <cstring>

#include "gen.hpp"

namespace kfuse::detail::xb {

// The register holding the invariant `key` in the loop being emitted, or -1 (then the caller
// reads it from memory). A dry run counts the use.
template <class Vmm>
int Gen<Vmm>::inv_reg(uint64_t key) {
  if (dry_) {
    auto it = std::find_if(iuse_.begin(), iuse_.end(), [&](const auto& u) { return u.first == key; });
    if (it == iuse_.end()) iuse_.push_back({key, 1});
    else ++it->second;
  }
  for (const auto& [k, r] : ireg_)
    if (k == key) return r;
  return -1;
}

template <class Vmm>
typename Gen<Vmm>::Cst Gen<Vmm>::cstu(uint32_t bits) {
  const int i = static_cast<int>(std::find(cvals_.begin(), cvals_.end(), bits) - cvals_.begin());
  if (i == static_cast<int>(cvals_.size())) cvals_.push_back(bits);
  Cst c{dry_ ? ptr[rip] : ptr[rip + ctab_ + i * VB], Vmm(0), false};
  if (const int r = inv_reg(inv_key(InvKind::Const, bits)); r >= 0) {
    c.reg = Vmm(r);
    c.in_reg = true;
  }
  return c;
}

template <class Vmm>
typename Gen<Vmm>::Cst Gen<Vmm>::cst(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return cstu(b);
}

// A constant leaf (f32, or a bool as all-ones/zero lanes) as an operand.
template <class Vmm>
typename Gen<Vmm>::Cst Gen<Vmm>::const_operand(const ir::Expr* e) {
  if (e->dtype == DType::Bool) return cstu(e->value != 0 ? 0xffffffffu : 0u);
  return cst(static_cast<float>(e->value));
}

// Accumulator leaf e's index in Frame::accs: the previous row's set starts at kMaxAccs.
template <class Vmm>
int Gen<Vmm>::acc_index(const ir::Expr* e) const {
  return e->index + (prev_row_ ? kMaxAccs : 0);
}

// The register holding the broadcast of Frame::accs[index] in this loop, or -1.
template <class Vmm>
int Gen<Vmm>::acc_reg(int index) {
  return inv_reg(inv_key(InvKind::Acc, static_cast<uint32_t>(index)));
}

// d = accumulator `index` of Frame::accs (acc_index), broadcast.
template <class Vmm>
void Gen<Vmm>::acc_broadcast(const Vmm& d, int index) {
  if (const int r = acc_reg(index); r >= 0) {
    vmovaps(d, Vmm(r));
    return;
  }
  mov(rax, qword[rdi + frame_off::accs]);
  vbroadcastss(d, dword[rax + 4 * index]);
}

// The hoisted value in vector slot s, as an operand.
template <class Vmm>
typename Gen<Vmm>::Cst Gen<Vmm>::slot_operand(int s) {
  Cst c{ptr[rsp + vslot_off(s)], Vmm(0), false};
  if (const int r = inv_reg(inv_key(InvKind::Slot, static_cast<uint32_t>(s))); r >= 0) {
    c.reg = Vmm(r);
    c.in_reg = true;
  }
  return c;
}

// Keeps a loop's invariants in registers (ireg_: cst(), acc_broadcast() and slot_operand()
// answer with them until the caller clears ireg_). From memory each is a load per use (an
// accumulator two: its address, then the broadcast): the chain tanh(a*0.5+b)*sigmoid(c)-exp(-a*a)
// loads ~45 constants per vector, against 3 of data; log_softmax's exp-sum loop, joined with the
// previous row's stores, loads 12 constants, the row's max twice and log(s) per vector. `body`
// (one vector's work) is emitted as a dry run that counts the invariants it uses (iuse_) and the
// highest register its evaluation takes (max_reg_; registers below `busy_below` count as taken
// too), then its bytes are taken back: a body references no label but the constant table's,
// which cst() does not use while dry_ (a label use would be patched later, at bytes that are no
// longer its instruction). The most used invariants then go to the registers above those, below
// any pinned accumulator or online-loop register.
template <class Vmm>
void Gen<Vmm>::invariants_in_regs(const std::function<void()>& body, int busy_below) {
  const size_t at = getSize();
  const int slots = nvslots_;
  iuse_.clear();
  max_reg_ = busy_below - 1;
  dry_ = true;
  body();
  dry_ = false;
  setSize(at);
  nvslots_ = slots;
  std::stable_sort(iuse_.begin(), iuse_.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  int limit = kAccTmp;  // pin_accs and online_phase take their registers from kAccTmp - 1 down
  for (const auto& [regs, nans] : acc_sets_) {
    for (auto [a, r] : regs) limit = std::min(limit, r);
    for (auto [a, r] : nans) limit = std::min(limit, r);
  }
  for (int r : online_regs_) limit = std::min(limit, r);
  int r = max_reg_ + 1;
  for (const auto& [key, uses] : iuse_) {  // most used first
    if (r >= limit) break;
    const uint32_t v = static_cast<uint32_t>(key);
    switch (static_cast<InvKind>(key >> 32)) {
      case InvKind::Const: vmovups(Vmm(r), cstu(v)); break;
      case InvKind::Acc: acc_broadcast(Vmm(r), static_cast<int>(v)); break;
      case InvKind::Slot: vmovups(Vmm(r), ptr[rsp + vslot_off(static_cast<int>(v))]); break;
    }
    ireg_.push_back({key, r++});
  }
  iuse_.clear();
}

// Whether `body` evaluates without spilling a value to a stack slot: a dry run, as above, whose
// bytes are taken back (loop_phase asks it of an interleaved body before choosing it). Running
// out of registers (an operation's operands, result and scratch do not fit) is a no too.
template <class Vmm>
bool Gen<Vmm>::spill_free(const std::function<void()>& body) {
  const size_t at = getSize();
  const int slots = nvslots_, top = max_reg_, spills = spills_;
  bool ok = true;
  dry_ = true;
  try {
    body();
  } catch (const DeclineError&) { ok = false; }
  dry_ = false;
  ok = ok && spills_ == spills;
  setSize(at);
  nvslots_ = slots;
  max_reg_ = top;
  disp_ = 0;
  if (!acc_sets_.empty()) use_acc_set(0);
  iuse_.clear();
  return ok;
}

#define KFUSE_XB_INV_MEMBERS(V)                                                \
  template int Gen<V>::inv_reg(uint64_t);                                      \
  template typename Gen<V>::Cst Gen<V>::cstu(uint32_t);                        \
  template typename Gen<V>::Cst Gen<V>::cst(float);                            \
  template typename Gen<V>::Cst Gen<V>::const_operand(const ir::Expr*);        \
  template int Gen<V>::acc_index(const ir::Expr*) const;                       \
  template int Gen<V>::acc_reg(int);                                           \
  template void Gen<V>::acc_broadcast(const V&, int);                          \
  template typename Gen<V>::Cst Gen<V>::slot_operand(int);                     \
  template void Gen<V>::invariants_in_regs(const std::function<void()>&, int); \
  template bool Gen<V>::spill_free(const std::function<void()>&);
KFUSE_XB_INV_MEMBERS(Xbyak::Zmm)
KFUSE_XB_INV_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_INV_MEMBERS

}  // namespace kfuse::detail::xb
