// xbyak backend: the leaves of a segment kernel's fold, the Gen members (gen.hpp) that segment.cpp's
// walk of a bag evaluates per id: shared index values held in registers, scalars and broadcasts of
// per-id values (weights, padding tests, a quantised row's scale and bias), and row leaves: a
// vector of columns of an f32 row, of a narrow row converted to f32 (u8, i8, f16, bf16), or of a
// 4-bit table's nibble row, decoded alone or, on AVX-512, two vectors at a time (in column order,
// or as even and odd columns when every row the fold reads is a nibble row: seg_block restores the
// order after the walk). segment.hpp has the plan these read.
#include <algorithm>
#include <optional>

#include "gen.hpp"
#include "segment.hpp"

namespace kfuse::detail::xb {

// `e`'s register when it is a shared value held in one (seg_shared), else none.
template <class Vmm>
std::optional<Reg64> Gen<Vmm>::seg_held(const ir::Expr* e) const {
  if (!seg_use_cse_) return std::nullopt;
  auto it = seg_cse_.find(e);
  if (it == seg_cse_.end() || it->second >= 0) return std::nullopt;
  return Reg64(~it->second);
}

template <class Vmm>
const std::vector<Reg64>& Gen<Vmm>::seg_pool() {
  static const std::vector<Reg64> p = {rbx, rsi, r8, r9, r10, r11};
  return p;
}

template <class Vmm>
bool Gen<Vmm>::seg_row_leaf(const ir::Expr* e) const {
  if (!p_.segment) return false;
  auto it = p_.segment->leaves.find(e);
  return it != p_.segment->leaves.end() && it->second.row;
}

// d = the broadcast of a scalar leaf (a uniform bool as all-ones/zero lanes, or cast.f32 of a
// uniform integer), computed with the registers `f`.
template <class Vmm>
void Gen<Vmm>::seg_scalar(const ir::Expr* e, const Vmm& d, const std::vector<Reg64>& f) {
  const Xbyak::Xmm x(d.getIdx());
  if (e->dtype == DType::Bool) {
    ieval(e, rax, f);
    neg(eax);
    vmovd(x, eax);
    vpbroadcastd(d, x);
  } else {
    ieval(e->args[0].get(), rax, f);
    vcvtsi2ss(x, x, rax);
    vbroadcastss(d, x);
  }
}

// d = the broadcast of a uniform table load (its pointer in its register).
template <class Vmm>
void Gen<Vmm>::seg_broadcast(const ir::Expr* e, const Vmm& d) {
  const SegmentPlan::Leaf& l = p_.segment->leaves.at(e);
  const SegmentPlan::Ptr& p = p_.segment->ptrs[static_cast<size_t>(l.ptr)];
  const Reg64 b = seg_pool()[static_cast<size_t>(l.ptr)];
  const Xbyak::Xmm x(d.getIdx());
  const auto at = b + l.offset * static_cast<int64_t>(dtype_size(p.dtype));
  switch (p.dtype) {
    case DType::F32: vbroadcastss(d, dword[at]); return;
    case DType::U8:
    case DType::I8:
      if (p.dtype == DType::U8) movzx(eax, byte[at]);
      else movsx(eax, byte[at]);
      if (l.shift >= 0) {  // a 4-bit table's nibble
        if (l.shift > 0) shr(eax, l.shift);
        and_(eax, 15);
      }
      vmovd(x, eax);
      vpbroadcastd(d, x);
      vcvtdq2ps(d, d);
      return;
    // Half scalars (a 4-bit table's f16 scale and bias, once per id): the half broadcast from memory
    // into every 16-bit lane, then converted (f16) or shifted into the top half of each lane (bf16)
    // in place: two instructions, where a round trip through a general register took four.
    case DType::F16:
      if constexpr (Z) {
        vpbroadcastw(Xbyak::Ymm(d.getIdx()), word[at]);
        vcvtph2ps(d, Xbyak::Ymm(d.getIdx()));
      } else {
        vpbroadcastw(x, word[at]);
        vcvtph2ps(d, x);
      }
      return;
    case DType::BF16:
      vpbroadcastw(d, word[at]);
      vpslld(d, d, 16);
      return;
    default: throw DeclineError("xbyak: segment kernel: internal: broadcast dtype");
  }
}

// The address of an f32 row leaf's vector seg_v_ (unmasked), or null when e is not one.
template <class Vmm>
const Address* Gen<Vmm>::seg_row_address(const ir::Expr* e) {
  if (!seg_row_leaf(e)) return nullptr;
  const SegmentPlan::Leaf& l = p_.segment->leaves.at(e);
  if (p_.segment->ptrs[static_cast<size_t>(l.ptr)].dtype != DType::F32) return nullptr;
  seg_addr_ = ptr[seg_pool()[static_cast<size_t>(l.ptr)] + r14 * 4 + (seg_v_ * W + l.offset) * 4];
  return &seg_addr_;
}

// Emit_leaf of a row leaf: vector seg_v_ of the block at column r14 (masked: the tail mask).
template <class Vmm>
bool Gen<Vmm>::seg_leaf(const ir::Expr* e, const Vmm& d, const Eval& ev) {
  if (!seg_row_leaf(e)) return false;
  const SegmentPlan::Leaf& l = p_.segment->leaves.at(e);
  const SegmentPlan::Ptr& p = p_.segment->ptrs[static_cast<size_t>(l.ptr)];
  const Reg64 b = seg_pool()[static_cast<size_t>(l.ptr)];
  const int esz = static_cast<int>(dtype_size(p.dtype));
  // (a nibble row's pointer includes the block's first column / 2: vector v is W / 2 bytes on)
  const Address row = p.nibble ? ptr[b + seg_v_ * (W / 2) + l.offset]
                               : ptr[b + r14 * esz + (seg_v_ * W + l.offset) * esz],
                tail = ptr[rsp + seg_tail_off_];
  bool from_stack = false;
  using Xbyak::Xmm;
  using Xbyak::Ymm;
  const Xmm x(d.getIdx());
  if (p.dtype == DType::F32) {
    if (!ev.masked) vmovups(d, row);
    else if constexpr (Z) vmovups(d | k1 | T_z, row);
    else vmaskmovps(d, Vmm(kMaskReg), row);
    return true;
  }
  // Narrow rows, masked: AVX-512 loads the lanes under k1 (bytes/words: the same lane bits; a
  // nibble row's ceil(lanes / 2) bytes under k4, seg_block); AVX2 copies the tail's bytes into a
  // zeroed stack vector (no byte-masked loads). Neither reads past the row's last byte.
  bool from_reg = false;
  if (ev.masked) {
    if constexpr (Z) {
      if (p.nibble) vmovdqu8(x | k4 | T_z, row);
      else if (esz == 1) vmovdqu8(x | k1 | T_z, row);
      else vmovdqu16(Ymm(d.getIdx()) | k1 | T_z, row);
      from_reg = true;
    } else {
      if (static_cast<size_t>(seg_nptr_) >= seg_pool().size())
        throw DeclineError("xbyak: segment kernel: no register left for a narrow row's tail");
      const Reg64 s = seg_pool()[static_cast<size_t>(seg_nptr_)];
      lea(rax, row);
      vpxor(x, x, x);
      vmovdqu(ptr[rsp + seg_tail_off_], x);
      mov(rdx, qword[rsp + seg_tl_q_]);  // bytes: the tail's lanes * esz, ceil(lanes / 2) for nibbles
      if (esz == 2) add(rdx, rdx);
      if (p.nibble) {
        inc(rdx);
        shr(rdx, 1);
      }
      Label copy;
      L(copy);
      movzx(s.cvt32(), byte[rax + rdx - 1]);
      mov(byte[rsp + rdx + seg_tail_off_ - 1], s.cvt8());
      dec(rdx);
      jnz(copy, T_NEAR);
      from_stack = true;
    }
  }
  auto src = [&](const Xbyak::Operand& reg_form) -> const Xbyak::Operand& {
    if (from_reg) return reg_form;
    return from_stack ? tail : row;
  };
  const Ymm y(d.getIdx());
  if constexpr (Z) {
    if (p.nibble && !ev.masked && seg_v_ < seg_pair_end_) {
      auto it = std::find_if(seg_nib_reg_.begin(), seg_nib_reg_.end(), [&](const auto& c) { return c.first == e; });
      if (it == seg_nib_reg_.end())
        throw DeclineError("xbyak: segment kernel: internal: nibble row without its register");
      if (seg_even_odd_) {
        // Lane j of the pair's 16 bytes, widened, holds columns 2j (its low nibble) and 2j + 1
        // (its high nibble): the even vector takes the low nibbles, the odd one the high ones, kept
        // in h; the accumulators hold the pair's columns even / odd until the walk ends (seg_block
        // interleaves them). Three operations per pair where the interleaving decode below takes
        // seven: the in-cache 4-bit bag 4.7 -> 3.9 ns per id (docs/performance.md).
        const Vmm h(it->second);
        if (seg_v_ % 2 == 0) {
          vpmovzxbd(d, row);
          vpsrld(h, d, 4);
          vpandd(d, d, cstu(15));
          vcvtdq2ps(d, d);
        } else {
          vcvtdq2ps(d, h);
        }
        return true;
      }
      const Xmm h(it->second);
      if (seg_v_ % 2 == 0) {
        // One load of both vectors' W bytes, each byte's high nibble shifted into its low half
        // (vpsrlw: the next byte's low nibble lands above it), interleaved with the bytes as
        // they are: byte i's low half is column i's nibble; & 15 per byte; the odd vector's
        // half stays in h. 2.5 128-bit operations per vector where the single-vector decode
        // below takes three 512-bit ones (seg_block: the in-cache 4-bit bag 1.3x faster).
        const Xmm t(kAccTmp);
        vmovdqu8(x, row);
        vpsrlw(t, x, 4);
        vpunpckhbw(h, x, t);
        vpunpcklbw(x, x, t);
        const Cst m = cstu(0x0f0f0f0fu);
        for (const Xmm& r : {h, x}) {
          if (m.in_reg) vpandd(r, r, Xmm(m.reg.getIdx()));
          else vpandd(r, r, m.mem);
        }
        vpmovzxbd(d, x);
      } else {
        vpmovzxbd(d, h);
      }
      vcvtdq2ps(d, d);
      return true;
    }
  }
  if (p.nibble) {
    // W / 2 bytes broadcast to every 128-bit lane, lane i's byte i / 2 picked into its low byte
    // (vpshufb, nibtab_'s second half; the other bytes zeroed), shifted right by 0 or 4 per lane
    // (nibtab_), & 15: lane i is column i's nibble, as nibble_leaf proved the kernel asks. (One
    // in-lane shuffle: vmovd + vpunpcklbw + vpmovzxbd took one instruction more.)
    if constexpr (Z) {
      if (from_reg) vpbroadcastq(d, x);
      else vpbroadcastq(d, row);  // (AVX-512 tails are k-masked loads: from_reg)
    } else {
      vpbroadcastd(d, from_stack ? tail : row);
    }
    vpshufb(d, d, dry_ ? ptr[rip] : ptr[rip + nibtab_ + VB]);
    vpsrlvd(d, d, dry_ ? ptr[rip] : ptr[rip + nibtab_]);
    if constexpr (Z) vpandd(d, d, cstu(15));
    else vpand(d, d, cstu(15));
    vcvtdq2ps(d, d);
    return true;
  }
  switch (p.dtype) {
    case DType::U8:
      vpmovzxbd(d, src(x));
      vcvtdq2ps(d, d);
      break;
    case DType::I8:
      vpmovsxbd(d, src(x));
      vcvtdq2ps(d, d);
      break;
    case DType::F16:
      if constexpr (Z) vcvtph2ps(d, src(y));
      else vcvtph2ps(d, src(x));
      break;
    case DType::BF16:
      if constexpr (Z) vpmovzxwd(d, src(y));
      else vpmovzxwd(d, src(x));
      vpslld(d, d, 16);
      break;
    default: throw DeclineError("xbyak: segment kernel: internal: row dtype");
  }
  return true;
}

#define KFUSE_XB_SEGMENT_LEAF_MEMBERS(V)                                                  \
  template std::optional<Reg64> Gen<V>::seg_held(const ir::Expr*) const;                  \
  template const std::vector<Reg64>& Gen<V>::seg_pool();                                  \
  template bool Gen<V>::seg_row_leaf(const ir::Expr*) const;                              \
  template void Gen<V>::seg_scalar(const ir::Expr*, const V&, const std::vector<Reg64>&); \
  template void Gen<V>::seg_broadcast(const ir::Expr*, const V&);                         \
  template const Address* Gen<V>::seg_row_address(const ir::Expr*);                       \
  template bool Gen<V>::seg_leaf(const ir::Expr*, const V&, const Eval&);
KFUSE_XB_SEGMENT_LEAF_MEMBERS(Xbyak::Zmm)
KFUSE_XB_SEGMENT_LEAF_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_SEGMENT_LEAF_MEMBERS

}  // namespace kfuse::detail::xb
