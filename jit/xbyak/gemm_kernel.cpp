// xbyak backend: the GEMM microkernels (gemm.hpp UkrArgs). An MR x NR tile of C lives in
// MR * NV vector registers (NV = NR / W) for the whole k loop; per k, NV vectors of B are loaded
// and each row's A value is broadcast and multiplied into its NV accumulators with FMAs. The
// accumulation order of every C element is k ascending from 0, then one add to C: the same
// whatever kernel (packed, direct, edge through a scratch tile) or thread computes the tile.
//
// Register budget: AVX2 (16 ymm) 6 x 16: 12 accumulators, 2 B vectors, 2 broadcasts. AVX-512
// (32 zmm) 14 x 32: 28 accumulators, 2 B vectors, 2 broadcasts. A row's A value is broadcast
// once into a register, not read by each of its FMAs as an embedded-broadcast memory operand:
// that is a load per FMA (30 loads per 28 FMAs), more than the two 512-bit loads a cycle an
// Intel core with two FMA ports can feed (Sapphire Rapids class Xeon, 1 thread: 1024^3 13.96 ->
// 13.2-13.35 ms, 2048^3 116 -> 109 ms; on Zen 4, which runs one zmm FMA a cycle, both forms
// measured the same).
#include <xbyak/xbyak.h>

#include <cstddef>
#include <memory>

#include "exec_memory.hpp"
#include "gemm.hpp"

namespace kfuse::detail::xb {

namespace {

using Xbyak::Reg64;

static_assert(offsetof(UkrArgs, a) == 0 && offsetof(UkrArgs, b) == 8 && offsetof(UkrArgs, c) == 16 &&
                  offsetof(UkrArgs, kc) == 24 && offsetof(UkrArgs, a_rs) == 32 && offsetof(UkrArgs, a_ks) == 40 &&
                  offsetof(UkrArgs, b_ks) == 48 && offsetof(UkrArgs, c_rs) == 56 && offsetof(UkrArgs, accumulate) == 64,
              "UkrArgs layout");

template <class Vmm>
class UkrGen : public Xbyak::CodeGenerator {
 public:
  static constexpr bool Z = std::is_same_v<Vmm, Xbyak::Zmm>;
  static constexpr int W = Z ? 16 : 8;
  static constexpr int VB = W * 4;

  // packed: constant strides (sliver_mr floats of A, sliver_nv vectors of B per k), k unrolled
  // by 4. A packed kernel of fewer rows or vectors than its slivers computes an edge tile of
  // whole vectors straight into C: the first mr rows and nv vectors of full-size slivers.
  UkrGen(uint8_t* buf, size_t size, int mr, int nv, bool packed, int sliver_mr, int sliver_nv)
      : CodeGenerator(size, buf), mr_(mr), nv_(nv) {
    const int smr = packed ? sliver_mr : mr, snv = packed ? sliver_nv : nv;
    const Reg64 bases[] = {rax, r13, r14, r15, rbx};  // A rows 3j .. 3j + 2 (direct)
    const int nbases = (mr + 2) / 3;
    for (const auto& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    mov(rax, qword[rdi + 0]);
    mov(rsi, qword[rdi + 8]);
    mov(rcx, qword[rdi + 24]);
    mov(r9, qword[rdi + 32]);   // a_rs
    mov(r10, qword[rdi + 40]);  // a_ks
    mov(r11, qword[rdi + 48]);  // b_ks
    if (!packed)
      for (int j = 1; j < nbases; ++j) {  // base j = a + 3j * a_rs
        mov(bases[j], bases[j - 1]);
        lea(bases[j], ptr[bases[j] + r9 * 2]);
        add(bases[j], r9);
      }
    // C's tile is read (or written) after the k loop: ask for its lines now, so that the loop
    // hides their latency (first and last element of each row: a row may straddle two lines).
    // The packed AVX-512 tile asks for L2 only: its 28 lines (14 rows) fall into two L1 sets
    // when C's row stride is a multiple of 4 KiB, more than their 8 ways, and the KC-long loop
    // streams A and B through L1 meanwhile, so lines fetched into L1 were evicted before the
    // store read them (Zen 4, 1 thread, 2048^3: 177 -> 166 ms at KC = 128, 159 -> 155 at 512).
    mov(rdx, qword[rdi + 16]);
    mov(r8, qword[rdi + 56]);
    const bool c_to_l2 = packed && Z;
    for (int i = 0; i < mr; ++i) {
      for (int off : {0, nv_ * VB - 4}) {
        if (c_to_l2) prefetcht1(ptr[rdx + off]);
        else prefetcht0(ptr[rdx + off]);
      }
      if (i + 1 < mr) add(rdx, r8);
    }
    for (int i = 0; i < mr * nv_; ++i) vxorps(acc(i), acc(i), acc(i));
    Xbyak::Label tail, tail_top, store;
    auto a_addr = [&](int i, int u) -> Xbyak::Address {
      if (packed) return ptr[rax + (u * smr + i) * 4];
      const Reg64& b = bases[i / 3];
      if (i % 3 == 0) return ptr[b];
      return ptr[b + r9 * (i % 3)];
    };
    auto body = [&](int u) {
      const int boff = packed ? u * snv * VB : 0;
      for (int v = 0; v < nv_; ++v) vmovups(bvec(v), ptr[rsi + boff + v * VB]);
      for (int i = 0; i < mr; ++i) {
        Vmm bc = Vmm(mr * nv_ + nv_ + (i & 1));
        vbroadcastss(bc, a_addr(i, u));
        for (int v = 0; v < nv_; ++v) vfmadd231ps(acc(i * nv_ + v), bvec(v), bc);
      }
    };
    auto advance = [&](int ks) {
      if (packed) {
        add(rax, ks * smr * 4);
        add(rsi, ks * snv * VB);
      } else {
        for (int j = 0; j < nbases; ++j) add(bases[j], r10);
        add(rsi, r11);
      }
    };
    if (packed) {
      mov(rdx, rcx);
      shr(rdx, 2);
      and_(rcx, 3);
      test(rdx, rdx);
      jz(tail, T_NEAR);
      Xbyak::Label top;
      L(top);
      // the A sliver streams from L2 (B's sliver stays in L1): 8 k ahead, two lines per 4 k
      prefetcht0(ptr[rax + 8 * smr * 4]);
      prefetcht0(ptr[rax + 8 * smr * 4 + 64]);
      for (int u = 0; u < 4; ++u) body(u);
      advance(4);
      dec(rdx);
      jnz(top, T_NEAR);
    }
    L(tail);
    test(rcx, rcx);
    jle(store, T_NEAR);
    L(tail_top);
    body(0);
    advance(1);
    dec(rcx);
    jnz(tail_top, T_NEAR);

    L(store);  // C (+)= acc, row by row
    Xbyak::Label overwrite, done;
    mov(rdx, qword[rdi + 16]);
    mov(r8, qword[rdi + 56]);
    cmp(qword[rdi + 64], 0);
    je(overwrite, T_NEAR);
    for (int i = 0; i < mr; ++i) {
      for (int v = 0; v < nv_; ++v) {
        vaddps(acc(i * nv_ + v), acc(i * nv_ + v), ptr[rdx + v * VB]);
        vmovups(ptr[rdx + v * VB], acc(i * nv_ + v));
      }
      add(rdx, r8);
    }
    jmp(done, T_NEAR);
    L(overwrite);
    for (int i = 0; i < mr; ++i) {
      for (int v = 0; v < nv_; ++v) vmovups(ptr[rdx + v * VB], acc(i * nv_ + v));
      add(rdx, r8);
    }
    L(done);
    for (const auto& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    vzeroupper();
    ret();
  }

 private:
  Vmm acc(int i) const { return Vmm(i); }
  Vmm bvec(int v) const { return Vmm(mr_ * nv_ + v); }
  int mr_, nv_;
};

struct UkrSet {
  Ukrs u;
  std::unique_ptr<ExecMem> mem;  // every kernel of the set, one block
};

// The kernels of a set are generated one after another into one reused buffer, their bytes
// appended to one blob that becomes one executable block (the code is position independent:
// relative jumps only). A block per kernel had cost each of AVX-512's 56 kernels a 68 KiB
// zero-filled buffer and an mprotect: the first contraction compiled in a process took 1.2 ms.
template <class Vmm>
class SetBuilder {
 public:
  // Generates a kernel, returns its offset in the blob.
  size_t add(int mr, int nv, bool packed, int sliver_mr, int sliver_nv) {
    UkrGen<Vmm> g(gen_, kBytes, mr, nv, packed, sliver_mr, sliver_nv);
    g.ready();
    const size_t off = (blob_.size() + 63) / 64 * 64;  // (each kernel starts on a cache line)
    blob_.resize(off + g.getSize(), 0xcc);             // (padding: int3)
    std::copy(g.getCode(), g.getCode() + g.getSize(), blob_.begin() + static_cast<std::ptrdiff_t>(off));
    names_.push_back({off, g.getSize(),
                      std::string(packed ? "kfuse_gemm_ukr_packed_" : "kfuse_gemm_ukr_direct_") + std::to_string(mr) +
                          "x" + std::to_string(nv) + (sliver_mr != mr || sliver_nv != nv ? "_edge" : "")});
    return off;
  }
  // The executable block; each kernel named in the perf map.
  std::unique_ptr<ExecMem> finish() {
    auto mem = std::make_unique<ExecMem>(blob_.data(), blob_.size(), "");
    for (const auto& [off, n, name] : names_) perf_map_note(static_cast<const uint8_t*>(mem->entry()) + off, n, name);
    return mem;
  }

 private:
  static constexpr size_t kBytes = 1 << 16;
  // (page-aligned, not zero-filled: xbyak writes what it emits)
  std::unique_ptr<uint8_t[]> raw_{new uint8_t[kBytes + 4096]};
  uint8_t* gen_ = raw_.get() + (4096 - reinterpret_cast<uintptr_t>(raw_.get()) % 4096) % 4096;
  std::vector<uint8_t> blob_;
  struct Name {
    size_t off, n;
    std::string name;
  };
  std::vector<Name> names_;
};

template <class Vmm>
UkrSet* make_set(int mr, int nv) {
  auto* s = new UkrSet;  // kept for the process
  constexpr int W = std::is_same_v<Vmm, Xbyak::Zmm> ? 16 : 8;
  s->u.mr = mr;
  s->u.nr = nv * W;
  s->u.w = W;
  SetBuilder<Vmm> b;
  size_t direct[Ukrs::kMaxMr + 1][Ukrs::kMaxNv + 1], packed[Ukrs::kMaxMr + 1][Ukrs::kMaxNv + 1];
  for (int r = 1; r <= mr; ++r)
    for (int v = 1; v <= nv; ++v) {
      direct[r][v] = b.add(r, v, false, r, v);
      packed[r][v] = b.add(r, v, true, mr, nv);  // (full-size slivers; [mr][nv] is the main kernel)
    }
  s->mem = b.finish();
  const auto* base = static_cast<const uint8_t*>(s->mem->entry());
  auto fn = [&](size_t off) { return reinterpret_cast<UkrFn>(const_cast<uint8_t*>(base + off)); };
  for (int r = 1; r <= mr; ++r)
    for (int v = 1; v <= nv; ++v) {
      s->u.direct_tile[r][v] = fn(direct[r][v]);
      s->u.packed_tile[r][v] = fn(packed[r][v]);
    }
  s->u.direct = s->u.direct_tile[mr][nv];
  s->u.packed = s->u.packed_tile[mr][nv];
  return s;
}

}  // namespace

const Ukrs& gemm_ukrs(Isa isa) {
  if (isa == Isa::Avx512) {
    static const UkrSet* s = make_set<Xbyak::Zmm>(14, 2);
    return s->u;
  }
  static const UkrSet* s = make_set<Xbyak::Ymm>(6, 2);
  return s->u;
}

}  // namespace kfuse::detail::xb
