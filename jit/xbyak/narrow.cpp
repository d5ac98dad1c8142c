// xbyak backend: streams of narrow storage types (Addr::dtype u8, i8, f16, bf16, and bool) in
// pointwise, row and global kernels, the Gen members (gen.hpp) that load, store and round them.
//
// A narrow value lives in f32 lanes holding exactly its value: loads widen (vcvtph2ps for f16,
// a 16-bit shift for bf16, vpmovzx/sx + vcvtdq2ps for u8/i8), cast.f32 of a narrow value is then
// a copy, cast.f16 / cast.bf16 of an f32 value rounds in place (round to nearest even, as
// lib/core/half.cpp: F16C for f16, the integer sequence for bf16, NaNs made quiet), cast.u8 /
// cast.i8 truncates and wraps in place, and a store narrows a value that is already exact. So every kernel computes in
// f32 and rounds where the IR says, as the LLVM backend and the reference evaluator do: same bits.
// A bool value is a lane mask, as a comparison leaves it: a load sets the lanes of nonzero bytes,
// a store writes each lane's sign bit as a byte 0 or 1.
//
// Element sizes: a stream's vector is at b + r14 * esz + disp_ / 4 * esz (Gen::elem), its row
// steps and prefetch distances scaled the same way (rows.cpp, emitter.cpp).
//
// AVX2 has no byte- or word-masked loads and stores: a masked tail copies its bytes between the
// stream and a zeroed stack slot (narrow_tail_copy), reading and writing nothing past the last
// element. The zmm emitter has no narrow streams (Avx2OnlyError: the backend emits such a kernel's
// AVX2 code on AVX-512 machines): the k-masked forms are not written yet, and no AVX-512 machine
// was at hand to check them.
#include "gen.hpp"

namespace kfuse::detail::xb {

// Copies the tail's bytes (the lanes of the tail mask, Vmm(kMaskReg), times `esize`) from `from`
// to the stack at byte offset `slot` from rsp (to_stack), or from there to `from`. rax, rdx
// scratch; rcx saved in the slot's second half (it may hold a stream pointer).
template <class Vmm>
void Gen<Vmm>::narrow_tail_copy(const Address& at, int slot, int esize, bool to_stack) {
  lea(rdx, at);  // (first: the stream's base may be rax)
  vmovmskps(eax, Vmm(kMaskReg));
  popcnt(eax, eax);
  if (esize == 2) add(eax, eax);
  mov(qword[rsp + slot + 32], rcx);
  Label copy;
  L(copy);
  if (to_stack) {
    movzx(ecx, byte[rdx + rax - 1]);
    mov(byte[rsp + rax + slot - 1], cl);
  } else {
    movzx(ecx, byte[rsp + rax + slot - 1]);
    mov(byte[rdx + rax - 1], cl);
  }
  dec(rax);
  jnz(copy, T_NEAR);
  mov(rcx, qword[rsp + slot + 32]);
}

// d = the vector (or, `broadcast`, the one element) of narrow stream a.addr, widened to f32.
template <class Vmm>
void Gen<Vmm>::narrow_load(const Vmm& d, const Access& a, bool broadcast, bool masked) {
  if constexpr (Z) throw Avx2OnlyError("xbyak: narrow streams on AVX-512");
  const DType dt = p_.addrs[static_cast<size_t>(a.addr)].dtype;
  const Xbyak::Xmm x(d.getIdx());
  const Reg64 b = stream(a.addr);
  if (broadcast) {
    if (dt == DType::Bool) {  // any nonzero byte: all lanes set
      cmp(byte[b], 0);
      setne(al);
      movzx(eax, al);
      neg(eax);
      vmovd(x, eax);
      vpbroadcastd(d, x);
      return;
    }
    if (dt == DType::I8) movsx(eax, byte[b]);
    else if (dt == DType::U8) movzx(eax, byte[b]);
    else movzx(eax, word[b]);
    if (dt == DType::F16) {
      vmovd(x, eax);
      vcvtph2ps(x, x);
    } else if (dt == DType::BF16) {
      shl(eax, 16);
      vmovd(x, eax);
    } else {
      vcvtsi2ss(x, x, eax);
    }
    vbroadcastss(d, x);
    return;
  }
  Address at = elem(b, a.addr);
  if (masked) {
    const int slot = vslot_off(new_vslot());
    vpxor(x, x, x);
    vmovdqu(ptr[rsp + slot], x);
    narrow_tail_copy(at, slot, esz(a.addr), true);
    at = ptr[rsp + slot];
  }
  switch (dt) {
    case DType::F16: vcvtph2ps(d, at); return;
    case DType::BF16:
      vpmovzxwd(d, at);
      vpslld(d, d, 16);
      return;
    case DType::U8:
      vpmovzxbd(d, at);
      vcvtdq2ps(d, d);
      return;
    case DType::I8:
      vpmovsxbd(d, at);
      vcvtdq2ps(d, d);
      return;
    case DType::Bool:  // bytes to lane masks: any nonzero byte is true
      vpmovzxbd(d, at);
      vpcmpgtd(d, d, cstu(0));
      return;
    default: throw DeclineError("xbyak: internal: narrow load of " + std::string(dtype_name(dt)));
  }
}

// Stores v (f32 lanes already holding values of the stream's type: the store's value is a
// narrowing cast or a narrow load) into narrow stream a.addr: its vector, or lane 0 (`scalar`).
template <class Vmm>
void Gen<Vmm>::narrow_store(const Access& a, const Vmm& v, bool scalar, bool masked) {
  if constexpr (Z) throw Avx2OnlyError("xbyak: narrow streams on AVX-512");
  const DType dt = p_.addrs[static_cast<size_t>(a.addr)].dtype;
  const Xbyak::Xmm t(kAccTmp);  // (free here: accumulate() uses it after the stores)
  const int size = esz(a.addr);
  if (dt == DType::U8 || dt == DType::I8 || dt == DType::Bool) {
    // The lanes hold integers in the type's range (a bool's mask: its sign bit, 0 or 1), so the
    // saturating packs are exact: dwords to words (per 128-bit lane), the two lanes' low
    // quadwords together, words to bytes.
    if (dt == DType::Bool) vpsrld(Vmm(kAccTmp), v, 31);
    else vcvtps2dq(Vmm(kAccTmp), v);
    vpackssdw(Vmm(kAccTmp), Vmm(kAccTmp), Vmm(kAccTmp));
    vpermq(Vmm(kAccTmp), Vmm(kAccTmp), 0x08);
    if (dt != DType::I8) vpackuswb(t, t, t);
    else vpacksswb(t, t, t);
  } else if (dt == DType::F16) {
    vcvtps2ph(t, v, 0);  // (exact: v holds f16 values)
  } else if (dt == DType::BF16) {
    vpsrld(Vmm(kAccTmp), v, 16);  // (exact: v's low halves are zero)
    vpackusdw(Vmm(kAccTmp), Vmm(kAccTmp), Vmm(kAccTmp));
    vpermq(Vmm(kAccTmp), Vmm(kAccTmp), 0x08);  // 128-bit lanes' low quadwords together
  } else {
    throw DeclineError("xbyak: internal: narrow store of " + std::string(dtype_name(dt)));
  }
  if (scalar) {
    vmovd(edx, t);
    if (size == 1) mov(byte[stream(a.addr)], dl);
    else mov(word[stream(a.addr)], dx);
    return;
  }
  const Reg64 b = stream(a.addr);
  if (!masked) {
    if (size == 1) vmovq(elem(b, a.addr), t);
    else vmovdqu(elem(b, a.addr), t);
    return;
  }
  const int slot = vslot_off(new_vslot());
  vmovdqu(ptr[rsp + slot], t);
  narrow_tail_copy(elem(b, a.addr), slot, size, false);
}

// d = a (f32) cast to a narrow type, kept in f32 lanes: f16 or bf16 rounded (t: two scratch
// registers, bf16), u8 or i8 truncated toward zero to i32 (NaN and out of range: INT32_MIN, as
// vcvttps2dq gives) and wrapped to 8 bits, the rule of lib/api/tensor.cpp's convert_one.
template <class Vmm>
void Gen<Vmm>::narrow_round(DType to, const Vmm& d, const Vmm& a, const Vmm* t) {
  if constexpr (Z) throw Avx2OnlyError("xbyak: narrow rounding on AVX-512");
  if (to == DType::U8 || to == DType::I8) {
    vcvttps2dq(d, a);
    vpslld(d, d, 24);
    if (to == DType::U8) vpsrld(d, d, 24);
    else vpsrad(d, d, 24);
    vcvtdq2ps(d, d);
    return;
  }
  if (to == DType::F16) {
    vcvtps2ph(Xbyak::Xmm(d.getIdx()), a, 0);
    vcvtph2ps(d, Xbyak::Xmm(d.getIdx()));
    return;
  }
  // bits + 0x7fff + (bit 16), low half cleared (a carry into the exponent rounds up to inf);
  // NaN: the bits with the quiet bit set, truncated
  vpsrld(t[0], a, 16);
  vpand(t[0], t[0], cstu(1));
  vpaddd(t[0], t[0], a);
  vpaddd(t[0], t[0], cstu(0x7fff));
  vcmpps(t[1], a, a, 3);  // unordered: NaN lanes
  vpor(d, a, cstu(0x00400000));
  vblendvps(d, t[0], d, t[1]);
  vpand(d, d, cstu(0xffff0000u));
}

#define KFUSE_XB_NARROW_MEMBERS(V)                                         \
  template void Gen<V>::narrow_tail_copy(const Address&, int, int, bool);  \
  template void Gen<V>::narrow_load(const V&, const Access&, bool, bool);  \
  template void Gen<V>::narrow_store(const Access&, const V&, bool, bool); \
  template void Gen<V>::narrow_round(DType, const V&, const V&, const V*);
KFUSE_XB_NARROW_MEMBERS(Xbyak::Zmm)
KFUSE_XB_NARROW_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_NARROW_MEMBERS

}  // namespace kfuse::detail::xb
