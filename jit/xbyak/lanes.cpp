// xbyak backend: rows across lanes (Plan::lanes), the Gen members (gen.hpp) of that strategy.
//
// A row kernel with a short reduce extent C (<= kLaneMaxReduce) runs W rows at a time, lane i
// owning row o+i, with the reduce index unrolled (C evaluations of each phase's DAG): loads are
// gathers (kept in stack slots for the later phases), stores are scatters (AVX-512), per-row
// scalar stores (AVX2) or, for a full group writing contiguous rows, a stack tile written back
// by an in-register transpose. Separate from emitter.cpp because it uses only a narrow part of
// the emitter (see gen.hpp): stack slots, streams, constants, eval/hoist_invariants and the
// accumulator pins; eval calls back lane_load, lane_store and lane_acc for a lane Eval.
#include <algorithm>

#include "gen.hpp"

namespace kfuse::detail::xb {

template <class Vmm>
int64_t Gen<Vmm>::lane_stride(int addr) const {
  return p_.lane_stride.at(p_.addrs.at(addr).base);
}

// The index vectors used by gathers and scatters (RIP-relative, after the constants).
template <class Vmm>
void Gen<Vmm>::lane_tables() {
  align(64);  // (whole-vector reads: emitter.cpp, generate)
  L(lidxtab_);
  for (const auto& v : lidx_)
    for (int i = 0; i < W; ++i) dd(static_cast<uint32_t>(v[i]));
}

// Accumulator `acc` of the sub-group being emitted: one value per lane, left in a slot by the
// phase that reduced it.
template <class Vmm>
void Gen<Vmm>::lane_acc(const Vmm& d, int acc) {
  vmovups(d, ptr[rsp + vslot_off(acc_slot_[lane_sub_].at(acc))]);
}

// Vmm(kMaskReg) = the index vector (0, c, ..., (W-1)c), from the table after the constants.
template <class Vmm>
void Gen<Vmm>::set_lane_index(int64_t c) {
  IndexVector v{};
  for (int i = 0; i < W; ++i) v[i] = static_cast<int32_t>(i * c);
  auto it = std::find(lidx_.begin(), lidx_.end(), v);
  int i = static_cast<int>(it - lidx_.begin());
  if (it == lidx_.end()) lidx_.push_back(v);
  if (cur_idx_ == i) return;
  vmovups(Vmm(kMaskReg), ptr[rip + lidxtab_ + i * VB]);
  cur_idx_ = i;
}

// A full group whose rows are contiguous in the stored buffer (stride reduce_n, coeff 1): the
// outputs go to a stack tile (one vector per r) and are written back by a 16x16 transpose in
// registers (unpck ps/pd within 128-bit lanes, then two vshuff32x4 stages) and one masked
// store of reduce_n floats per row: far cheaper than reduce_n scatters.
template <class Vmm>
bool Gen<Vmm>::tiled_store(const Access& a) const {
  return lane_full_ && lane_tile_ok_ && a.coeff == 1 && lane_stride(a.addr) == p_.reduce_n;
}

template <class Vmm>
void Gen<Vmm>::flush_tiles() {
  if constexpr (Z) {
    const int C = static_cast<int>(p_.reduce_n);
    for (auto [addr, slot] : lane_tile_) {
      const int tile = slot, u = slot + C;  // tile: C slots (column r); u: 16 slots
      auto V = [](int i) { return Xbyak::Zmm(i); };
      // stage A: groups of 4 columns -> u[4k..4k+3]
      for (int k = 0; 4 * k < C; ++k) {
        for (int j = 0; j < 4; ++j)
          if (4 * k + j < C) vmovups(V(j), ptr[rsp + vslot_off(tile + 4 * k + j)]);
        auto in = [&](int j) { return V(4 * k + j < C ? j : 0); };
        vunpcklps(V(4), in(0), in(1));
        vunpckhps(V(5), in(0), in(1));
        vunpcklps(V(6), in(2), in(3));
        vunpckhps(V(7), in(2), in(3));
        vunpcklpd(V(0), V(4), V(6));
        vunpckhpd(V(1), V(4), V(6));
        vunpcklpd(V(2), V(5), V(7));
        vunpckhpd(V(3), V(5), V(7));
        for (int j = 0; j < 4; ++j) vmovups(ptr[rsp + vslot_off(u + 4 * k + j)], V(j));
      }
      // stage B: rows c, c+4, c+8, c+12 from u[c], u[c+4], u[c+8], u[c+12]
      mov(edx, (1 << C) - 1);
      kmovw(k3, edx);
      Reg64 b = stream(addr);
      for (int c = 0; c < 4; ++c) {
        for (int g = 0; g < 4; ++g)
          if (4 * g < C) vmovups(V(g), ptr[rsp + vslot_off(u + c + 4 * g)]);
        auto in = [&](int g) { return V(4 * g < C ? g : 0); };
        vshuff32x4(V(4), in(0), in(1), 0x88);
        vshuff32x4(V(5), in(0), in(1), 0xdd);
        vshuff32x4(V(6), in(2), in(3), 0x88);
        vshuff32x4(V(7), in(2), in(3), 0xdd);
        vshuff32x4(V(8), V(4), V(6), 0x88);   // row c
        vshuff32x4(V(9), V(4), V(6), 0xdd);   // row c + 8
        vshuff32x4(V(10), V(5), V(7), 0x88);  // row c + 4
        vshuff32x4(V(11), V(5), V(7), 0xdd);  // row c + 12
        const int rows[4] = {c, c + 8, c + 4, c + 12};
        for (int q = 0; q < 4; ++q) vmovups(ptr[b + (lane_sub_ * W + rows[q]) * C * 4] | k3, V(8 + q));
      }
    }
  } else {
    // AVX2: an 8x8 transpose per 8 columns (unpck ps, shufps, then vperm2f128 across the
    // 128-bit halves), staged through the u slots so that it needs ymm0..8 only; row q of the
    // group gets its columns with one store per 8. Rows of at least 8 end with the last 8
    // columns, overlapping the previous store (same values); shorter rows use a masked store
    // (vmaskmovps: ~9 ns against 1.6 ns for a plain store on the AMD EPYC).
    const int C = static_cast<int>(p_.reduce_n);
    for (auto [addr, slot] : lane_tile_) {
      const int tile = slot, u = slot + C;
      auto V = [](int i) { return Xbyak::Ymm(i); };
      for (int half = 0; 8 * half < C; ++half) {
        const int c0 = C >= 8 ? std::min(8 * half, C - 8) : 0;          // first column of this store
        const int n = std::min(8, C - c0);                              // columns in it
        auto col = [&](int j) { return tile + c0 + (j < n ? j : 0); };  // extra lanes: not stored
        for (int g = 0; g < 2; ++g) {
          for (int j = 0; j < 4; ++j) vmovups(V(j), ptr[rsp + vslot_off(col(4 * g + j))]);
          vunpcklps(V(4), V(0), V(1));
          vunpckhps(V(5), V(0), V(1));
          vunpcklps(V(6), V(2), V(3));
          vunpckhps(V(7), V(2), V(3));
          vshufps(V(0), V(4), V(6), 0x44);
          vshufps(V(1), V(4), V(6), 0xee);
          vshufps(V(2), V(5), V(7), 0x44);
          vshufps(V(3), V(5), V(7), 0xee);
          for (int j = 0; j < 4; ++j) vmovups(ptr[rsp + vslot_off(u + 4 * g + j)], V(j));
        }
        if (n < 8) vmovups(V(8), ptr[rip + masktab_ + 4 * (8 - n)]);  // first n lanes
        Reg64 b = stream(addr);
        for (int q = 0; q < 4; ++q) {
          vmovups(V(0), ptr[rsp + vslot_off(u + q)]);
          vmovups(V(1), ptr[rsp + vslot_off(u + 4 + q)]);
          vperm2f128(V(2), V(0), V(1), 0x20);  // row q
          vperm2f128(V(3), V(0), V(1), 0x31);  // row q + 4
          for (int h = 0; h < 2; ++h) {
            Address dst = ptr[b + ((lane_sub_ * W + q + 4 * h) * C + c0) * 4];
            if (n < 8) vmaskmovps(dst, V(8), V(2 + h));
            else vmovups(dst, V(2 + h));
          }
        }
      }
    }
  }
  lane_tile_.clear();
}

// Element r of the group's rows: one gather with the index vector (0, c, ..., (W-1)c), kept in a
// stack slot for the later phases (an L1 reload instead of a second gather).
template <class Vmm>
void Gen<Vmm>::lane_load(const Vmm& d, const Access& a) {
  int64_t c = lane_stride(a.addr);
  int disp = (a.coeff ? lane_r_ * 4 : 0) + static_cast<int>(lane_sub_ * W * c * 4);
  for (const auto& g : lane_cache_)
    if (g.sub == lane_sub_ && g.addr == a.addr && g.disp == disp) {
      vmovups(d, ptr[rsp + vslot_off(g.slot)]);
      return;
    }
  Reg64 b = stream(a.addr);
  if (c == 0) {  // the same element for every row (weights indexed by r only, scalars)
    vbroadcastss(d, dword[b + disp]);
    return;
  }
  set_lane_index(c);
  if constexpr (Z) {
    kmovw(k3, k1);
    vpxord(d, d, d);  // masked-off lanes: 0 (and no dependency on the old value)
    vgatherdps(d | k3, ptr[b + Vmm(kMaskReg) * 4 + disp]);
  } else {  // the vector mask is consumed by the gather: a copy of the row mask
    vmovups(Vmm(kAccTmp), ptr[rsp + vslot_off(row_mask_slot_)]);
    vxorps(d, d, d);
    vgatherdps(d, ptr[b + Vmm(kMaskReg) * 4 + disp], Vmm(kAccTmp));
  }
  if (nvslots_ < kMaxVSlots - 48) {
    int slot = new_vslot();
    lane_cache_.push_back({lane_sub_, a.addr, disp, slot});
    vmovups(ptr[rsp + vslot_off(slot)], d);
  }
}

template <class Vmm>
void Gen<Vmm>::lane_store(const Access& a, const Vmm& v) {
  if (tiled_store(a) && lane_tile_.count(a.addr)) {
    vmovups(ptr[rsp + vslot_off(lane_tile_.at(a.addr) + lane_r_)], v);
    return;
  }
  if constexpr (Z) {
    Reg64 b = stream(a.addr);
    set_lane_index(lane_stride(a.addr));
    kmovw(k3, k1);
    int64_t c = lane_stride(a.addr);
    vscatterdps(ptr[b + Vmm(kMaskReg) * 4 + (a.coeff ? lane_r_ * 4 : 0) + static_cast<int>(lane_sub_ * W * c * 4)] | k3,
                v);
  } else {  // AVX2 has no scatter: the vector goes to a stack slot, then one scalar store per row
    const int64_t c = lane_stride(a.addr);
    const int base = (a.coeff ? lane_r_ * 4 : 0) + static_cast<int>(lane_sub_ * W * c * 4);
    if (lane_store_slot_ < 0) lane_store_slot_ = new_vslot();
    vmovups(ptr[rsp + vslot_off(lane_store_slot_)], v);
    Reg64 b = stream(a.addr);
    if (b == rax) {  // rax is needed for the row count below: keep the pointer in rdx
      mov(rdx, rax);
      b = rdx;
    }
    Label done;
    for (int q = 0; q < W; ++q) {
      if (!lane_full_) {  // a last group of fewer than W rows: rows r13 - r12 .. W-1 do not exist
        mov(rax, r13);
        sub(rax, r12);
        cmp(rax, q);
        jle(done, T_NEAR);
      }
      mov(eax, dword[rsp + vslot_off(lane_store_slot_) + 4 * q]);
      mov(dword[b + static_cast<int>(base + q * c * 4)], eax);
    }
    L(done);
  }
}

// Groups of W rows, two at a time (each phase emitted for both groups back to back, so the
// serial parts of one group, e.g. log(sum), overlap the other's); the fewer than 2W rows left
// at the end of a chunk run one group at a time through the masked body (masked gathers,
// scatters or per-row stores), which does the same arithmetic, so a row's result does not
// depend on its group or lane. (A third body for one full group cost a quarter of the emit
// time for a chunk's last group only.)
template <class Vmm>
void Gen<Vmm>::lane_loop() {
  Label top, tail, done;
  mov(r12, qword[rdi + frame_off::row_begin]);
  mov(r13, qword[rdi + frame_off::row_end]);
  L(top);
  mov(rax, r13);
  sub(rax, r12);
  jle(done, T_NEAR);
  cmp(rax, kLaneSubs * W);
  jl(tail, T_NEAR);
  set_row_mask(false);
  lane_body(true, kLaneSubs);
  add(r12, kLaneSubs * W);
  add(qword[rdi + frame_off::idx], kLaneSubs * W);
  jmp(top, T_NEAR);
  L(tail);
  mov(edx, W);
  cmp(rax, rdx);
  cmovg(rax, rdx);  // rows in this group: min(left, W)
  set_row_mask(true);
  lane_body(false, 1);
  add(r12, W);
  add(qword[rdi + frame_off::idx], W);
  jmp(top, T_NEAR);
  L(done);
}

// The rows of a group that exist: all W, or (partial) the first rax. AVX-512: k1; AVX2: a lane
// mask vector in stack slot 0 of the group body (gathers consume a copy of it).
template <class Vmm>
void Gen<Vmm>::set_row_mask(bool partial) {
  if constexpr (Z) {
    if (partial) {
      mov(edx, -1);
      bzhi(edx, edx, eax);
    } else {
      mov(edx, (1 << W) - 1);
    }
    kmovw(k1, edx);
  } else {
    if (partial) {
      lea(rdx, ptr[rip + masktab_ + 32]);
      shl(rax, 2);
      sub(rdx, rax);
      vmovups(Vmm(kAccTmp), ptr[rdx]);
    } else {
      vpcmpeqd(Vmm(kAccTmp), Vmm(kAccTmp), Vmm(kAccTmp));
    }
    vmovups(ptr[rsp + vslot_off(0)], Vmm(kAccTmp));
  }
}

template <class Vmm>
void Gen<Vmm>::lane_body(bool full, int nsub) {
  lane_full_ = full;
  compute_addrs();
  nvslots_ = 0;
  if constexpr (!Z) {
    row_mask_slot_ = new_vslot();  // slot 0, written by set_row_mask
    lane_store_slot_ = new_vslot();
  }
  lane_cache_.clear();
  cur_idx_ = -1;
  for (int sub = 0; sub < nsub; ++sub) {
    acc_slot_[sub].assign(k_.accs.size(), -1);
    for (size_t a = 0; a < k_.accs.size(); ++a) acc_slot_[sub][a] = new_vslot();
  }
  if (!Z && full) lane_block_loads(nsub);
  for (size_t ph = 0; ph < k_.phases.size(); ++ph)
    for (lane_sub_ = 0; lane_sub_ < nsub; ++lane_sub_) lane_phase(ph);
  lane_sub_ = 0;
}

// AVX2, full groups of rows at least 8 long: the element-r vectors of each contiguous input are
// made by 8x8 in-register transposes of the group's rows (8 row loads per 8 columns, the last 8
// columns overlapping the previous ones when C is not a multiple of 8) into the stack slots that
// lane_load reads (lane_cache_), instead of one vgatherdps per r. Same values, so the same bits.
// On the AMD EPYC (README "Performance") a ymm gather costs ~14 ns, this ~24 shuffles per 8 r.
// Runs first in the body, when no vector register holds anything (the row mask is in slot 0).
template <class Vmm>
void Gen<Vmm>::lane_block_loads(int nsub) {
  const int C = static_cast<int>(p_.reduce_n);
  if (C < 8) return;  // (8-wide row loads would read past the group's last row)
  std::vector<int> addrs = contiguous_load_streams();
  addrs.erase(std::remove_if(addrs.begin(), addrs.end(), [&](int a) { return lane_stride(a) == 0; }), addrs.end());
  if (!addrs.empty()) load_ptr_regs();  // (compute_addrs left this group's pointers in their slots)
  auto V = [](int i) { return Xbyak::Ymm(i); };
  for (int addr : addrs)
    for (int sub = 0; sub < nsub; ++sub) {
      if (nvslots_ + C > kMaxVSlots - 48) return;
      const int64_t c = lane_stride(addr);
      const int first = nvslots_;
      for (int r = 0; r < C; ++r) {
        new_vslot();
        lane_cache_.push_back({sub, addr, static_cast<int>(r * 4 + sub * W * c * 4), first + r});
      }
      for (int col0 = 0; col0 < C; col0 += 8) {
        const int col = std::min(col0, C - 8);
        Reg64 b = stream(addr);
        for (int q = 0; q < 8; ++q) vmovups(V(q), ptr[b + static_cast<int>(((sub * W + q) * c + col) * 4)]);
        for (int h = 0; h < 2; ++h) {  // rows 4h..4h+3: unpack pairs, then 4x4 blocks per 128-bit half
          const int o = 4 * h;
          vunpcklps(V(8), V(o), V(o + 1));
          vunpckhps(V(9), V(o), V(o + 1));
          vunpcklps(V(10), V(o + 2), V(o + 3));
          vunpckhps(V(11), V(o + 2), V(o + 3));
          vshufps(V(o), V(8), V(10), 0x44);
          vshufps(V(o + 1), V(8), V(10), 0xee);
          vshufps(V(o + 2), V(9), V(11), 0x44);
          vshufps(V(o + 3), V(9), V(11), 0xee);
        }
        for (int j = 0; j < 4; ++j) {  // column j from rows 0-3 (low halves) and 4-7, and j + 4
          vperm2f128(V(8), V(j), V(4 + j), 0x20);
          vperm2f128(V(9), V(j), V(4 + j), 0x31);
          vmovups(ptr[rsp + vslot_off(first + col + j)], V(8));
          vmovups(ptr[rsp + vslot_off(first + col + j + 4)], V(9));
        }
      }
    }
}

template <class Vmm>
void Gen<Vmm>::lane_phase(size_t ph) {
  const ir::Phase& P = k_.phases[ph];
  std::vector<PhaseItem> items;
  for (size_t s = 0; s < P.stores.size(); ++s) items.push_back({&P.stores[s], p_.stores[ph][s]});
  load_ptr_regs();
  lane_tile_.clear();
  lane_tile_ok_ = P.over_reduce && kAccTmp - acc_regs(P.accs) > (Z ? 12 : 9);  // the transpose uses vmm0..11 / ymm0..8
  if (P.over_reduce)
    for (const auto& it : items)
      if (tiled_store(it.acc) && !lane_tile_.count(it.acc.addr) && nvslots_ + p_.reduce_n + W <= kMaxVSlots - 48) {
        lane_tile_[it.acc.addr] = nvslots_;
        for (int64_t r = 0; r < p_.reduce_n + W; ++r) new_vslot();
      }
  lane_r_ = 0;
  if (!P.over_reduce) {
    Eval ev;
    ev.lanes = true;
    std::vector<const ir::Expr*> roots;
    for (const auto& it : items) roots.push_back(it.store->value.get());
    eval(make_dag(roots, nullptr, items, {}), ev);
    return;
  }
  std::vector<const ir::Expr*> roots;
  for (const auto& it : items) roots.push_back(it.store->value.get());
  for (int a : P.accs) roots.push_back(k_.accs[a].value.get());
  // values that do not depend on r: computed once into slots
  std::unordered_map<const ir::Expr*, int> inv = hoist_invariants(roots, true);
  pin_accs(P.accs);
  const Dag dag = make_dag(roots, &inv, items, P.accs);  // the same DAG for every r
  Eval ev;
  ev.in_loop = true;
  ev.lanes = true;
  for (int64_t r = 0; r < p_.reduce_n; ++r) {
    lane_r_ = static_cast<int>(r);
    eval(dag, ev);
  }
  flush_tiles();
  // per-lane results: a NaN anywhere in the row -> the canonical NaN (as finish_acc)
  for (int a : P.accs) {
    Vmm acc(acc_reg_.at(a));
    ir::AccKind kind = k_.accs[a].kind;
    if (kind == ir::AccKind::Max || kind == ir::AccKind::Min) {
      Vmm nan(acc_nan_.at(a));
      if (kind == ir::AccKind::Max) vmaxps(acc, acc, nan);
      else vminps(acc, acc, nan);
      if constexpr (Z) {
        vcmpps(k2, acc, acc, kUnordQ);
        vmovups(acc | k2, cst(NAN));
      } else {
        vcmpps(Vmm(kAccTmp), acc, acc, kUnordQ);
        vblendvps(acc, acc, cst(NAN), Vmm(kAccTmp));
      }
    }
    vmovups(ptr[rsp + vslot_off(acc_slot_[lane_sub_].at(a))], acc);
  }
  release_accs();
}

// The entry points called from emitter.cpp (the other members are instantiated through them).
#define KFUSE_XB_LANE_ENTRY_POINTS(V)                        \
  template void Gen<V>::lane_loop();                         \
  template void Gen<V>::lane_tables();                       \
  template void Gen<V>::lane_load(const V&, const Access&);  \
  template void Gen<V>::lane_store(const Access&, const V&); \
  template void Gen<V>::lane_acc(const V&, int);
KFUSE_XB_LANE_ENTRY_POINTS(Xbyak::Zmm)
KFUSE_XB_LANE_ENTRY_POINTS(Xbyak::Ymm)
#undef KFUSE_XB_LANE_ENTRY_POINTS

}  // namespace kfuse::detail::xb
