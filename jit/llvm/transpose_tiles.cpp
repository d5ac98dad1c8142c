// Transpose tiles: which pointwise kernels the LLVM backend walks in tiles of the two innermost
// outer dims instead of row by row, and that walk (Lowerer::tiled_range, at the end).
//
// A pointwise kernel reading an input transposed (transpose(x) + y, x.t() materialised, a
// permute that moves the innermost axis) walks the output row by row, so each output row reads a
// column of the input: one element per cache line, one line per input row. By the time the next
// output row wants the neighbouring element of those lines they are gone (the lines of one
// column, a power-of-two row length apart, share a handful of cache sets): [4096, 1024] f32
// transposed took 28.5 ms on one Zen 4 core, 40x its plain copy. Walked as tiles (for each block
// of kTransposeRows output rows, for each block of kTransposeTile columns, the block's points row
// by row), a tile reads kTransposeTile input rows as streams and each input line serves the
// consecutive output rows of the block: 2.5 ms. Measured on that copy (1 thread, ms): 8 columns x
// 16 / 64 / 256 / 1024 rows 7.3 / 3.2 / 2.4 / 2.2 (but transpose(x) + y, whose y is read like the
// output, 6.1 / 5.6 / 5.0 / 11.5); 16 columns x the same rows 9.4 / 4.4 / 3.9 / 3.8; square tiles
// of 8 / 16 / 32 / 64 5.4 / 7.5 / 8.2 / 12.4 (a row of tiles revisits each input line only after
// a whole row of input rows, and rows a power of two apart share too few cache sets to keep them).
// Whole column blocks run with a constant trip count (unrolled).
//
// Register transposes: the SLP vectoriser made each tile row's 8 transposed elements one gather
// (vgatherqps), on which batched transposes waited: [512, 128, 64] took 7.4-7.9 ms against
// 2.5-2.9 ms for [4096, 1024]. A small kernel (transpose_tile_loads: at most
// kTransposeTileMaxNodes nodes, unmasked transposed loads that step by one element along the
// next-to-innermost dim) instead reads each transposed input as 8 vectors along that dim, one
// per column of an 8 x 8 block, and transposes them with shuffles (transpose_tile8); rows by
// chunks of kTransposeChunk blocks, groups of 8 rows along a chunk (Lowerer::tiled_range). Zen 4,
// 1 thread, `transpose(x) + 0`, old / new alternating, ms: [512, 128, 64] 8.2-8.6 -> 4.2-4.4;
// [64, 256, 256] 8.2-8.8 -> 2.8-3.6; [16, 512, 512] 5.6-5.8 -> 2.3-2.5 (a slow spell of the
// host: its copy took 1.3-1.6 ms); [4096, 1024] unchanged (quiet host, four pairs: 2.70-2.92 ->
// 2.66-2.82). The transposed rows go to a stack slot and each tile row is evaluated as one vector
// (tiled_range), no longer point by point.
//
// Pointwise points are independent (no accumulators, each point stores its own outputs), so the
// order of the walk cannot change a bit.
//
// Eligible: kind "pointwise" with at least two outer dims, every store contiguous along the
// innermost outer dim, and a load that moves by more than one element (or by a run-time amount)
// per step of the innermost outer dim but by one element per step of the dim before it.
#include <llvm/IR/Module.h>

#include <algorithm>
#include <array>
#include <functional>
#include <set>
#include <unordered_set>

#include "ir/expr_util.hpp"
#include "llvm_jit.hpp"
#include "lowerer.hpp"

namespace kfuse::detail::llvmjit {

namespace {

// Whether `e` is a load that reads transposed: strided along the innermost dim, unit along the next.
bool reads_transposed(const ir::Expr* e, int inner) {
  if (e->kind != ir::ExprKind::Load) return false;
  const ir::Expr* idx = e->args[0].get();
  const std::optional<int64_t> s_in = ir::affine_step(idx, ir::Space::Outer, inner);
  const std::optional<int64_t> s_next = ir::affine_step(idx, ir::Space::Outer, inner - 1);
  const bool strided = !s_in || (*s_in != 0 && *s_in != 1 && *s_in != -1);
  return strided && ir::depends_on(idx, ir::Space::Outer, inner) && s_next && (*s_next == 1 || *s_next == -1);
}

// The loads under `e` that read transposed (not looking inside them), appended to `out` once each.
void collect_transposed(const ir::Expr* e, int inner, std::vector<const ir::Expr*>& out) {
  if (reads_transposed(e, inner)) {
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    return;
  }
  for (const auto& a : e->args) collect_transposed(a.get(), inner, out);
}

size_t count_nodes(const ir::Expr* e, std::unordered_set<const ir::Expr*>& seen) {
  if (!seen.insert(e).second) return 0;
  size_t n = 1;
  for (const auto& a : e->args) n += count_nodes(a.get(), seen);
  return n;
}

}  // namespace

std::vector<const ir::Expr*> transpose_tile_loads(const ir::Kernel& k) {
  if (plan_transpose_tile(k) != kTransposeTile) return {};
  const int inner = static_cast<int>(k.outer.size()) - 1;
  std::vector<const ir::Expr*> loads;
  std::unordered_set<const ir::Expr*> seen;
  size_t nodes = 0;
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) {
      collect_transposed(s.value.get(), inner, loads);
      nodes += count_nodes(s.value.get(), seen) + count_nodes(s.index.get(), seen);
    }
  if (nodes > kTransposeTileMaxNodes || loads.size() > kTransposeTileMaxLoads) return {};
  for (const ir::Expr* l : loads)
    if (l->args.size() != 1 ||
        ir::affine_step(l->args[0].get(), ir::Space::Outer, inner - 1) != std::optional<int64_t>(1))
      return {};
  // (a tile's stores land after its loads: no load may read a buffer the kernel writes)
  std::unordered_set<int> written;
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) written.insert(s.buffer);
  for (const ir::Expr* e : seen)
    if (e->kind == ir::ExprKind::Load && written.count(e->index)) return {};
  return loads;
}

int64_t plan_transpose_tile(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Pointwise || k.outer.size() < 2 || !k.reduce.empty() || !k.accs.empty()) return 0;
  const int inner = static_cast<int>(k.outer.size()) - 1;
  bool any = false;
  for (const auto& ph : k.phases) {
    if (ph.over_reduce) return 0;
    for (const auto& s : ph.stores) {
      if (ir::affine_step(s.index.get(), ir::Space::Outer, inner) != std::optional<int64_t>(1)) return 0;
      std::vector<const ir::Expr*> loads;
      collect_transposed(s.value.get(), inner, loads);
      any = any || !loads.empty();
    }
  }
  return any ? kTransposeTile : 0;
}

namespace {

using llvm::Value;

// Transposes 8 vectors of 8: lane j of result i is lane i of v[j]. Three rounds of two-input
// shuffles, each doubling the runs of lanes already in place.
std::array<Value*, 8> transpose8(Builder& b, const std::array<Value*, 8>& v) {
  auto shuf = [&](Value* x, Value* y, std::array<int, 8> m) { return b.CreateShuffleVector(x, y, m); };
  std::array<Value*, 8> a{}, h{}, r{};
  for (int p = 0; p < 4; ++p) {  // pairs of vectors interleaved: lanes 0-3, then lanes 4-7
    a[2 * p] = shuf(v[2 * p], v[2 * p + 1], {0, 8, 1, 9, 2, 10, 3, 11});
    a[2 * p + 1] = shuf(v[2 * p], v[2 * p + 1], {4, 12, 5, 13, 6, 14, 7, 15});
  }
  for (int q = 0; q < 2; ++q)  // vectors 4q..4q+3: runs of 4 per lane
    for (int s = 0; s < 2; ++s) {
      Value* x = a[4 * q + s];
      Value* y = a[4 * q + 2 + s];
      h[4 * q + 2 * s] = shuf(x, y, {0, 1, 8, 9, 2, 3, 10, 11});
      h[4 * q + 2 * s + 1] = shuf(x, y, {4, 5, 12, 13, 6, 7, 14, 15});
    }
  for (int c = 0; c < 4; ++c) {  // lanes 2c and 2c + 1 of all 8 vectors
    r[2 * c] = shuf(h[c], h[4 + c], {0, 1, 2, 3, 8, 9, 10, 11});
    r[2 * c + 1] = shuf(h[c], h[4 + c], {4, 5, 6, 7, 12, 13, 14, 15});
  }
  return r;
}

}  // namespace

void transpose_tile8(Builder& b, ExprEmitter& ex, const std::vector<const ir::Expr*>& tloads,
                     const std::vector<Value*>& row, Value* c0, const std::vector<Value*>& slots, int64_t stride,
                     int64_t first) {
  llvm::LLVMContext& c = b.getContext();
  for (size_t l = 0; l < tloads.size(); ++l) {
    const ir::Expr* ld = tloads[l];
    llvm::Type* mt = mem_type(c, ld->dtype);
    auto* vt = llvm::FixedVectorType::get(mt, 8);
    const llvm::Align align(mt->getPrimitiveSizeInBits() / 8);
    std::array<Value*, 8> col{};
    for (int j = 0; j < 8; ++j) {
      ex.reset();
      ex.outer = row;
      ex.outer.push_back(b.CreateAdd(c0, b.getInt64(j), "", true, true));
      Value* at = ex.convert(ex.emit(ld->args[0]), ld->args[0]->dtype, DType::I64);
      Value* p = b.CreateInBoundsGEP(mt, ex.buffers.at(static_cast<size_t>(ld->index)), at);
      col[static_cast<size_t>(j)] = b.CreateAlignedLoad(vt, p, align);
    }
    const std::array<Value*, 8> rows = transpose8(b, col);
    for (int i = 0; i < 8; ++i)
      b.CreateAlignedStore(rows[static_cast<size_t>(i)],
                           b.CreateInBoundsGEP(mt, slots[l], b.getInt64(stride * i + first)), align);
  }
  ex.reset();
}

// Visits the points [begin, end) of the row-major domain `extents` (nd >= 2) in tiles of its
// two innermost dims (transpose_tiles.cpp): the partial rows at either end of the range point
// by point, the whole rows between in blocks of kTransposeRows rows, each block walked T
// columns at a time, row by row. Rows of a block may belong to different points of the leading
// dims (they are consecutive rows of the flattened domain); every point is visited once.
void Lowerer::tiled_range(Value* begin, Value* end, const std::vector<Value*>& extents, int64_t T, ExprEmitter& ex,
                          const std::vector<const ir::Expr*>& tloads,
                          const std::function<void(const std::vector<Value*>&)>& body) {
  const int64_t QB = kTransposeRows;
  const size_t nd = extents.size();
  // A tile of 8 rows is TW columns wide, each row one vector of VF lanes or a few: the lanes of
  // the tier's math functions (vector_math.cpp: one vector variant per tier) for the widest
  // value of the expression, so that its math calls stay vector calls (at 8 lanes an AVX-512
  // host's 16-lane tanhf was called lane by lane).
  int64_t value_bytes = 1;
  std::set<const ir::Expr*> seen;  // (each shared node once: a DAG, not a tree)
  std::function<void(const ir::Expr*)> widest = [&](const ir::Expr* e) {
    if (!seen.insert(e).second) return;
    value_bytes = std::max<int64_t>(value_bytes, dtype_size(e->dtype));
    if (e->kind != ir::ExprKind::Load)
      for (const auto& a : e->args) widest(a.get());
  };
  for (const auto& ph : k_.phases)
    for (const auto& st : ph.stores) widest(st.value.get());
  const int64_t TW = math_.vector_bits() >= 512 && value_bytes <= 4 ? 16 : 8;
  const int64_t VF = std::clamp<int64_t>(math_.vector_bits() / 8 / value_bytes, 1, TW);
  // 8 x TW elements per transposed load (transpose_tile8), in the entry block: one frame slot each
  std::vector<Value*> slots;
  if (!tloads.empty()) {
    llvm::BasicBlock& entry = b_.GetInsertBlock()->getParent()->getEntryBlock();
    llvm::IRBuilder<> eb(&entry, entry.getFirstInsertionPt());
    for (const ir::Expr* l : tloads) {
      auto* a = eb.CreateAlloca(llvm::ArrayType::get(mem_type(c_, l->dtype), static_cast<uint64_t>(8 * TW)));
      a->setAlignment(llvm::Align(64));
      slots.push_back(a);
    }
  }
  auto point = [&](const std::vector<Value*>& idx, const Carried&) {
    body(idx);
    return Carried{};
  };
  Value* C = extents.back();
  Value* one = b_.getInt64(1);
  // whole rows [q0, q1) of the flattened leading dims; C > 0 whenever begin < end
  Value* cpos = smax(C, one);
  Value* q0 = b_.CreateSDiv(b_.CreateAdd(begin, b_.CreateSub(cpos, one)), cpos);
  Value* q1 = b_.CreateSDiv(end, cpos);
  Value* head_end = smin(end, b_.CreateMul(q0, cpos));
  flat_range(begin, head_end, extents, false, {}, point);
  Value* rows = b_.CreateSub(q1, q0);
  if_else(
      b_.CreateICmpSGT(rows, b_.getInt64(0)),
      [&] {
        Value* tv = b_.getInt64(T);
        Value* qv = b_.getInt64(QB);
        Value* nblk = b_.CreateSDiv(b_.CreateAdd(rows, b_.getInt64(QB - 1)), qv);
        Value* ncol = b_.CreateSDiv(b_.CreateAdd(C, b_.getInt64(T - 1)), tv);
        // One block of nr rows x nc columns from (qb, c0), row by row.
        auto tile = [&](Value* qb, Value* c0, Value* nr, Value* nc) {
          counted_loop(nr, true, {}, [&](Value* r, const Carried&) {
            std::vector<Value*> idx = unravel(b_.CreateAdd(qb, r), extents, nd - 1);
            idx.push_back(nullptr);  // the column, set per point
            counted_loop(nc, true, {}, [&](Value* j, const Carried&) {
              std::vector<Value*> at = idx;
              at[nd - 1] = b_.CreateAdd(c0, j, "", true, true);
              body(at);
              return Carried{};
            });
            return Carried{};
          });
        };
        // An 8 x TW tile from `row` x [c0, c0 + TW): its transposed inputs into their slots
        // (transpose_tile8, 8 x 8 at a time), then row by row, each row's TW points as vectors
        // (vector_loop): the other loads and the stores contiguous along the row, the transposed
        // loads contiguous in their slot. Points one by one, the scalar code LLVM made of them
        // called every function of the expression once per point: tanh(transpose(x) * y)
        // [1024, 4096] f32 took 117 ms.
        auto tile8 = [&](const std::vector<Value*>& row, Value* c0) {
          for (int64_t h = 0; h < TW; h += 8)
            transpose_tile8(b_, ex, tloads, row, b_.CreateAdd(c0, b_.getInt64(h), "", true, true), slots, TW, h);
          counted_loop(b_.getInt64(8), true, {}, [&](Value* i, const Carried&) {
            std::vector<Value*> at = row;
            at[nd - 2] = b_.CreateAdd(row[nd - 2], i, "", true, true);
            at.push_back(nullptr);
            Value* first = b_.CreateMul(i, b_.getInt64(TW), "", true, true);
            counted_loop(
                b_.getInt64(TW), true, {},
                [&](Value* j, const Carried&) {
                  for (size_t l = 0; l < tloads.size(); ++l) {
                    llvm::Type* mt = mem_type(c_, tloads[l]->dtype);
                    Value* p = b_.CreateInBoundsGEP(mt, slots[l], b_.CreateAdd(first, j, "", true, true));
                    Value* v = b_.CreateAlignedLoad(mt, p, llvm::Align(mt->getPrimitiveSizeInBits() / 8));
                    ex.fixed[tloads[l]] = ex.widen_loaded(v, tloads[l]->dtype);
                  }
                  at[nd - 1] = b_.CreateAdd(c0, j, "", true, true);
                  body(at);
                  return Carried{};
                },
                vector_loop(VF, true));
            return Carried{};
          });
          ex.fixed.clear();
        };
        // With transposed loads read as 8 x 8 blocks (transpose_tile8), rows [qb, qb + nr) go by
        // chunks of kTransposeChunk * 8 columns (whole tiles of TW), each chunk by groups of 8 rows
        // inside one run of the next-to-innermost dim, each group along the chunk's tiles: a group writes its rows'
        // chunk whole and reads the chunk's input lines, which the next group reads on from L1
        // or L2. (Blocks outermost as above left each output line half written for a whole block
        // of rows; groups along whole rows read more input lines than a power-of-two stride lets
        // the L2's sets keep.) The rows of no group, and the columns past the last whole block,
        // go by points.
        auto chunks8 = [&](Value* qb, Value* nr) {
          Value* eight = b_.getInt64(8);
          Value* tw = b_.getInt64(TW);
          Value* groups = b_.CreateUDiv(b_.CreateAdd(nr, b_.getInt64(7)), eight);
          Value* full = b_.CreateUDiv(C, tw);
          const int64_t per_chunk = kTransposeChunk * 8 / TW;
          Value* per = b_.getInt64(per_chunk);
          Value* nchunk = b_.CreateUDiv(b_.CreateAdd(full, b_.getInt64(per_chunk - 1)), per);
          counted_loop(nchunk, false, {}, [&](Value* h, const Carried&) {
            Value* k0 = b_.CreateMul(h, per);
            Value* kn = smin(per, b_.CreateSub(full, k0));
            counted_loop(groups, true, {}, [&](Value* g, const Carried&) {
              Value* q = b_.CreateAdd(qb, b_.CreateMul(g, eight));
              Value* live = smin(eight, b_.CreateSub(nr, b_.CreateMul(g, eight)));  // rows of the group
              std::vector<Value*> idx = unravel(q, extents, nd - 1);
              Value* fits = b_.CreateAnd(b_.CreateICmpEQ(live, eight),
                                         b_.CreateICmpSLE(b_.CreateAdd(idx[nd - 2], eight), extents[nd - 2]));
              counted_loop(kn, true, {}, [&](Value* ci, const Carried&) {
                Value* c0 = b_.CreateMul(b_.CreateAdd(k0, ci), tw);
                if_else(
                    fits, [&] { tile8(idx, c0); }, [&] { tile(q, c0, live, tw); });
                return Carried{};
              });
              return Carried{};
            });
            return Carried{};
          });
          Value* c0 = b_.CreateMul(full, tw);
          if_else(
              b_.CreateICmpSLT(c0, C), [&] { tile(qb, c0, nr, b_.CreateSub(C, c0)); }, [] {});
        };
        counted_loop(nblk, true, {}, [&](Value* bi, const Carried&) {
          Value* qb = b_.CreateAdd(q0, b_.CreateMul(bi, qv));
          Value* nr = smin(qv, b_.CreateSub(q1, qb));
          if (!tloads.empty() && T == 8) {
            chunks8(qb, nr);
            return Carried{};
          }
          counted_loop(ncol, true, {}, [&](Value* ci, const Carried&) {
            Value* c0 = b_.CreateMul(ci, tv);
            Value* nc = smin(tv, b_.CreateSub(C, c0));
            // Whole column blocks with a constant trip count (unrolled: the loop with a
            // run-time count tested its exit after every point), the edge with the count it has.
            if_else(
                b_.CreateICmpEQ(nc, tv), [&] { tile(qb, c0, nr, tv); }, [&] { tile(qb, c0, nr, nc); });
            return Carried{};
          });
          return Carried{};
        });
      },
      [] {});
  Value* tail_begin = smax(head_end, b_.CreateMul(q1, cpos));
  flat_range(tail_begin, end, extents, false, {}, point);
}

}  // namespace kfuse::detail::llvmjit
