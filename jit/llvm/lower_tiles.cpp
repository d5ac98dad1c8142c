// Column tiles of the LLVM lowering (Lowerer, lowerer.hpp; which kernels take them and how wide:
// column_tiles.cpp): per-lane accumulator slots, cascade levels in tiles, the generic tile's
// phases, a bag's walk with row prefetches, its register blocks and lane pairs.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"
#include "lowerer.hpp"

namespace kfuse::detail::llvmjit {

// ---- column tiles (plan_.column_tile > 0, see column_tiles.cpp) ----
// Each accumulator's state (value; ArgMax/ArgMin: value, index) lives in stack arrays of one
// slot per lane of the tile, allocated once per call in the entry block. Bool is i8 there.
std::vector<llvm::Type*> Lowerer::state_types(int a) {
  const ir::Accumulator& A = k_.accs[a];
  if (is_arg(A.kind)) return {reg_type(c_, A.value->dtype), b_.getInt64Ty()};
  return {acc_type(a)};
}

void Lowerer::alloc_tile_slots() {
  slots_.assign(k_.accs.size(), {});
  levels_.assign(k_.accs.size(), {});
  auto array = [&](llvm::Type* t, int64_t n) {
    llvm::AllocaInst* p = b_.CreateAlloca(slot_type(t), b_.getInt64(n));
    p->setAlignment(llvm::Align(64));
    return p;
  };
  reg_lanes_ = register_lanes();
  pair_lanes_ = plan_lane_pairs(k_);
  plan_row_block();
  regs_.assign(k_.accs.size(), {});
  rows_.assign(k_.accs.size(), {});
  row_state_.assign(k_.accs.size(), {});
  if (row_pack_) row_packed_ = b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_, b_.getInt64(row_packed_off_));
  for (size_t a = 0; a < k_.accs.size(); ++a) {
    for (llvm::Type* t : state_types(static_cast<int>(a))) {
      slots_[a].push_back(array(t, plan_.column_tile));
      if (reg_lanes_ > 0) regs_[a].push_back(array(t, reg_lanes_));
    }
    if (row_rows_ > 0)  // the sum, then its cascade levels
      for (int l = 0; l <= row_levels(static_cast<int>(a)); ++l) {
        rows_[a].push_back(array(acc_type(static_cast<int>(a)), row_rows_ * row_lanes_));
        if (row_pack_)
          row_state_[a].push_back(b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_, b_.getInt64(row_state_off_[a][l])));
      }
    if (k_.accs[a].kind == ir::AccKind::Sum && is_float(k_.accs[a].dtype))
      for (int l = 0; l < tile_levels(); ++l)
        levels_[a].push_back(array(acc_type(static_cast<int>(a)), plan_.column_tile));
  }
}

int Lowerer::tile_levels() const {
  int l = 0;
  for (int64_t s = tile_leaf(); s < k_.reduce_numel(); s *= kCascadeFan) ++l;
  return l;
}

std::vector<int> Lowerer::tile_cascade_accs(const ir::Phase& ph) const {
  std::vector<int> out;
  if (!cascades(ph) || tile_levels() == 0) return out;
  for (int a : ph.accs)
    if (!levels_[a].empty()) out.push_back(a);
  return out;
}

// The points up to flat reduce position `after` were folded, the last `count` of them by the
// visit just made: close every level whose block ended within them.
void Lowerer::tile_close(const std::vector<int>& cs, Value* w, Value* after, int64_t count, int l) {
  int64_t S = tile_leaf();
  for (int i = 1; i < l; ++i) S *= kCascadeFan;
  Value* crossed = b_.CreateICmpULT(b_.CreateURem(after, b_.getInt64(S)), b_.getInt64(count));
  if_else(
      crossed,
      [&] {
        counted_loop(w, true, {}, [&](Value* j, const Carried&) {
          for (int a : cs) {
            Value* lower = l == 1 ? load_state(a, j).v[0] : b_.CreateLoad(acc_type(a), level_ptr(a, l - 1, j));
            Value* up = b_.CreateLoad(acc_type(a), level_ptr(a, l, j));
            b_.CreateStore(fold(a, up, lower, false), level_ptr(a, l, j));
            if (l == 1) store_state(a, j, init_state(a));
            else b_.CreateStore(identity(a), level_ptr(a, l - 1, j));
          }
          return Carried{};
        });
        if (l < tile_levels()) tile_close(cs, w, after, count, l + 1);
      },
      [] {});
}

AccState Lowerer::load_state(int a, Value* lane, const StateArrays* arrays) {
  const StateArrays& arr = arrays ? *arrays : slots_;
  AccState st;
  std::vector<llvm::Type*> ts = state_types(a);
  for (size_t i = 0; i < ts.size(); ++i) {
    llvm::Type* mt = slot_type(ts[i]);
    Value* v = b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, arr[a][i], lane));
    st.v.push_back(mt == ts[i] ? v : b_.CreateTrunc(v, ts[i]));
  }
  return st;
}

void Lowerer::store_state(int a, Value* lane, const AccState& st, const StateArrays* arrays) {
  const StateArrays& arr = arrays ? *arrays : slots_;
  for (size_t i = 0; i < st.v.size(); ++i) {
    llvm::Type* mt = slot_type(st.v[i]->getType());
    Value* v = mt == st.v[i]->getType() ? st.v[i] : b_.CreateZExt(st.v[i], mt);
    b_.CreateStore(v, b_.CreateInBoundsGEP(mt, arr[a][i], lane));
  }
}

// The points [first, first + len) along the innermost outer dim (one segment of a chunk) as
// tiles of plan_.column_tile lanes; the last tile takes the rest, so tiles never straddle
// segments or thread chunks (and a lane's result never depends on its tile anyway).
void Lowerer::column_segment(ExprEmitter& ex, const std::vector<Value*>& first, Value* len) {
  const int64_t T = plan_.column_tile;
  Value* ntiles = b_.CreateUDiv(b_.CreateAdd(len, b_.getInt64(T - 1), "", true, true), b_.getInt64(T));
  counted_loop(ntiles, true, {}, [&](Value* t, const Carried&) {
    Value* off = b_.CreateMul(t, b_.getInt64(T), "", true, true);
    Value* w = smin(b_.getInt64(T), b_.CreateSub(len, off, "", true, true));
    std::vector<Value*> at = first;
    at.back() = b_.CreateAdd(first.back(), off, "", true, true);
    column_tile(ex, at, w);
    return Carried{};
  });
}

// All phases of the `w` (>= 1) adjacent points starting at `first`: each phase is its usual
// loop nest with a unit-stride lane loop innermost (what the vectoriser widens). A lane folds
// its column's values in row-major reduce order with plain operations (no reassociation: the
// vector lanes are independent columns, nothing needs reordering), so a column's bits do not
// depend on the tile width, where its tile starts, or vector body vs remainder.
void Lowerer::column_tile(ExprEmitter& ex, const std::vector<Value*>& first, Value* w) {
  std::vector<bool> done(k_.accs.size(), false);
  // body(j) for lane j of `blk` at column `col` (null: first.back() + its lane), with the
  // lane's outer indices and finished accumulators bound in `ex`
  auto lane_body = [&](const LaneBlock& blk, Value* j, Value* col, const std::function<void(Value*)>& body) {
    ex.reset();
    Value* lane = blk.base ? b_.CreateAdd(blk.base, j, "", true, true) : j;
    std::vector<Value*> at = first;
    at.back() = col ? col : b_.CreateAdd(first.back(), lane, "", true, true);
    ex.outer = at;
    for (size_t a = 0; a < k_.accs.size(); ++a)
      ex.accs[a] = done[a] ? final_value(static_cast<int>(a), load_state(static_cast<int>(a), lane)) : nullptr;
    body(j);
  };
  // body(j) for the lanes j of `blk` (in pairs when blk.pairs: lane_pairs)
  auto lanes_of = [&](const LaneBlock& blk, const std::function<void(Value*)>& body) {
    if (blk.pairs) {
      lane_pairs(blk, first.back(), [&](Value* j, Value* col) { lane_body(blk, j, col, body); });
      return;
    }
    counted_loop(
        blk.n, true, {},
        [&](Value* j, const Carried&) {
          lane_body(blk, j, nullptr, body);
          return Carried{};
        },
        blk.arrays ? register_lane_loop() : nullptr);
  };
  const LaneBlock all{w, nullptr, nullptr};
  auto lanes = [&](const std::function<void(Value*)>& body) { lanes_of(all, body); };
  for (const ir::Phase& ph : k_.phases) {
    ex.reduce.clear();
    if (!ph.over_reduce) {
      lanes([&](Value*) { run_stores(ph, ex); });
      continue;
    }
    const std::vector<int> cs = tile_cascade_accs(ph);
    lanes([&](Value* j) {
      for (int a : ph.accs) store_state(a, j, init_state(a));
      for (int a : cs)
        for (int l = 1; l <= tile_levels(); ++l) b_.CreateStore(identity(a), level_ptr(a, l, j));
    });
    const size_t nr = k_.dynamic_reduce() ? 1 : k_.reduce.size();
    std::vector<Value*> ridx(nr);
    auto close_after = [&](int64_t count) {  // after the visit of `count` points at ridx
      if (cs.empty()) return;
      Value* flat = b_.getInt64(0);
      for (size_t d = 0; d < nr; ++d) {
        Value* i = d + 1 == nr ? b_.CreateAdd(ridx[d], b_.getInt64(count), "", true, true) : ridx[d];
        flat = b_.CreateAdd(b_.CreateMul(flat, b_.getInt64(k_.reduce[d]), "", true, true), i, "", true, true);
      }
      tile_close(cs, w, flat, count);
    };
    // `count` consecutive points of the innermost reduce dim from ridx[nr - 1] on, in order,
    // with one load and one store of the lane's state (in blk's arrays)
    auto fold_points = [&](int64_t count, const LaneBlock& blk) {
      lanes_of(blk, [&](Value* j) {
        Carried cur;
        for (int a : ph.accs) {
          AccState st = load_state(a, j, blk.arrays);
          cur.insert(cur.end(), st.v.begin(), st.v.end());
        }
        std::vector<Value*> at = ridx;
        for (int64_t u = 0; u < count; ++u) {
          at[nr - 1] = b_.CreateAdd(ridx[nr - 1], b_.getInt64(u), "", true, true);
          cur = reduce_point(ph, ex, at, cur, /*reassoc=*/false);
        }
        size_t pos = 0;
        for (int a : ph.accs) {
          size_t n = state_types(a).size();
          store_state(a, j, {Carried(cur.begin() + pos, cur.begin() + pos + n)}, blk.arrays);
          pos += n;
        }
      });
    };
    std::function<void(size_t)> nest = [&](size_t d) {
      const int64_t ext = k_.reduce[d];
      if (d + 1 == nr) {
        const int64_t u = std::min(ph.accs.empty() ? 1 : kTileRowUnroll, ext);
        if (ext / u > 0)
          counted_loop(b_.getInt64(ext / u), true, {}, [&](Value* iv, const Carried&) {
            ridx[d] = b_.CreateMul(iv, b_.getInt64(u), "", true, true);
            fold_points(u, all);
            close_after(u);
            return Carried{};
          });
        if (ext % u) {
          ridx[d] = b_.getInt64(ext - ext % u);
          fold_points(ext % u, all);
          close_after(ext % u);
        }
        return;
      }
      counted_loop(b_.getInt64(ext), true, {}, [&](Value* iv, const Carried&) {
        ridx[d] = iv;
        nest(d + 1);
        return Carried{};
      });
    };
    if (k_.dynamic_reduce()) tile_segment(ph, ex, first, w, ridx[0], fold_points, lanes_of);
    else nest(0);
    if (!cs.empty())  // each lane's partial takes its levels, lowest first
      lanes([&](Value* j) {
        for (int a : cs) {
          Value* v = load_state(a, j).v[0];
          for (int l = 1; l <= tile_levels(); ++l)
            v = fold(a, v, b_.CreateLoad(acc_type(a), level_ptr(a, l, j)), false);
          store_state(a, j, {{v}});
        }
      });
    for (int a : ph.accs) done[a] = true;
  }
  ex.reduce.clear();
}

// The dynamic reduce phase `ph` of a column tile (a segment kernel: the lanes are columns of
// one bag, whose id range plan_column_tile checked to be lane-invariant): the bag's points in
// order, kTileRowUnroll per visit of a lane (as a compile-time domain), so each id and its
// lane-invariant values (weight, row address, dequantisation scale) are loaded once per tile
// and the lane loop reads the row as vectors. Every point also prefetches the rows of the point
// a few positions ahead (RowPrefetch, prefetch_rows.cpp), in the bags that follow near the end
// of this one. An empty range gives every lane the empty value, as dynamic_phase does.
//
// Register blocks: a tile whose width is a multiple of reg_lanes_ (at most kRegMaxBlocks of
// them: a bag row of D = 64 f32 is one block), or exactly a narrower power of two down to
// kRegMinLanes (D = 16, 32), walks the bag once per block of R lanes
// with the block's states in regs_, arrays of a compile-time length that are only ever
// indexed by constant-trip lane loops: once the vectoriser has widened those loops and the
// unroller flattened them, SROA turns the arrays into vector registers carried across the ids
// (a <8 x float> phi per 8 lanes on AVX2), so a point costs its row loads and the folds, not a
// load and a store of every lane's state. The block copies its states into slots_ at the end,
// and everything after (empty bags, later phases) is the tile's usual code. Each lane still
// folds its column's ids in order with plain operations: the bits are the generic path's.
void Lowerer::tile_segment(const ir::Phase& ph, ExprEmitter& ex, const std::vector<Value*>& first, Value* w,
                           Value*& pos, const std::function<void(int64_t, const LaneBlock&)>& fold_points,
                           const std::function<void(const LaneBlock&, const std::function<void(Value*)>&)>& lanes_of) {
  auto range = [&](const std::vector<Value*>& at) {
    ex.reset();
    ex.reduce.clear();
    ex.outer = at;
    std::pair<Value*, Value*> r{ex.emit(k_.reduce_begin), ex.emit(k_.reduce_end)};
    ex.reset();
    return r;
  };
  Value *lo, *hi;  // (not a structured binding: the lambdas below capture them)
  std::tie(lo, hi) = range(first);
  Value* n = smax(b_.CreateSub(hi, lo), b_.getInt64(0));
  const std::vector<const ir::Expr*> rows = gathered_row_loads(ph, k_);
  // How far the prefetch may run: when the rows' addresses do not read the bag index, up to the
  // last bag's end (the last index of the outer dim before the lanes), through the bags that
  // follow (ir/kernel.hpp: every position below it is in range); else this bag's end. Stopping
  // at the next bag's end left the first rows of the bag after it unfetched (bags of 20-100 ids,
  // 32 or 64 ahead).
  const size_t nd = first.size();
  bool past = nd >= 2;
  for (const ir::Expr* r : rows)
    for (size_t d = 0; d + 1 < nd; ++d)
      past &= !ir::depends_on(r->args[0].get(), ir::Space::Outer, static_cast<int>(d));
  Value* limit = hi;
  if (past) {
    std::vector<Value*> last = first;
    last[nd - 2] = b_.CreateSub(outer_ext_[nd - 2], b_.getInt64(1));
    limit = range(last).second;
  }
  // The bag's points for the lanes of `blk`, `u` per visit of a lane, each with the prefetch of
  // point + pf.ahead().
  auto walk = [&](const LaneBlock& blk, int64_t u) {
    std::vector<Value*> at0 = first;
    if (blk.base) at0.back() = b_.CreateAdd(first.back(), blk.base, "", true, true);
    RowPrefetch pf(b_, ex, rows, at0, blk.n);
    auto prefetch = [&](Value* p) {  // the rows of point p + pf.ahead(), below the limit
      if (pf.empty()) return;
      Value* q = b_.CreateAdd(p, b_.getInt64(pf.ahead()));
      if_else(
          b_.CreateICmpSLT(q, limit), [&] { pf.emit(at0, q); }, [] {});
    };
    Value* steps = b_.CreateUDiv(n, b_.getInt64(u));
    counted_loop(steps, false, {}, [&](Value* iv, const Carried&) {
      pos = b_.CreateAdd(lo, b_.CreateMul(iv, b_.getInt64(u), "", true, true), "", true, true);
      for (int64_t i = 0; i < u; ++i) prefetch(b_.CreateAdd(pos, b_.getInt64(i), "", true, true));
      fold_points(u, blk);
      return Carried{};
    });
    if (u == 1) return;
    Value* tail = b_.CreateAdd(lo, b_.CreateMul(steps, b_.getInt64(u), "", true, true), "", true, true);
    counted_loop(b_.CreateSub(n, b_.CreateMul(steps, b_.getInt64(u))), false, {}, [&](Value* iv, const Carried&) {
      pos = b_.CreateAdd(tail, iv, "", true, true);
      prefetch(pos);
      fold_points(1, blk);
      return Carried{};
    });
  };
  const LaneBlock all{w, nullptr, nullptr};
  const LaneBlock generic{w, nullptr, nullptr, pair_lanes_};
  // Blocks of R lanes: R = reg_lanes_ for widths of 1 to kRegMaxBlocks such blocks, then
  // narrower single blocks (w == R) down to kRegMinLanes, else the generic tile.
  std::function<void(int64_t)> blocks = [&](int64_t R) {
    Value* fits = R == reg_lanes_ ? b_.CreateAnd(b_.CreateICmpEQ(b_.CreateURem(w, b_.getInt64(R)), b_.getInt64(0)),
                                                 b_.CreateICmpULE(w, b_.getInt64(R * kRegMaxBlocks)))
                                  : b_.CreateICmpEQ(w, b_.getInt64(R));
    if_else(
        fits,
        [&] {
          counted_loop(b_.CreateUDiv(w, b_.getInt64(R)), true, {}, [&](Value* i, const Carried&) {
            const LaneBlock blk{b_.getInt64(R), b_.CreateMul(i, b_.getInt64(R), "", true, true), &regs_};
            lanes_of(blk, [&](Value* j) {
              for (int a : ph.accs) store_state(a, j, init_state(a), &regs_);
            });
            walk(blk, kRegRowUnroll);
            lanes_of(blk, [&](Value* j) {
              for (int a : ph.accs) store_state(a, b_.CreateAdd(blk.base, j, "", true, true), load_state(a, j, &regs_));
            });
            return Carried{};
          });
        },
        [&] {
          if (R / 2 >= kRegMinLanes) blocks(R / 2);
          else walk(generic, kTileRowUnroll);
        });
  };
  if (reg_lanes_ > 0 && !ph.accs.empty()) blocks(reg_lanes_);
  else walk(generic, kTileRowUnroll);
  if (ph.accs.empty()) return;
  if_else(
      b_.CreateICmpEQ(n, b_.getInt64(0)),
      [&] {
        lanes_of(all, [&](Value* j) {
          for (int a : ph.accs) {
            AccState st = init_state(a);
            if (!is_arg(k_.accs[a].kind)) st.v[0] = empty_value(a);
            store_state(a, j, st);  // (an Arg state's index is already 0, its empty value)
          }
        });
      },
      [] {});
}

// f(j, column) for the lanes j in [0, blk.n) of a tile starting at column c0 + blk.base, two
// per iteration p (lanes 2p and 2p + 1), then the last one when blk.n is odd. The columns are
// written as 2 * x | bit with x = h + p (+ r) (c0 + base = 2h + r): the udiv by 2 of a
// nibble's byte index then folds to x, which moves by one per iteration whatever the parity.
void Lowerer::lane_pairs(const LaneBlock& blk, Value* c0, const std::function<void(Value*, Value*)>& f) {
  Value* start = blk.base ? b_.CreateAdd(c0, blk.base, "", true, true) : c0;
  Value* h = b_.CreateLShr(start, 1);
  Value* r = b_.CreateAnd(start, 1);
  Value* r1 = b_.CreateXor(r, 1);
  auto col = [&](Value* x, Value* bit) {
    return b_.CreateAdd(b_.CreateShl(x, 1, "", true, true), bit, "", true, true);  // (bit < 2: an or)
  };
  counted_loop(b_.CreateLShr(blk.n, 1), false, {}, [&](Value* p, const Carried&) {  // (none for 1 lane)
    Value* x = b_.CreateAdd(h, p, "", true, true);
    Value* j = b_.CreateShl(p, 1, "", true, true);
    f(j, col(x, r));
    f(b_.CreateAdd(j, b_.getInt64(1), "", true, true), col(b_.CreateAdd(x, r, "", true, true), r1));
    return Carried{};
  });
  if_else(
      b_.CreateICmpNE(b_.CreateAnd(blk.n, 1), b_.getInt64(0)),
      [&] {
        Value* j = b_.CreateSub(blk.n, b_.getInt64(1), "", true, true);
        f(j, b_.CreateAdd(start, j, "", true, true));
      },
      [] {});
}

// The register blocks' lane loops vectorise at the full vector width of the accumulator type:
// left to the cost model, an f16 row (fpext half -> float) took <4 x float>, 16 accumulators
// for D = 64, all 16 AVX2 registers.
llvm::MDNode* Lowerer::register_lane_loop(bool unroll_after) {
  int64_t bytes = 1;
  for (const auto& A : k_.accs) bytes = std::max<int64_t>(bytes, dtype_size(A.dtype));
  return vector_loop(std::max<int64_t>(1, math_.vector_bits() / 8 / bytes), unroll_after);
}

llvm::MDNode* Lowerer::vector_loop(int64_t lanes, bool unroll_after) {
  auto* i32 = b_.getInt32Ty();
  llvm::Metadata* width[] = {llvm::MDString::get(c_, "llvm.loop.vectorize.width"),
                             llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, lanes))};
  llvm::Metadata* enable[] = {llvm::MDString::get(c_, "llvm.loop.vectorize.enable"),
                              llvm::ConstantAsMetadata::get(llvm::ConstantInt::getTrue(c_))};
  std::vector<llvm::Metadata*> ops = {nullptr, llvm::MDNode::get(c_, width), llvm::MDNode::get(c_, enable)};
  if (unroll_after) {
    // Not unrolled before the vectoriser (a loop of 8 f64 lanes, a row block's on AVX2, was
    // flattened into scalar code first: 4.9 GFLOP/s at 512^3), fully unrolled once widened.
    llvm::Metadata* full[] = {llvm::MDString::get(c_, "llvm.loop.unroll.full")};
    llvm::Metadata* followup[] = {llvm::MDString::get(c_, "llvm.loop.vectorize.followup_all"),
                                  llvm::MDNode::get(c_, full)};
    ops.push_back(llvm::MDNode::get(c_, {llvm::MDString::get(c_, "llvm.loop.unroll.disable")}));
    ops.push_back(llvm::MDNode::get(c_, followup));
  }
  llvm::MDNode* id = llvm::MDNode::getDistinct(c_, ops);
  id->replaceOperandWith(0, id);
  return id;
}

// Only when every load of the accumulators' values moves by a constant step per lane: a row
// read as vectors (f32, f16, 8-bit rows, a lane-invariant scale or weight). 4-bit nibbles
// (lane / 2, imod) do not vectorise into register blocks: D = 64 as one block ran at 24-38 ms
// where the generic tile takes 14-23 (kfuse_bag, uniform ids).
int64_t Lowerer::register_lanes() const {
  if (!k_.dynamic_reduce() || k_.accs.empty() || k_.outer.empty()) return 0;
  const int lane = static_cast<int>(k_.outer.size()) - 1;
  int64_t bytes = 0;
  bool affine = true;
  std::set<const ir::Expr*> seen;
  std::function<void(const ir::Expr*)> visit = [&](const ir::Expr* e) {
    if (!seen.insert(e).second) return;
    if (e->kind == ir::ExprKind::Load && !ir::affine_step(e->args[0].get(), ir::Space::Outer, lane)) affine = false;
    for (const auto& a : e->args) visit(a.get());
  };
  for (const auto& A : k_.accs) {
    if (is_arg(A.kind)) return 0;
    bytes += std::max<int64_t>(1, dtype_size(A.dtype));
    visit(A.value.get());
  }
  if (!affine) return 0;
  int64_t lanes = 1;
  const int64_t budget = std::min<int64_t>(kRegBytes, kRegVectors * math_.vector_bits() / 8);
  while (lanes * 2 * bytes <= budget) lanes *= 2;
  return std::min(lanes, plan_.column_tile);
}

}  // namespace kfuse::detail::llvmjit
