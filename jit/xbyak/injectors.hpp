// Vector math injectors of the xbyak backend, written once for both register widths
// (Xbyak::Zmm with opmask registers, Xbyak::Ymm with blend masks).
//
// Convention: every injector works IN PLACE on `x` (input and result) and clobbers only the
// scratch registers t[0..n) it is given (never aliasing `x`); the number each needs is in
// scratch_count() of xbyak_backend.hpp. Constants come from lib/ir/math_constants.hpp through the
// host's constant table (Host::cst, RIP-relative). Opmask registers k2/k3 are scratch.
// Measured ULP bounds: README "xbyak backend" and tests/backends/test_xbyak_math.cpp.
#pragma once
#include <xbyak/xbyak.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ir/math_constants.hpp"
#include "kfuse/op.hpp"

namespace kfuse::detail::xb {

// vcmpps predicates
enum Cmp : uint8_t {
  kEqOQ = 0x00,
  kLtOS = 0x01,
  kLeOS = 0x02,
  kUnordQ = 0x03,
  kNeqUQ = 0x04,
  kNgeUS = 0x09,
  kGeOS = 0x0D,
  kGtOS = 0x0E,
  kLtOQ = 0x11,
  kGeOQ = 0x1D,
  kNleUQ = 0x16,
};

/// Host: a CodeGenerator-derived emitter with
///   Xbyak::Address cst(float) / cstu(uint32_t): a full vector of one constant;
///   select(dst, a, b, pred, v, tmp): dst = (a pred b) ? v : dst (lane-wise; tmp: AVX2 scratch).
template <class Host, class Vmm>
struct Injectors {
  Host& h;
  static constexpr bool Z = std::is_same_v<Vmm, Xbyak::Zmm>;

  void vand(const Vmm& d, const Vmm& a, const Xbyak::Operand& b) {
    if constexpr (Z) h.vpandd(d, a, b);
    else h.vandps(d, a, b);
  }
  void vor(const Vmm& d, const Vmm& a, const Xbyak::Operand& b) {
    if constexpr (Z) h.vpord(d, a, b);
    else h.vorps(d, a, b);
  }
  void vxor(const Vmm& d, const Vmm& a, const Xbyak::Operand& b) {
    if constexpr (Z) h.vpxord(d, a, b);
    else h.vxorps(d, a, b);
  }
  void round(const Vmm& d, const Vmm& s, int mode) {  // 0 nearest-even, 1 floor, 2 ceil, 3 trunc
    if constexpr (Z) h.vrndscaleps(d, s, mode | 8);
    else h.vroundps(d, s, mode | 8);
  }
  // x = min(max(x, lo), hi), NaN kept (x is the second source of min/max)
  void clamp(const Vmm& x, float lo, float hi, const Vmm& t) {
    h.vmovups(t, h.cst(hi));
    h.vminps(x, t, x);
    h.vmovups(t, h.cst(lo));
    h.vmaxps(x, t, x);
  }
  // p = c[0] x^(n-1) + ... + c[n-1]
  void horner(const Vmm& p, const Vmm& x, const float* c, int n) {
    h.vmovups(p, h.cst(c[0]));
    for (int i = 1; i < n; ++i) h.vfmadd213ps(p, x, h.cst(c[i]));
  }

  // p = P(x), q = Q(x) (horner), their steps alternated: two independent FMA chains in flight
  // instead of one after the other (the out-of-order window holds only a few dozen waiting ops)
  void horner2(const Vmm& p, const float* cp, int np, const Vmm& q, const float* cq, int nq, const Vmm& x) {
    h.vmovups(p, h.cst(cp[0]));
    h.vmovups(q, h.cst(cq[0]));
    for (int i = 1; i < std::max(np, nq); ++i) {
      if (i < np) h.vfmadd213ps(p, x, h.cst(cp[i]));
      if (i < nq) h.vfmadd213ps(q, x, h.cst(cq[i]));
    }
  }

  // r = 1/d for finite non-zero d (d is clobbered). AVX-512: the 14-bit estimate and one Newton
  // step (error < 1 ulp beyond the rounding), a fraction of the cost of vdivps on a zmm
  // register, which bounds the throughput of the sigmoid/tanh/gelu chains; AVX2: vdivps (ymm
  // division is cheaper, and vrcpps has only 12 bits).
  void recip(const Vmm& r, const Vmm& d) {
    if constexpr (Z) {
      h.vrcp14ps(r, d);
      h.vfnmadd213ps(d, r, h.cst(1.0f));  // e = 1 - d r
      h.vfmadd231ps(r, r, d);             // r + r e
    } else {
      h.vmovups(r, h.cst(1.0f));
      h.vdivps(r, r, d);
    }
  }

  // r = 2^n * exp(r), n integral float; scratch t (n clobbered)
  void exp_finish(const Vmm& r, const Vmm& n, const Vmm& t) {
    using namespace kfuse::ir::mathc;
    horner(t, r, kExpP, 5);
    h.vfmadd213ps(t, r, h.cst(1.0f));  // 1 + r P
    h.vfmadd213ps(r, t, h.cst(1.0f));  // 1 + r (1 + r P)
    if constexpr (Z) {                 // r * 2^n in one rounding, as the two exact-then-rounding products below
      h.vscalefps(r, r, n);
      return;
    }
    h.vcvtps2dq(n, n);
    h.vpsrad(t, n, 1);
    h.vpsubd(n, n, t);
    h.vpaddd(t, t, h.cstu(127));
    h.vpslld(t, t, 23);
    h.vmulps(r, r, t);
    h.vpaddd(n, n, h.cstu(127));
    h.vpslld(n, n, 23);
    h.vmulps(r, r, n);
  }
  // 2 scratch. nonpositive: the caller guarantees x <= 0 or NaN (only the lower clamp is needed).
  // lo: the lower clamp (kExpLo; flush_tiny raises it, see there)
  void exp(const Vmm& x, const Vmm* t, bool nonpositive = false, float lo = kfuse::ir::mathc::kExpLo) {
    using namespace kfuse::ir::mathc;
    if constexpr (!Z) {
      if (nonpositive) return exp_nonpositive_avx2(x, t, lo);
    }
    if (nonpositive) {
      h.vmovups(t[0], h.cst(lo));
      h.vmaxps(x, t[0], x);
    } else {
      clamp(x, lo, kExpHi, t[0]);
    }
    // n = round(x log2e) in one rounding: x log2e + 1.5*2^23 rounds to an integer (the sum's ulp
    // is 1), and subtracting the magic gives n exactly. Two vector ops, where a product and
    // vrndscaleps/vroundps take three (the rounding is two on Intel), and a shorter latency.
    constexpr float kMagic = 0x1.8p23f;
    h.vmovups(t[0], h.cst(kMagic));
    h.vfmadd231ps(t[0], x, h.cst(kLog2e));
    h.vsubps(t[0], t[0], h.cst(kMagic));
    h.vfnmadd231ps(x, t[0], h.cst(kLn2Hi));
    h.vfnmadd231ps(x, t[0], h.cst(kLn2Lo));
    exp_finish(x, t[0], t[1]);
  }
  // exp of x <= 0 on AVX2 in 4 integer/FP ops fewer than exp_finish's two-step 2^n: n lies in
  // [-150, 0], so 2^(n+64) is a normal float built from n's bits, and the polynomial carries the
  // 2^-64 in its coefficients (exact power-of-two scaling: every intermediate stays normal). The
  // product p * 2^(n+64) rounds once, as exp_finish's exact-then-rounding pair does: same bits.
  // n comes from adding 1.5*2^23 + 191 to x*log2e (round to nearest even, as vroundps, with the
  // biased exponent n+191 in the low mantissa bits), which also replaces the float-to-int convert.
  void exp_nonpositive_avx2(const Vmm& x, const Vmm* t, float lo) {
    using namespace kfuse::ir::mathc;
    constexpr float kScale = 0x1p-64f;
    constexpr float kMagic = 0x1.8p23f + 191.0f;  // 191 = 127 + 64
    h.vmovups(t[0], h.cst(lo));
    h.vmaxps(x, t[0], x);
    h.vmulps(t[0], x, h.cst(kLog2e));
    h.vaddps(t[0], t[0], h.cst(kMagic));  // bits: 0x4B400000 + n + 191
    h.vsubps(t[1], t[0], h.cst(kMagic));  // n (exact)
    h.vfnmadd231ps(x, t[1], h.cst(kLn2Hi));
    h.vfnmadd231ps(x, t[1], h.cst(kLn2Lo));
    h.vmovups(t[1], h.cst(kExpP[0] * kScale));
    for (int i = 1; i < 5; ++i) h.vfmadd213ps(t[1], x, h.cst(kExpP[i] * kScale));
    h.vfmadd213ps(t[1], x, h.cst(kScale));  // 2^-64 (1 + r P)
    h.vfmadd213ps(x, t[1], h.cst(kScale));  // 2^-64 (1 + r (1 + r P))
    h.vpslld(t[0], t[0], 23);               // 2^(n+64): the magic's own bits shift out
    h.vmulps(x, x, t[0]);
  }
  void exp2(const Vmm& x, const Vmm* t) {  // 2 scratch
    using namespace kfuse::ir::mathc;
    clamp(x, kExp2Lo, kExp2Hi, t[0]);
    round(t[0], x, 0);
    h.vsubps(x, x, t[0]);  // exact
    h.vmulps(x, x, h.cst(kLn2));
    exp_finish(x, t[0], t[1]);
  }
  void log(const Vmm& x, const Vmm* t) {  // 4 scratch
    using namespace kfuse::ir::mathc;
    const Vmm &e = t[0], &a = t[1], &b = t[2], &orig = t[3];
    h.vmovups(orig, x);
    // subnormal inputs: x * 2^23, exponent - 23
    h.vxorps(b, b, b);
    h.vmulps(a, x, h.cst(kTwo23));
    h.select(x, orig, h.cst(kMinNormal), kLtOQ, a, e);
    h.select(b, orig, h.cst(kMinNormal), kLtOQ, h.cst(23.0f), e);
    h.vpsrld(e, x, 23);
    h.vpsubd(e, e, h.cstu(126));
    h.vcvtdq2ps(e, e);
    h.vsubps(e, e, b);
    vand(x, x, h.cstu(0x807fffffu));
    vor(x, x, h.cstu(0x3f000000u));  // m in [0.5, 1)
    // m < sqrt(1/2): e -= 1, f = 2m - 1; else f = m - 1 (both exact)
    h.vmovups(a, x);
    h.vsubps(x, x, h.cst(1.0f));
    if constexpr (Z) {
      h.vcmpps(h.k3, a, h.cst(kSqrtHalf), kLtOQ);
      h.vaddps(x | h.k3, x, a);
      h.vsubps(e | h.k3, e, h.cst(1.0f));
    } else {
      h.vcmpps(b, a, h.cst(kSqrtHalf), kLtOQ);
      h.vandps(a, a, b);
      h.vaddps(x, x, a);
      h.vandps(b, b, h.cst(1.0f));
      h.vsubps(e, e, b);
    }
    h.vmulps(a, x, x);  // z
    horner(b, x, kLogP, 9);
    h.vmulps(b, b, a);
    h.vmulps(b, b, x);  // f z P
    h.vfmadd231ps(b, e, h.cst(kLn2Lo));
    h.vfnmadd231ps(b, a, h.cst(0.5f));
    h.vaddps(x, x, b);
    h.vfmadd231ps(x, e, h.cst(kLn2Hi));
    // specials: 0 -> -inf; < 0 or NaN -> NaN; +inf -> +inf
    h.vxorps(e, e, e);
    h.select(x, orig, e, kEqOQ, h.cst(-INFINITY), a);
    h.select(x, orig, e, kNgeUS, h.cst(NAN), a);
    h.select(x, orig, h.cst(INFINITY), kEqOQ, h.cst(INFINITY), a);
  }
  // x * P(s) / Q(s), s = x^2 on x clamped to +-kTanhClamp (math_constants.hpp). 3 scratch
  void tanh(const Vmm& x, const Vmm* t) {
    using namespace kfuse::ir::mathc;
    clamp(x, -kTanhClamp, kTanhClamp, t[0]);
    h.vmulps(t[0], x, x);
    horner2(t[1], kTanhP, 5, t[2], kTanhQ, 5, t[0]);
    h.vmulps(x, x, t[1]);
    recip(t[0], t[2]);  // Q in [1, 446]: finite, non-zero
    h.vmulps(x, x, t[0]);
  }
  // exp(x) for a caller that multiplies it by at most |x|: 0 below kExpNormalLo instead of a
  // subnormal (math_constants.hpp). `m`: scratch for the mask. Lanes at or above the bound keep
  // exp's bits, NaN stays NaN.
  void exp_flush_tiny(const Vmm& x, const Vmm* t, bool nonpositive, const Vmm& m,
                      float lo = kfuse::ir::mathc::kExpNormalLo) {
    if constexpr (Z) {
      h.vcmpps(h.k2, x, h.cst(lo), kLtOQ);
      exp(x, t, nonpositive, lo);
      h.vpxord(x | h.k2, x, x);
    } else {
      h.vcmpps(m, x, h.cst(lo), kLtOQ);
      exp(x, t, nonpositive, lo);
      h.vandnps(x, m, x);
    }
  }
  // flush_tiny: for silu and gelu (x * sigmoid): exp_flush_tiny
  void sigmoid(const Vmm& x, const Vmm* t, bool flush_tiny = false) {  // 4 scratch
    const Vmm &orig = t[2], &s = t[3];
    h.vmovups(orig, x);
    vor(x, x, h.cstu(0x80000000u));  // -|x|
    if (flush_tiny) exp_flush_tiny(x, t, true, s);
    else exp(x, t, true);  // e = exp(-|x|)
    h.vaddps(t[1], x, h.cst(1.0f));
    recip(s, t[1]);     // 1/(1+e), 1+e in [1, 2]
    if constexpr (Z) {  // x < 0: e/(1+e), one masked product instead of a blend
      h.vcmpps(h.k3, orig, h.cst(0.0f), kLtOQ);
      h.vmulps(s | h.k3, s, x);
      h.vmovaps(x, s);
    } else {
      h.vmulps(x, x, s);  // e/(1+e)
      h.select(x, orig, h.cst(0.0f), kGeOQ, s, t[0]);
    }
  }
  void erf(const Vmm& x, const Vmm* t) {  // 3 scratch
    using namespace kfuse::ir::mathc;
    clamp(x, -kErfClamp, kErfClamp, t[0]);
    h.vmulps(t[0], x, x);
    horner2(t[1], kErfA, 7, t[2], kErfB, 5, t[0]);
    h.vdivps(t[1], t[1], t[2]);
    h.vmulps(x, x, t[1]);  // x * (A/B): no subnormal intermediate for tiny x
  }
  void silu(const Vmm& x, const Vmm* t) {  // 5 scratch
    h.vmovups(t[4], x);
    sigmoid(x, t, true);
    h.vmulps(x, x, t[4]);
  }
  // gelu(x) = x * erfc(-x/sqrt2) / 2 = x * (x <= 0 ? e : 1 - e), e = erfc(|x|/sqrt2) / 2. 6 scratch
  void gelu_erf(const Vmm& x, const Vmm* t) {
    using namespace kfuse::ir::mathc;
    const Vmm &tt = t[2], &c = t[3], &hi = t[4], &orig = t[5];
    h.vmovups(orig, x);
    vand(x, x, h.cstu(0x7fffffffu));
    h.vmulps(x, x, h.cst(kSqrtHalfF));
    h.vmovups(t[0], h.cst(kErfcClamp));
    h.vminps(x, t[0], x);  // a = min(|x|/sqrt2, 10), NaN kept
    h.vmulps(t[1], x, h.cst(0.5f));
    h.vaddps(t[1], t[1], h.cst(1.0f));
    recip(tt, t[1]);            // t = 1/(1 + a/2), 1 + a/2 in [1, 7]
    horner(c, tt, kErfcC, 10);  // C(t)
    h.vmulps(hi, x, x);
    h.vmovups(t[0], x);
    h.vfmsub213ps(t[0], x, hi);  // lo = a*a - hi (exact)
    h.vsubps(c, c, t[0]);
    h.vsubps(c, c, hi);  // -a^2 + C(t)
    exp_flush_tiny(c, t, false, hi, kGeluErfExpLo);
    h.vmulps(c, c, tt);
    h.vmulps(c, c, h.cst(0.5f));  // e
    h.vmovups(x, h.cst(1.0f));
    h.vsubps(x, x, c);
    h.select(x, orig, h.cst(0.0f), kLeOS, c, t[0]);
    h.vmulps(x, x, orig);
  }
  void gelu_tanh(const Vmm& x, const Vmm* t) {  // 5 scratch
    using namespace kfuse::ir::mathc;
    h.vmovups(t[4], x);
    h.vmulps(t[0], x, x);
    h.vmovups(t[1], h.cst(2.0f * kGeluTanhK * kGeluTanhC));
    h.vfmadd213ps(t[1], t[0], h.cst(2.0f * kGeluTanhK));  // 2k (1 + c x^2): one product fewer
    h.vmulps(x, x, t[1]);
    sigmoid(x, t, true);
    h.vmulps(x, x, t[4]);
  }
  // log1p(x) = log(u) * x / (u - 1), u = 1 + x; u == 1 -> x, u == inf -> inf. 5 scratch
  void log1p(const Vmm& x, const Vmm* t) {
    h.vmovups(t[4], x);
    h.vaddps(x, x, h.cst(1.0f));
    log(x, t);  // leaves u in t[3]
    h.vsubps(t[0], t[3], h.cst(1.0f));
    h.vdivps(t[0], t[4], t[0]);
    h.vmulps(x, x, t[0]);
    h.select(x, t[3], h.cst(1.0f), kEqOQ, t[4], t[1]);
    h.select(x, t[3], h.cst(INFINITY), kEqOQ, h.cst(INFINITY), t[1]);
  }
  // expm1(x) = (u - 1) * (x / log(u)), u = exp(x); u == 1 -> x, x < -18 -> -1, u == inf -> inf.
  // 6 scratch
  void expm1(const Vmm& x, const Vmm* t) {
    h.vmovups(t[5], x);
    exp(x, t);
    h.vmovups(t[4], x);
    log(x, t);
    h.vdivps(x, t[5], x);  // x / log(u) (~1: no overflow near the top)
    h.vsubps(t[0], t[4], h.cst(1.0f));
    h.vmulps(x, x, t[0]);
    h.select(x, t[4], h.cst(1.0f), kEqOQ, t[5], t[1]);
    h.select(x, t[5], h.cst(kfuse::ir::mathc::kExpm1MinusOne), kLtOQ, h.cst(-1.0f), t[1]);
    h.select(x, t[4], h.cst(INFINITY), kEqOQ, h.cst(INFINITY), t[1]);
  }
};

// The unary math functions the injectors compute in many dependent steps (each has a
// scratch_count in xbyak_backend.hpp).
inline bool injector_math_op(Op op) {
  switch (op) {
    case Op::Exp:
    case Op::Exp2:
    case Op::Log:
    case Op::Log2:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Tanh:
    case Op::Sigmoid:
    case Op::Silu:
    case Op::Erf:
    case Op::GeluErf:
    case Op::GeluTanh: return true;
    default: return false;
  }
}

// x = op(x) in place, scratch t, for an injector_math_op: one vector (Injectors<Gen, Vmm>) or the
// interleaved copies of a register group (reg_group.hpp). `exp_nonpositive`: Exp's argument is
// <= 0 or NaN (see Injectors::exp).
template <class Inj, class V>
void apply_math(Inj& inj, Op op, const V& x, const V* t, bool exp_nonpositive) {
  switch (op) {
    case Op::Exp: inj.exp(x, t, exp_nonpositive); return;
    case Op::Exp2: inj.exp2(x, t); return;
    case Op::Log: inj.log(x, t); return;
    case Op::Log2:
      inj.log(x, t);
      inj.h.vmulps(x, x, inj.h.cst(1.44269504088896341f));
      return;
    case Op::Log1p: inj.log1p(x, t); return;
    case Op::Expm1: inj.expm1(x, t); return;
    case Op::Tanh: inj.tanh(x, t); return;
    case Op::Sigmoid: inj.sigmoid(x, t); return;
    case Op::Silu: inj.silu(x, t); return;
    case Op::Erf: inj.erf(x, t); return;
    case Op::GeluErf: inj.gelu_erf(x, t); return;
    case Op::GeluTanh: inj.gelu_tanh(x, t); return;
    default: return;
  }
}

}  // namespace kfuse::detail::xb
