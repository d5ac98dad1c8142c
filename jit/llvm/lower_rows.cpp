// Row blocks of a contraction in the LLVM lowering (Lowerer, lowerer.hpp; which kernels take them:
// plan_row_blocks in column_tiles.cpp): blocks of rows x lanes whose sums live in vector
// registers across K, panels and pieces of rows, packed B and the sums carried across steps of
// K in kf_main's scratch.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <set>

#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"
#include "lowerer.hpp"

namespace kfuse::detail::llvmjit {

void Lowerer::plan_row_block() {
  row_rows_ = row_lanes_ = row_panel_ = 0;
  row_pack_ = nullptr;
  const ir::Expr* B = k_.kind == ir::KernelKind::Contraction ? contraction_b(k_) : nullptr;
  const int lane = static_cast<int>(k_.outer.size()) - 1;
  b_along_k_ = B && ir::affine_step(B->args[0].get(), ir::Space::Outer, lane) != 1;
  if (plan_.row_block == 0 || math_.tier == MathLib::Tier::SSE2) return;
  int64_t bytes = 1;
  for (const auto& A : k_.accs) bytes = std::max<int64_t>(bytes, dtype_size(A.dtype));
  // AVX2: 3 rows x 4 vectors (12 sums, 3 broadcasts and a B vector: the 16 registers). VEX has
  // no broadcast operand, so 6 x 2 held 6 broadcasts in registers and spilled 3 sums (their
  // store-to-load chain in the hot loop): 512^3 on Zen 4 with KFUSE_ISA=avx2, f64 23 -> 25
  // GFLOP/s, f32 41 -> 75. (3 rows divide LaunchPlan::row_block's 6.)
  const bool z = math_.tier == MathLib::Tier::AVX512;
  const int64_t vectors = 4;
  const int64_t lanes = vectors * math_.vector_bits() / 8 / bytes;
  if (lanes > plan_.column_tile) return;  // (a forced narrow tile, Options::llvm_column_tile)
  row_rows_ = z ? plan_.row_block : plan_.row_block / 2;
  row_lanes_ = lanes;
  const int64_t K = k_.reduce_numel();
  // B is packed when K is long (its rows a row length apart: see above) or when it is read
  // along K (x @ w.T: a lane's elements K apart), whatever K. AVX2's block reads two lines of
  // B per 12 FMAs (AVX-512's four per 24 of twice the width), faster than L2 serves rows a row
  // length apart: it packs B past one leaf of K. Zen 3, f64, 1 thread, in place -> packed:
  // 256^3 24.8 -> 40 GFLOP/s, 512^3 20 -> 38, 1024^3 (rows 8 KiB apart) 10 -> 37; 64^3 in
  // place 44.5, packed 30.
  if (B && (K > kRowKc || b_along_k_ || (!z && K > tile_leaf()))) row_pack_ = B;
  const int64_t depth = std::min(K, kRowKc);
  row_panel_ = std::clamp<int64_t>(kRowPanelBytes / std::max<int64_t>(1, depth * bytes), row_rows_, 512);
  row_panel_ = std::max(row_rows_, row_panel_ / row_rows_ * row_rows_);
  row_scratch_bytes_ = 0;
  row_pass_ = row_panel_;
  if (!row_pack_) return;
  row_pass_ = kRowPassRows;
  int64_t state = 0;  // bytes per (row, lane): each accumulator's sum and levels
  for (int x : k_.phases[0].accs) state += dtype_size(k_.accs[x].dtype) * (1 + row_levels(x));
  row_nc_ = std::clamp<int64_t>(kRowStateBytes / (state * row_pass_), row_lanes_, kRowMaxNc) / row_lanes_ * row_lanes_;
  // One step of K (K <= kRowKc): the only step is the first and the last, so the sums never
  // leave the registers and the state is never read or written (its cells get no bytes). A
  // piece then takes every row of its chunk: each piece packs B again, and at 1024^3 pieces of
  // 504 rows packed all of B three times on one thread.
  const bool one_step = K <= kRowKc;
  if (one_step) row_pass_ = kRowPassAll;
  row_state_off_.assign(k_.accs.size(), {});
  for (int x : k_.phases[0].accs)
    for (int l = 0; l <= row_levels(x); ++l) {
      row_state_off_[x].push_back(row_scratch_bytes_);
      if (!one_step) row_scratch_bytes_ += (row_pass_ * row_nc_ * dtype_size(k_.accs[x].dtype) + 63) / 64 * 64;
    }
  row_packed_off_ = row_scratch_bytes_;
  row_scratch_bytes_ += kRowKc * row_nc_ * dtype_size(row_pack_->dtype);
}

// g = start; while (g < limit) g = body(g);
void Lowerer::while_loop(Value* start, Value* limit, const std::function<Value*(Value*)>& body) {
  llvm::Function* f = b_.GetInsertBlock()->getParent();
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* hdr = llvm::BasicBlock::Create(c_, "while", f);
  auto* after = llvm::BasicBlock::Create(c_, "while_after", f);
  b_.CreateCondBr(b_.CreateICmpSLT(start, limit), hdr, after);
  b_.SetInsertPoint(hdr);
  llvm::PHINode* g = b_.CreatePHI(b_.getInt64Ty(), 2, "g");
  g->addIncoming(start, pre);
  Value* next = body(g);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  b_.CreateCondBr(b_.CreateICmpSLT(next, limit), hdr, after);
  g->addIncoming(next, latch);
  b_.SetInsertPoint(after);
}

// The points [begin, end) of a row-blocked contraction as pieces: a partial row (where the
// chunk starts or ends inside one) is a piece of one row and part of its columns; whole rows
// go in pieces of at most row_pass_ rows of one batch (row_panel_ with B read in place,
// kRowPassRows with B packed), as even as the count allows. Every piece is a row_panel, so the
// column tile is emitted once (each copy is tens of ms of O3 and codegen). Every point's value
// is the column tile's bits (row_block), so where a chunk starts never changes a result.
void Lowerer::row_range(ExprEmitter& ex, Value* begin, Value* end, const std::vector<Value*>& ext) {
  const size_t nd = ext.size();
  Value* C = smax(ext.back(), b_.getInt64(1));
  while_loop(begin, end, [&](Value* pos) {
    Value* q = b_.CreateUDiv(pos, C);
    Value* c = b_.CreateURem(pos, C);
    Value* left = b_.CreateSub(end, pos);
    std::vector<Value*> idx = unravel(q, ext, nd - 1);
    Value* partial = b_.CreateOr(b_.CreateICmpNE(c, b_.getInt64(0)), b_.CreateICmpSLT(left, C));
    // the rows left in this batch and chunk, in as few pieces of at most row_pass_ rows as
    // the plain split (a last piece of a few rows packed B again for them), row_rows_ apart
    Value* avail = smin(b_.CreateUDiv(left, C), b_.CreateSub(ext[nd - 2], idx[nd - 2], "", true, true));
    Value* pieces = b_.CreateUDiv(b_.CreateAdd(avail, b_.getInt64(row_pass_ - 1)), b_.getInt64(row_pass_));
    Value* even =
        b_.CreateUDiv(b_.CreateAdd(avail, b_.CreateSub(pieces, b_.getInt64(1))), smax(pieces, b_.getInt64(1)));
    even = b_.CreateMul(b_.CreateUDiv(b_.CreateAdd(even, b_.getInt64(row_rows_ - 1)), b_.getInt64(row_rows_)),
                        b_.getInt64(row_rows_));
    Value* whole = smin(avail, even);
    Value* rows = b_.CreateSelect(partial, b_.getInt64(1), whole);
    Value* c1 = b_.CreateSelect(partial, smin(C, b_.CreateAdd(c, left)), C);
    row_panel(ex, idx, rows, c, c1);
    return b_.CreateAdd(pos, b_.CreateMul(rows, b_.CreateSub(c1, c)), "", true, true);
  });
}

// Rows idx[nd - 2] + [0, rows) (idx: leading outer indices; one batch) x columns [c0, c1):
// for each block of row_lanes_ columns, the blocks of row_rows_ rows (row_block; with packed B
// kRowKc of K at a time); then, as column tiles in one loop, the row left over (its whole
// width) and the columns past the last whole block in the other rows.
void Lowerer::row_panel(ExprEmitter& ex, const std::vector<Value*>& idx, Value* rows, Value* c0, Value* c1) {
  const int64_t MR = row_rows_, R = row_lanes_, K = k_.reduce_numel();
  auto at = [&](Value* r, Value* col) {
    std::vector<Value*> p = idx;
    p.back() = b_.CreateAdd(idx.back(), r, "", true, true);
    p.push_back(col);
    return p;
  };
  Value* W = b_.CreateSub(c1, c0);
  Value* nfull = b_.CreateUDiv(W, b_.getInt64(R));
  // Blocks of MR rows; 2 to MR - 1 rows over make one more block, its missing rows repeating
  // its last one (computed again, stored again with the same bits), where a column tile per
  // row was 2.5x slower per element. A single row over does too when B is packed for the
  // other blocks anyway: as a column tile it read B in place again, lane by lane when B is read
  // along K ([64,1024]x[1024,1024]^T f64: 0.56-0.59x OpenBLAS where 48 and 96 rows ran at
  // 0.84-0.87x). Alone (a GEMV's row), or over blocks reading B in place, it runs as column
  // tiles along its whole width (below).
  Value* full_groups = b_.CreateUDiv(rows, b_.getInt64(MR));
  Value* over = b_.CreateSub(rows, b_.CreateMul(full_groups, b_.getInt64(MR)));
  Value* padded = row_pack_
                      ? b_.CreateAnd(b_.CreateICmpSGE(over, b_.getInt64(1)), b_.CreateICmpSGE(rows, b_.getInt64(2)))
                      : b_.CreateICmpSGE(over, b_.getInt64(2));
  Value* groups = b_.CreateAdd(full_groups, b_.CreateZExt(padded, b_.getInt64Ty()));
  Value* grouped = smin(rows, b_.CreateMul(groups, b_.getInt64(MR)));  // rows the blocks cover
  auto valid = [&](Value* r0) { return smin(b_.getInt64(MR), b_.CreateSub(rows, r0)); };
  auto blocks = [&](Value* n0, const RowPart& part) {  // every block of rows at columns n0
    counted_loop(groups, false, {}, [&](Value* gi, const Carried&) {
      Value* r0 = b_.CreateMul(gi, b_.getInt64(MR), "", true, true);
      RowPart p = part;
      p.state_row = part.state_row ? r0 : nullptr;
      p.rows = valid(r0);
      row_block(ex, at(r0, n0), p);
      return Carried{};
    });
  };
  if (!row_pack_) {
    counted_loop(nfull, false, {}, [&](Value* t, const Carried&) {
      blocks(b_.CreateAdd(c0, b_.CreateMul(t, b_.getInt64(R), "", true, true), "", true, true),
             {b_.getInt64(0), b_.getInt64(K), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr});
      return Carried{};
    });
  } else {
    // Blocks of row_nc_ columns; in each, the sums of the pass's rows start from the identity
    // and K goes in steps of kRowKc (the last one finishes): each step packs its kRowKc x
    // columns of B once (pack_rows, one sliver per block of lanes), then runs the rows in
    // panels of row_panel_, each panel along the slivers (its rows x kRowKc of A in L2).
    const int64_t NB = row_nc_ / R, steps = (K - 1) / kRowKc;
    Value* any = b_.CreateAnd(b_.CreateICmpSGT(groups, b_.getInt64(0)), b_.CreateICmpSGT(nfull, b_.getInt64(0)));
    if_else(
        any,
        [&] {
          Value* ncb = b_.CreateUDiv(b_.CreateAdd(nfull, b_.getInt64(NB - 1)), b_.getInt64(NB));
          counted_loop(ncb, true, {}, [&](Value* cb, const Carried&) {
            Value* tb0 = b_.CreateMul(cb, b_.getInt64(NB), "", true, true);
            Value* nb = smin(b_.getInt64(NB), b_.CreateSub(nfull, tb0));
            auto col = [&](Value* t) {  // first column of sliver t of this block
              return b_.CreateAdd(c0,
                                  b_.CreateMul(b_.CreateAdd(tb0, t, "", true, true), b_.getInt64(R), "", true, true),
                                  "", true, true);
            };
            const int64_t PG = row_panel_ / MR;  // blocks of rows per panel
            // step st: points [st * kRowKc, + n) of K (the last one finishes); one copy of
            // row_block for every step (each copy is tens of ms of O3 and codegen)
            counted_loop(b_.getInt64(steps + 1), true, {}, [&](Value* st, const Carried&) {
              Value* k0 = b_.CreateMul(st, b_.getInt64(kRowKc), "", true, true);
              Value* n = smin(b_.getInt64(kRowKc), b_.CreateSub(b_.getInt64(K), k0));
              Value* first = b_.CreateICmpEQ(st, b_.getInt64(0));
              Value* last = b_.CreateICmpEQ(st, b_.getInt64(steps));
              pack_rows(ex, at(b_.getInt64(0), col(b_.getInt64(0))), k0, n, nb);
              Value* npanels = b_.CreateUDiv(b_.CreateAdd(groups, b_.getInt64(PG - 1)), b_.getInt64(PG));
              counted_loop(npanels, true, {}, [&](Value* pi, const Carried&) {
                Value* g0 = b_.CreateMul(pi, b_.getInt64(PG), "", true, true);
                Value* ng = smin(b_.getInt64(PG), b_.CreateSub(groups, g0));
                counted_loop(nb, true, {}, [&](Value* t, const Carried&) {
                  counted_loop(ng, true, {}, [&](Value* gi, const Carried&) {
                    Value* r0 = b_.CreateMul(b_.CreateAdd(g0, gi, "", true, true), b_.getInt64(MR), "", true, true);
                    row_block(ex, at(r0, col(t)),
                              {k0, n, r0, b_.CreateMul(t, b_.getInt64(R), "", true, true), sliver(t), valid(r0), first,
                               last});
                    return Carried{};
                  });
                  return Carried{};
                });
                return Carried{};
              });
              return Carried{};
            });
            return Carried{};
          });
        },
        [] {});
  }
  // Then, in one loop (one copy of the column tile): the row over (at most one: two or more
  // make a padded block) along its whole width in tiles of up to plan_.column_tile lanes, then
  // the columns [ct, c1) past the last whole block of every row in blocks. The row over reads
  // B's rows along N: in tiles of R lanes, a GEMV read 128 bytes of each B row per point of K and
  // streamed B at a third of the rate OpenBLAS's dgemv reaches.
  const int64_t T = plan_.column_tile;
  Value* ct = b_.CreateAdd(c0, b_.CreateMul(nfull, b_.getInt64(R), "", true, true), "", true, true);
  Value* cw = b_.CreateSub(c1, ct);
  Value* over_tiles =
      b_.CreateSelect(b_.CreateICmpSLT(grouped, rows),
                      b_.CreateUDiv(b_.CreateAdd(W, b_.getInt64(T - 1)), b_.getInt64(T)), b_.getInt64(0));
  Value* tails = b_.CreateSelect(b_.CreateICmpSGT(cw, b_.getInt64(0)), grouped, b_.getInt64(0));
  counted_loop(b_.CreateAdd(over_tiles, tails), false, {}, [&](Value* i, const Carried&) {
    Value* is_over = b_.CreateICmpULT(i, over_tiles);
    Value* off = b_.CreateMul(i, b_.getInt64(T));
    Value* r = b_.CreateSelect(is_over, grouped, b_.CreateSub(i, over_tiles));
    Value* col = b_.CreateSelect(is_over, b_.CreateAdd(c0, off), ct);
    column_tile(ex, at(r, col), b_.CreateSelect(is_over, smin(b_.getInt64(T), b_.CreateSub(W, off)), cw));
    return Carried{};
  });
}

// Constant-trip loop over the lanes of a row block, widened to full vectors (SROA then keeps
// the arrays it indexes by constants in registers).
void Lowerer::row_lanes(const std::function<void(Value*)>& body) {
  counted_loop(
      b_.getInt64(row_lanes_), true, {},
      [&](Value* j, const Carried&) {
        body(j);
        return Carried{};
      },
      register_lane_loop(/*unroll_after=*/true));
}

// Sliver t of the packed B (the block's lanes [t, t + 1) * row_lanes_): its value at reduce
// point k0 + kk and lane j is at [kk][j].
Value* Lowerer::sliver(Value* t) {
  return b_.CreateInBoundsGEP(reg_type(c_, row_pack_->dtype), row_packed_,
                              b_.CreateMul(t, b_.getInt64(kRowKc * row_lanes_), "", true, true));
}

// Copies B's values (row_pack_) at reduce points [k0, k0 + n) for the nb * row_lanes_ lanes
// from `first` into their slivers, in the order B's elements lie. B along N: a row of B (its
// lanes of every sliver) at a time. Sliver by sliver, it read row_lanes_ lanes of every row,
// rows a row length apart (a new page each at 1024 f64 columns): the hardware prefetchers do
// not follow that, and the copy ran at about 6 GB/s (a [3,1024]x[1024,1024] f64 GEMM took
// 1.65 ms, all but 0.2 of it packing). B along K (x @ w.T): sliver by sliver, each lane's
// points contiguous (its row_lanes_ lines serve 8 f64 points each from L1).
void Lowerer::pack_rows(ExprEmitter& ex, const std::vector<Value*>& first, Value* k0, Value* n, Value* nb) {
  llvm::Type* t = reg_type(c_, row_pack_->dtype);
  auto copy = [&](Value* kk, Value* s) {  // point k0 + kk of sliver s
    Value* c = b_.CreateAdd(first.back(), b_.CreateMul(s, b_.getInt64(row_lanes_), "", true, true), "", true, true);
    Value* dst = b_.CreateInBoundsGEP(t, sliver(s), b_.CreateMul(kk, b_.getInt64(row_lanes_), "", true, true));
    row_lanes([&](Value* j) {
      ex.reset();
      ex.outer = first;
      ex.outer.back() = b_.CreateAdd(c, j, "", true, true);
      ex.reduce = {b_.CreateAdd(k0, kk, "", true, true)};
      b_.CreateStore(ex.emit(ir::ExprRef(row_pack_, [](const ir::Expr*) {})), b_.CreateInBoundsGEP(t, dst, j));
    });
  };
  auto nest = [&](Value* outer, Value* inner, bool points_outer) {
    counted_loop(outer, true, {}, [&](Value* o, const Carried&) {
      counted_loop(inner, true, {}, [&](Value* i, const Carried&) {
        points_outer ? copy(o, i) : copy(i, o);
        return Carried{};
      });
      return Carried{};
    });
  };
  if (b_along_k_) nest(nb, n, false);
  else nest(n, nb, true);
  ex.reset();
  ex.reduce.clear();
}

// All phases of rows first[nd - 2] + [0, row_rows_) x columns first[nd - 1] + [0, row_lanes_)
// over the points of `part`. The sums live in rows_ arrays indexed only by constant-trip lane
// loops and constants (the rows are unrolled), which the vectoriser, the unroller and SROA
// turn into vector registers carried across K, as tile_segment's register blocks. Each (row,
// lane) folds its products in k order and closes its cascade levels after the same points as
// column_tile does (every tile_leaf() points, level l every tile_leaf() * kCascadeFan^(l-1)),
// so its bits are the column tile's.
void Lowerer::row_block(ExprEmitter& ex, const std::vector<Value*>& first, const RowPart& part) {
  const ir::Phase& ph = k_.phases[0];
  const size_t nd = first.size();
  const int64_t MR = row_rows_, R = row_lanes_;
  const std::vector<int> cs = tile_cascade_accs(ph);
  const int levels = cs.empty() ? 0 : tile_levels();
  auto cell = [&](int a, int l, int64_t i, Value* j) {  // l = 0: the sum, l >= 1: its level l
    return b_.CreateInBoundsGEP(acc_type(a), rows_[a][l], b_.CreateAdd(b_.getInt64(i * R), j, "", true, true));
  };
  auto saved = [&](int a, int l, int64_t i, Value* j) {  // the cell's place in row_state_
    Value* r = b_.CreateAdd(part.state_row, b_.getInt64(i), "", true, true);
    Value* col = b_.CreateAdd(part.state_col, j, "", true, true);
    return b_.CreateInBoundsGEP(
        acc_type(a), row_state_[a][l],
        b_.CreateAdd(b_.CreateMul(r, b_.getInt64(row_nc_), "", true, true), col, "", true, true));
  };
  auto bind = [&](int64_t i, Value* j) {  // ex at row i (past the block's rows: its last), lane j
    ex.reset();
    std::vector<Value*> p = first;
    Value* r = smin(b_.getInt64(i), b_.CreateSub(part.rows, b_.getInt64(1)));
    p[nd - 2] = b_.CreateAdd(first[nd - 2], r, "", true, true);
    p[nd - 1] = b_.CreateAdd(first[nd - 1], j, "", true, true);
    ex.outer = p;
  };
  auto each_cell = [&](const std::function<void(int, int, int64_t, Value*)>& f) {
    row_lanes([&](Value* j) {
      for (int64_t i = 0; i < MR; ++i)
        for (int a : ph.accs)
          for (int l = 0; l <= row_levels(a); ++l) f(a, l, i, j);
    });
  };
  // The first step of K starts from the identity; later ones from what the last one saved
  // (a pass over all the state to fill it with the identity first had written megabytes).
  auto start = [&](bool from_state) {
    each_cell([&](int a, int l, int64_t i, Value* j) {
      b_.CreateStore(from_state ? b_.CreateLoad(acc_type(a), saved(a, l, i, j)) : identity(a), cell(a, l, i, j));
    });
  };
  if (part.state_row)
    if_else(
        part.first, [&] { start(false); }, [&] { start(true); });
  else start(false);
  llvm::Type* bt = row_pack_ ? reg_type(c_, row_pack_->dtype) : nullptr;
  auto points = [&](Value* k0, Value* n, bool n_positive) {  // reduce points [k0, k0 + n)
    counted_loop(n, n_positive, {}, [&](Value* kk, const Carried&) {
      Value* k = b_.CreateAdd(k0, kk, "", true, true);
      Value* kp = b_.CreateSub(k, part.k0);  // the point's row of row_packed_
      row_lanes([&](Value* j) {
        if (part.state_row) {
          Value* at = b_.CreateAdd(b_.CreateMul(kp, b_.getInt64(R), "", true, true), j, "", true, true);
          ex.fixed[row_pack_] = b_.CreateLoad(bt, b_.CreateInBoundsGEP(bt, part.packed, at));
        }
        for (int64_t i = 0; i < MR; ++i) {
          bind(i, j);
          Carried cur;
          for (int a : ph.accs) cur.push_back(b_.CreateLoad(acc_type(a), cell(a, 0, i, j)));
          Carried next = reduce_point(ph, ex, {k}, cur, /*reassoc=*/false);
          for (size_t q = 0; q < ph.accs.size(); ++q) b_.CreateStore(next[q], cell(ph.accs[q], 0, i, j));
        }
        ex.fixed.erase(row_pack_);
      });
      return Carried{};
    });
  };
  // level l takes level l - 1 (the sum for l = 1), which restarts from the identity
  auto close = [&](int l) {
    row_lanes([&](Value* j) {
      for (int64_t i = 0; i < MR; ++i)
        for (int a : cs) {
          Value* up = b_.CreateLoad(acc_type(a), cell(a, l, i, j));
          Value* lower = b_.CreateLoad(acc_type(a), cell(a, l - 1, i, j));
          b_.CreateStore(fold(a, up, lower, false), cell(a, l, i, j));
          b_.CreateStore(identity(a), cell(a, l - 1, i, j));
        }
    });
  };
  if (levels == 0) points(part.k0, part.n, false);
  const int64_t L = tile_leaf();
  if (levels > 0)  // (a last step of K can be shorter than a leaf: the leaf loop may not run)
    counted_loop(b_.CreateUDiv(part.n, b_.getInt64(L)), false, {}, [&](Value* leaf, const Carried&) {
      Value* k0 = b_.CreateAdd(part.k0, b_.CreateMul(leaf, b_.getInt64(L), "", true, true), "", true, true);
      points(k0, b_.getInt64(L), true);
      close(1);
      Value* after = b_.CreateAdd(k0, b_.getInt64(L), "", true, true);
      int64_t S = L;
      std::function<void(int)> up = [&](int l) {  // levels l.. when their block ended at `after`
        if (l > levels) return;
        S *= kCascadeFan;
        if_else(
            b_.CreateICmpEQ(b_.CreateURem(after, b_.getInt64(S)), b_.getInt64(0)),
            [&] {
              close(l);
              up(l + 1);
            },
            [] {});
      };
      up(2);
      return Carried{};
    });
  if (levels > 0) {
    Value* tail = b_.CreateURem(part.n, b_.getInt64(L));
    points(b_.CreateAdd(part.k0, b_.CreateSub(part.n, tail), "", true, true), tail, false);
  }
  auto save = [&] {
    each_cell([&](int a, int l, int64_t i, Value* j) {
      b_.CreateStore(b_.CreateLoad(acc_type(a), cell(a, l, i, j)), saved(a, l, i, j));
    });
  };
  // each sum takes its levels, lowest first; then the later phases, phase by phase
  auto finish = [&] {
    row_lanes([&](Value* j) {
      for (int64_t i = 0; i < MR; ++i)
        for (int a : cs) {
          Value* v = b_.CreateLoad(acc_type(a), cell(a, 0, i, j));
          for (int l = 1; l <= levels; ++l) v = fold(a, v, b_.CreateLoad(acc_type(a), cell(a, l, i, j)), false);
          b_.CreateStore(v, cell(a, 0, i, j));
        }
    });
    for (size_t p = 1; p < k_.phases.size(); ++p)
      row_lanes([&](Value* j) {
        for (int64_t i = 0; i < MR; ++i) {
          bind(i, j);
          ex.reduce.clear();
          for (int a : ph.accs) ex.accs[a] = b_.CreateLoad(acc_type(a), cell(a, 0, i, j));
          run_stores(k_.phases[p], ex);
        }
      });
  };
  if (part.state_row) if_else(part.last, finish, save);
  else finish();
  ex.reset();
  ex.reduce.clear();
}

Value* Lowerer::tiles_wanted(const std::vector<Value*>& ext) {
  Value* wide = b_.CreateICmpSGE(ext.back(), b_.getInt64(kColumnTileMinLen));
  if (!b_along_k_) return wide;
  if (row_rows_ == 0) return b_.getFalse();
  return b_.CreateAnd(wide, b_.CreateICmpSGE(ext[ext.size() - 2], b_.getInt64(kStridedBMinRows)));
}

}  // namespace kfuse::detail::llvmjit
