// xbyak backend: f32 uniform random numbers (kernel-IR Rand, dtype f32), members of Gen (gen.hpp).
// The value of counter i is counter_uniform(seed, i, f32) of lib/core/random.hpp: the top 24 bits
// of mix64(mix64(seed + gamma) ^ i), times 2^-24, so the same bits as the reference and LLVM.
//
// The seed half of the hash is one value per vector, computed in general registers (imul); the
// counter half runs in 64-bit lanes, four per ymm, twice per vector. AVX2 has no 64-bit lane
// multiply: the low 64 bits of x * M are lo(x) lo(M) + (hi(x) lo(M) + lo(x) hi(M)) << 32, three
// vpmuludq (which read the low dword of each qword, so a constant whose dwords all hold lo(M) or
// hi(M) serves). About 50 vector instructions per 8 values. The seed and the counter's base are
// index streams (analyze.cpp); lane l's counter is base + l, plus the inner index when the counter
// moves along the row. randn (f64 Box-Muller) stays on LLVM. The zmm emitter has none of this yet
// (Avx2OnlyError: AVX-512 machines run the AVX2 code).
#include "core/random.hpp"
#include "gen.hpp"

namespace kfuse::detail::xb {

// x = mix64(x) in each 64-bit lane; t, u scratch.
template <class Vmm>
void Gen<Vmm>::mix64_lanes(const Vmm& x, const Vmm& t, const Vmm& u) {
  auto mul = [&](uint64_t m) {  // x = lo64(x * m)
    vpsrlq(t, x, 32);
    vpmuludq(t, t, cstu(static_cast<uint32_t>(m)));
    vpmuludq(u, x, cstu(static_cast<uint32_t>(m >> 32)));
    vpaddq(t, t, u);
    vpsllq(t, t, 32);
    vpmuludq(x, x, cstu(static_cast<uint32_t>(m)));
    vpaddq(x, x, t);
  };
  auto xorshift = [&](int s) {
    vpsrlq(t, x, s);
    vpxor(x, x, t);
  };
  xorshift(30);
  mul(kMixMul1);
  xorshift(27);
  mul(kMixMul2);
  xorshift(31);
}

// d = the vector of uniform values of r; t: three scratch registers. rax, rdx scratch.
template <class Vmm>
void Gen<Vmm>::rand_uniform(const Vmm& d, const RandLeaf& r, const Vmm* t) {
  if constexpr (Z) throw Avx2OnlyError("xbyak: random numbers on AVX-512");
  const Vmm key = t[0], x = t[1], tmp = t[2], u(kAccTmp);
  // key = mix64(seed + gamma), in every lane
  mov(rdx, stream(r.seed_addr));
  mov(rax, kSeedGamma);
  add(rdx, rax);
  auto gpr_xorshift = [&](int s) {
    mov(rax, rdx);
    shr(rax, s);
    xor_(rdx, rax);
  };
  gpr_xorshift(30);
  mov(rax, kMixMul1);
  imul(rdx, rax);
  gpr_xorshift(27);
  mov(rax, kMixMul2);
  imul(rdx, rax);
  gpr_xorshift(31);
  vmovq(Xbyak::Xmm(key.getIdx()), rdx);
  vpbroadcastq(key, Xbyak::Xmm(key.getIdx()));
  // d = the counter base of this vector in every lane
  mov(rdx, stream(r.counter_addr));
  if (r.coeff) {
    add(rdx, r14);
    if (disp_ != 0) add(rdx, disp_ / 4);
  }
  vmovq(Xbyak::Xmm(d.getIdx()), rdx);
  vpbroadcastq(d, Xbyak::Xmm(d.getIdx()));
  const Address iota = dry_ ? ptr[rip] : ptr[rip + qiotatab_];  // (no label use in a dry run)
  if (r.coeff) {
    lea(rax, iota);
    vpaddq(x, d, ptr[rax]);       // lanes 0..3
    vpaddq(d, d, ptr[rax + 32]);  // lanes 4..7
  } else {
    vmovdqa(x, d);
  }
  vpxor(x, x, key);
  vpxor(d, d, key);
  mix64_lanes(x, tmp, u);
  mix64_lanes(d, tmp, u);
  vpsrlq(x, x, 40);
  vpsrlq(d, d, 40);
  // the low dwords of the 8 lanes in order: per 128-bit half [x0 x1 d0 d1 | x2 x3 d2 d3], then
  // the quadwords 0, 2, 1, 3
  vshufps(d, x, d, 0x88);
  vpermpd(d, d, 0xd8);
  vcvtdq2ps(d, d);  // (24-bit values: exact)
  vmulps(d, d, cst(0x1p-24f));
}

#define KFUSE_XB_RANDOM_MEMBERS(V)                                 \
  template void Gen<V>::mix64_lanes(const V&, const V&, const V&); \
  template void Gen<V>::rand_uniform(const V&, const RandLeaf&, const V*);
KFUSE_XB_RANDOM_MEMBERS(Xbyak::Zmm)
KFUSE_XB_RANDOM_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_RANDOM_MEMBERS

}  // namespace kfuse::detail::xb
