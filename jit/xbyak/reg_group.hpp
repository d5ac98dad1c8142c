// xbyak backend: the math injectors (injectors.hpp) over a group of registers, for the
// interleaved copies of a loop body (Gen::interleave).
//
// Injectors<GroupHost<Gen>, RegGroup> runs the same injector code as Injectors<Gen, Vmm>, but each
// instruction it asks for is emitted once per register of the group before the next one: U
// copies of exp or gelu then proceed side by side, each instruction's U issues independent, where
// one copy after the other leaves the out-of-order window a single dependent chain. Operands that
// are not groups (constants, immediates, predicates) are the same for every copy.
// AVX2 only: the AVX-512 paths of the injectors use the opmask registers k2/k3 as scratch, which
// interleaved copies would share.
#pragma once
#include <xbyak/xbyak.h>

namespace kfuse::detail::xb {

inline constexpr int kMaxGroup = 4;

/// U vector registers used as one value by the injectors.
struct RegGroup {
  Xbyak::Ymm r[kMaxGroup];
};

template <class Host>
struct GroupHost {
  Host& h;
  int n;  ///< registers per group in use

  static const Xbyak::Ymm& pick(const RegGroup& g, int j) { return g.r[j]; }
  template <class T>
  static const T& pick(const T& x, int) {
    return x;
  }

  auto cst(float v) { return h.cst(v); }
  auto cstu(uint32_t bits) { return h.cstu(bits); }
  template <class... A>
  void select(const A&... a) {
    for (int j = 0; j < n; ++j) h.select(pick(a, j)...);
  }

#define KFUSE_XB_GROUP_OP(name)                        \
  template <class... A>                                \
  void name(const A&... a) {                           \
    for (int j = 0; j < n; ++j) h.name(pick(a, j)...); \
  }
  KFUSE_XB_GROUP_OP(vmovups)
  KFUSE_XB_GROUP_OP(vmovaps)
  KFUSE_XB_GROUP_OP(vaddps)
  KFUSE_XB_GROUP_OP(vsubps)
  KFUSE_XB_GROUP_OP(vmulps)
  KFUSE_XB_GROUP_OP(vdivps)
  KFUSE_XB_GROUP_OP(vminps)
  KFUSE_XB_GROUP_OP(vmaxps)
  KFUSE_XB_GROUP_OP(vandps)
  KFUSE_XB_GROUP_OP(vandnps)
  KFUSE_XB_GROUP_OP(vorps)
  KFUSE_XB_GROUP_OP(vxorps)
  KFUSE_XB_GROUP_OP(vcmpps)
  KFUSE_XB_GROUP_OP(vroundps)
  KFUSE_XB_GROUP_OP(vfmadd213ps)
  KFUSE_XB_GROUP_OP(vfmadd231ps)
  KFUSE_XB_GROUP_OP(vfnmadd213ps)
  KFUSE_XB_GROUP_OP(vfnmadd231ps)
  KFUSE_XB_GROUP_OP(vfmsub213ps)
  KFUSE_XB_GROUP_OP(vcvtps2dq)
  KFUSE_XB_GROUP_OP(vcvtdq2ps)
  KFUSE_XB_GROUP_OP(vpaddd)
  KFUSE_XB_GROUP_OP(vpsubd)
  KFUSE_XB_GROUP_OP(vpslld)
  KFUSE_XB_GROUP_OP(vpsrld)
  KFUSE_XB_GROUP_OP(vpsrad)
#undef KFUSE_XB_GROUP_OP
};

}  // namespace kfuse::detail::xb
