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
// measured the same). A tile one vector wide (EVEX: AVX-512, and its narrow ymm tails) is the
// exception: each A value feeds one FMA, so the broadcast costs the same load either way, and
// folded into the FMA it saves an instruction per FMA (Zen 4, 1 thread, kfuse_gemm: the 14 x 16
// tile of [14,512]x[512,16] 80-84 -> 111-112 GFLOP/s, 48^3 97 -> 107-108, 80^3 93-105 -> 105-111).
#include <xbyak/xbyak.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec_memory.hpp"
#include "gemm.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail::xb {

namespace {

using Xbyak::Reg64;

static_assert(offsetof(UkrArgs, a) == 0 && offsetof(UkrArgs, b) == 8 && offsetof(UkrArgs, c) == 16 &&
                  offsetof(UkrArgs, kc) == 24 && offsetof(UkrArgs, a_rs) == 32 && offsetof(UkrArgs, a_ks) == 40 &&
                  offsetof(UkrArgs, b_ks) == 48 && offsetof(UkrArgs, c_rs) == 56 &&
                  offsetof(UkrArgs, accumulate) == 64 && offsetof(UkrArgs, tail) == 72 && offsetof(UkrArgs, pf) == 80,
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
  // tail (one vector, nv = 1): only the first UkrArgs::tail columns of C are read and written
  // (an opmask, or AVX2's masked moves), and a direct kernel loads only those of B: C's last
  // part-vector of columns is computed in place, with no scratch tile and no packing.
  // vl (Ymm only): EVEX encoding, for AVX-512's narrow tails: 32 registers and opmasks.
  // dot (packed only, AVX-512): each k step of the slivers is a group of k per 32-bit lane (A:
  // of a row, B: of a column) and one instruction adds the group's products to the lane's
  // accumulator: bf16 pairs into f32 (vdpbf16ps), u8 x i8 quads into i32 (vpdpbusd, whose
  // unsigned operand is A's broadcast: never the embedded broadcast, which is the signed one;
  // C is added as integers). The same registers, loads and loop as the FMA kernels
  // (gemm_pack_groups.hpp packs the groups; UkrArgs::kc counts groups).
  // streaming (direct only): prefetcht1 of UkrArgs::pf's lines, one every two k (the loop
  // unrolled by 2 around it), in rbp.
  // form PackedB (A in place, B packed): A's k step is 4 bytes (UkrArgs::a_ks is not read), so
  // the packed loop's unrolled steps read A at constant offsets too.
  UkrGen(uint8_t* buf, size_t size, int mr, int nv, UkrForm form, int sliver_mr, int sliver_nv, bool tail, bool vl,
         DotKind dot, bool streaming = false)
      : CodeGenerator(size, buf), mr_(mr), nv_(nv), evex_(Z || vl), dot_(dot) {
    const bool a_packed = form == UkrForm::Packed, b_packed = form != UkrForm::Direct;
    const int smr = a_packed ? sliver_mr : mr, snv = b_packed ? sliver_nv : nv;
    const Reg64 bases[] = {rax, r13, r14, r15, rbx};  // A rows 3j .. 3j + 2 (direct)
    const int nbases = (mr + 2) / 3;
    for (const auto& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    if (tail) {  // the mask of the first `tail` lanes: k1 (EVEX), else the sign bits of mask()
      mov(rcx, qword[rdi + 72]);
      if (evex_) {
        mov(edx, 1);
        shl(edx, cl);
        dec(edx);
        kmovw(k1, edx);
      } else {
        mov(rdx, reinterpret_cast<uintptr_t>(kTailMasks + 8));
        neg(rcx);
        vmovups(mask(), ptr[rdx + rcx * 4]);
      }
    }
    mov(rax, qword[rdi + 0]);
    mov(rsi, qword[rdi + 8]);
    mov(rcx, qword[rdi + 24]);
    mov(r9, qword[rdi + 32]);   // a_rs
    mov(r10, qword[rdi + 40]);  // a_ks
    mov(r11, qword[rdi + 48]);  // b_ks
    if (!a_packed)
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
    const bool c_to_l2 = b_packed && Z;
    for (int i = 0; i < mr; ++i) {
      for (int off : {0, nv_ * VB - 4}) {
        if (c_to_l2) prefetcht1(ptr[rdx + off]);
        else prefetcht0(ptr[rdx + off]);
      }
      if (i + 1 < mr) add(rdx, r8);
    }
    for (int i = 0; i < mr * nv_; ++i) vxorps(acc(i), acc(i), acc(i));
    Xbyak::Label k_rest, k_rest_top, store_c;
    auto a_addr = [&](int i, int u) -> Xbyak::Address {  // (u > 0: PackedB, A's k contiguous)
      if (a_packed) return ptr[rax + (u * smr + i) * 4];
      const Reg64& b = bases[i / 3];
      if (i % 3 == 0) return ptr[b + u * 4];
      return ptr[b + r9 * (i % 3) + u * 4];
    };
    auto body = [&](int u) {
      const int boff = b_packed ? u * snv * VB : 0;
      for (int v = 0; v < nv_; ++v) {
        const Xbyak::Address b = ptr[rsi + boff + v * VB];
        if (!tail || b_packed) vmovups(bvec(v), b);  // (packed slivers are zero-padded)
        else if (evex_) vmovups(bvec(v) | k1 | T_z, b);
        else vmaskmovps(bvec(v), mask(), b);
      }
      for (int i = 0; i < mr; ++i) {
        if (evex_ && nv_ == 1 && dot_ != DotKind::U8S8) {  // (one FMA per A value: its broadcast rides in the FMA)
          madd(acc(i), bvec(0), ptr_b[a_addr(i, u).getRegExp()]);
          continue;
        }
        Vmm bc = Vmm(mr * nv_ + nv_ + (i & 1));
        vbroadcastss(bc, a_addr(i, u));  // (dot: the row's group of k, as one 32-bit lane)
        for (int v = 0; v < nv_; ++v) madd(acc(i * nv_ + v), bvec(v), bc);
      }
    };
    auto advance = [&](int ks) {
      if (a_packed) add(rax, ks * smr * 4);
      else if (b_packed)
        for (int j = 0; j < nbases; ++j) add(bases[j], ks * 4);
      else
        for (int j = 0; j < nbases; ++j) add(bases[j], r10);  // (one k at a time)
      if (b_packed) add(rsi, ks * snv * VB);
      else add(rsi, r11);
    };
    if (b_packed) {
      mov(rdx, rcx);
      shr(rdx, 2);
      and_(rcx, 3);
      test(rdx, rdx);
      jz(k_rest, T_NEAR);
      Xbyak::Label top;
      L(top);
      // the A sliver streams from L2 (B's sliver stays in L1): 8 k ahead, two lines per 4 k
      // (A in place: its rows' streams, which the hardware prefetchers follow)
      if (a_packed) {
        prefetcht0(ptr[rax + 8 * smr * 4]);
        prefetcht0(ptr[rax + 8 * smr * 4 + 64]);
      }
      for (int u = 0; u < 4; ++u) body(u);
      advance(4);
      dec(rdx);
      jnz(top, T_NEAR);
    }
    if (streaming) {
      mov(rbp, qword[rdi + 80]);
      mov(rdx, rcx);
      shr(rdx, 1);
      and_(rcx, 1);
      test(rdx, rdx);
      jz(k_rest, T_NEAR);
      Xbyak::Label top;
      L(top);
      prefetcht1(ptr[rbp]);
      add(rbp, 64);
      body(0);
      advance(1);
      body(0);
      advance(1);
      dec(rdx);
      jnz(top, T_NEAR);
    }
    L(k_rest);
    test(rcx, rcx);
    jle(store_c, T_NEAR);
    L(k_rest_top);
    body(0);
    advance(1);
    dec(rcx);
    jnz(k_rest_top, T_NEAR);

    L(store_c);  // C (+)= acc, row by row
    Xbyak::Label overwrite, done;
    mov(rdx, qword[rdi + 16]);
    mov(r8, qword[rdi + 56]);
    cmp(qword[rdi + 64], 0);
    je(overwrite, T_NEAR);
    for (int i = 0; i < mr; ++i) {
      for (int v = 0; v < nv_; ++v) {
        const Xbyak::Address c = ptr[rdx + v * VB];
        if (tail) {  // (B's registers are free after the loop)
          if (evex_) vmovups(bvec(0) | k1 | T_z, c);
          else vmaskmovps(bvec(0), mask(), c);
          add_c(acc(i * nv_ + v), bvec(0));
        } else {
          add_c(acc(i * nv_ + v), c);
        }
        store(c, acc(i * nv_ + v), tail);
      }
      add(rdx, r8);
    }
    jmp(done, T_NEAR);
    L(overwrite);
    for (int i = 0; i < mr; ++i) {
      for (int v = 0; v < nv_; ++v) store(ptr[rdx + v * VB], acc(i * nv_ + v), tail);
      add(rdx, r8);
    }
    L(done);
    for (const auto& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    vzeroupper();
    ret();
  }

 private:
  // Lanes 0 .. t - 1 of the 8 floats at kTailMasks + 8 - t are all ones (AVX2's masks).
  static constexpr int32_t kTailMasks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  void store(const Xbyak::Address& c, const Vmm& v, bool tail) {
    if (!tail) vmovups(c, v);
    else if (evex_) vmovups(c | k1, v);
    else vmaskmovps(c, mask(), v);
  }
  // acc += b * a (dot: acc += the products of each lane's group; U8S8: a, A's broadcast, is the
  // unsigned operand)
  void madd(const Vmm& acc, const Vmm& b, const Xbyak::Operand& a) {
    if (dot_ == DotKind::Bf16) vdpbf16ps(acc, b, a);
    else if (dot_ == DotKind::U8S8) vpdpbusd(acc, static_cast<const Vmm&>(a), b);
    else vfmadd231ps(acc, b, a);
  }
  // acc += C's value (i32 sums as integers)
  void add_c(const Vmm& acc, const Xbyak::Operand& c) {
    if (dot_ == DotKind::U8S8) vpaddd(acc, acc, c);
    else vaddps(acc, acc, c);
  }
  Vmm acc(int i) const { return Vmm(i); }
  Vmm bvec(int v) const { return Vmm(mr_ * nv_ + v); }
  Vmm mask() const { return Vmm(15); }  // (AVX2 tails: one vector of up to 6 rows leaves it free)
  int mr_, nv_;
  bool evex_;  ///< opmask tails; (Ymm) registers past 15
  DotKind dot_;
};

template <class Vmm>
const void* emit_tile(int mr, int nv, UkrForm form, int sliver_mr, int sliver_nv, bool tail, bool vl, DotKind dot,
                      bool streaming = false) {
  UkrGen<Vmm> g(gemm_gen_buffer(), kGemmGenBytes, mr, nv, form, sliver_mr, sliver_nv, tail, vl, dot, streaming);
  g.ready();
  static const char* const forms[] = {"kfuse_gemm_ukr_direct_", "kfuse_gemm_ukr_packed_", "kfuse_gemm_ukr_packed_b_"};
  const std::string name = std::string(forms[static_cast<int>(form)]) + std::to_string(mr) + "x" + std::to_string(nv) +
                           (sliver_mr != mr || sliver_nv != nv ? "_edge" : "") + (tail ? "_tail" : "") +
                           (vl ? "_ymm" : "") + (streaming ? "_streaming" : "") +
                           (dot == DotKind::Bf16   ? "_bf16"
                            : dot == DotKind::U8S8 ? "_u8s8"
                                                   : "");
  return keep_gemm_code(g.getCode(), g.getSize(), name);
}

template <class Vmm>
const Ukrs& make_ukrs(int mr, int nv, DotKind dot = DotKind::None) {
  auto* u = new Ukrs;
  u->dot = dot;
  u->w = std::is_same_v<Vmm, Xbyak::Zmm> ? 16 : 8;
  u->mr = mr;
  u->nr = nv * u->w;
  u->packed = u->packed_tile(mr, nv);
  if (dot == DotKind::None) u->direct = u->direct_tile(mr, nv);
  return *u;
}

}  // namespace

// Every kernel is generated into one reused buffer, under gemm_gen_mutex, then copied to its own
// executable pages (ExecMem's arena: a memcpy and an mprotect). The buffer is page-aligned and
// not zero-filled (xbyak writes what it emits): a CodeGenerator of its own had cost each kernel a
// 68 KiB zero-filled buffer. The kernels, the buffer and the lock are kept for the process
// (leaked on purpose: contractions held by static objects may run after this TU's statics die).
std::mutex& gemm_gen_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

uint8_t* gemm_gen_buffer() {
  static uint8_t* raw = new uint8_t[kGemmGenBytes + 4096];
  return raw + (4096 - reinterpret_cast<uintptr_t>(raw) % 4096) % 4096;
}

const void* keep_gemm_code(const uint8_t* code, size_t size, const std::string& name) {
  static auto* mems = new std::vector<std::unique_ptr<ExecMem>>;
  mems->push_back(std::make_unique<ExecMem>(code, size, name));
  return mems->back()->entry();
}

UkrFn Ukrs::generate(UkrForm form, int rows, int nv, int kind) const {
  const bool packed_form = form != UkrForm::Direct;  // (B's sliver; A's too when Packed)
  const bool tail = kind == 1 || kind == 2, narrow = kind == 2, streaming = kind == 3;
  if (rows < 1 || rows > mr || nv < 1 || nv > nr / w || (tail && nv != 1) || (narrow && w != 16) ||
      (streaming && packed_form) || (dot != DotKind::None && (form != UkrForm::Packed || w != 16)))
    throw BackendError("xbyak: no GEMM microkernel of " + std::to_string(rows) + " x " + std::to_string(nv) +
                       " vectors (internal error)");
  // A packed kernel of fewer rows or vectors reads full-size slivers (mr floats of A, nr / w
  // vectors of B per k); a direct one reads through strides, its tile's own size.
  // A narrow tail counts its sliver of B in 8-float vectors (twice as many).
  const int smr = form == UkrForm::Packed ? mr : rows, snv = packed_form ? nr / w : nv;
  return generated_once(tiles_[kind][static_cast<int>(form)][rows][nv], [&] {
    return narrow    ? emit_tile<Xbyak::Ymm>(rows, nv, form, smr, 2 * snv, tail, true, dot)
           : w == 16 ? emit_tile<Xbyak::Zmm>(rows, nv, form, smr, snv, tail, false, dot, streaming)
                     : emit_tile<Xbyak::Ymm>(rows, nv, form, smr, snv, tail, false, DotKind::None, streaming);
  });
}

const Ukrs& gemm_ukrs(Isa isa) {
  if (isa == Isa::Avx512) {
    static const Ukrs& u = make_ukrs<Xbyak::Zmm>(14, 2);
    return u;
  }
  static const Ukrs& u = make_ukrs<Xbyak::Ymm>(6, 2);
  return u;
}

const Ukrs& gemm_ukrs_dot(DotKind d) {
  if (d == DotKind::Bf16) {
    static const Ukrs& u = make_ukrs<Xbyak::Zmm>(14, 2, DotKind::Bf16);
    return u;
  }
  if (d != DotKind::U8S8) throw BackendError("xbyak: gemm_ukrs_dot of no dot product (internal error)");
  static const Ukrs& u = make_ukrs<Xbyak::Zmm>(14, 2, DotKind::U8S8);
  return u;
}

}  // namespace kfuse::detail::xb
