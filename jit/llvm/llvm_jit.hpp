// Internal declarations shared by the files of the LLVM backend (jit/llvm). Nothing outside
// jit/llvm includes this header; the engine sees only make_llvm_backend() (factories.hpp).
//
//   llvm_backend.cpp  Backend + CompiledKernel: host side of a launch (outer extents, threads)
//   jit_session.cpp   the ORC LLJIT session: target, object codegen, one JITDylib per kernel
//   lower_kernel.cpp  kernel IR -> LLVM IR: functions, loop nests, phases, accumulators (the
//                     Lowerer, lowerer.hpp; its column tiles lower_tiles.cpp, a contraction's
//                     row blocks lower_rows.cpp)
//   column_tiles.cpp  which column kernels run as interchanged tiles of columns, tile width
//   prefetch_rows.cpp software prefetch of the rows a segment kernel (embedding bag) gathers
//   lower_expr.cpp    kernel IR expressions and element-wise ops -> LLVM instructions
//   vector_math.cpp   math functions: SLEEF scalar/vector variants and their VecDesc table
//   optimize.cpp      the O3 pipeline with the vector-math TargetLibraryInfo
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <llvm/IR/IRBuilder.h>

#include "backend/gather_prefetch.hpp"
#include "ir/kernel.hpp"

namespace llvm {
class TargetLibraryInfoImpl;
class TargetMachine;
}  // namespace llvm

namespace kfuse::detail::llvmjit {

/// The LLVM backend's code generator version (Backend::codegen_version): bump it whenever the
/// emitted IR or the optimisation pipeline may change for the same kernel IR (history in git log).
inline constexpr int kLlvmCodegenVersion = 22;

using Builder = llvm::IRBuilder<>;

// ---- vector_math.cpp ----
enum class MathFn : uint8_t { Exp, Log, Tanh, Erf, Sin, Cos, Pow, Expm1, Log1p, Exp2, Log2, Count_ };
const char* math_fn_name(MathFn f);

/// The vector-math library chosen for the host ISA (SLEEF u10, one vector variant per tier, see
/// vector_math.cpp). Generated code calls an internal scalar wrapper that runs the same vector
/// variant, so an element's value never depends on vector body vs scalar remainder.
struct MathLib {
  enum class Tier : uint8_t { SSE2, AVX2, AVX512 } tier = Tier::SSE2;
  /// Name of the scalar wrapper generated code calls (kf_expf, kf_exp, ...).
  std::string scalar_name(MathFn f, bool f64) const;
  /// The SLEEF vector variant of this tier (e.g. Sleef_expf16_u10avx512f).
  std::string vector_name(MathFn f, bool f64) const;
  int width(bool f64) const;  ///< lanes of the vector variant
  /// Registers the vector variants with the loop vectoriser.
  void add_vector_functions(llvm::TargetLibraryInfoImpl& tlii) const;
  /// Widest vector in bits the generated functions may use (512 on AVX-512, else 256/128).
  int vector_bits() const;
  /// Emits a call of `f` on f32/f64 scalars (defines the wrapper in the module on first use).
  llvm::Value* call(Builder& b, MathFn f, bool f64, const std::vector<llvm::Value*>& args) const;
};
MathLib detect_math_lib(bool avx512f, bool avx2, bool fma);

// ---- lower_kernel.cpp ----
/// How a kernel is run (derived from the IR alone, so compile and load agree).
struct LaunchPlan {
  /// Global reduction split into fixed-size blocks of the reduce domain, reduced in parallel and
  /// combined in block order (outer empty, phase 0 the only over_reduce phase, no stores in it,
  /// Sum/Prod/Max/Min accumulators only).
  bool split = false;
  int64_t block = 0;           ///< reduce points per block (fixed: independent of the thread count)
  int64_t nblocks = 0;         ///< ceil(reduce_numel / block)
  int nacc = 0;                ///< accumulators of phase 0 (8-byte partial slots per block)
  int64_t work_per_point = 1;  ///< reduce points visited per outer point (grain heuristics)
  /// > 0: a column kernel lowered as tiles of this many adjacent columns, reduce loops outside
  /// the lane loop (column_tiles.cpp); 0: point by point.
  int64_t column_tile = 0;
  /// > 0: a pointwise kernel reading an input transposed, walked in tiles of kTransposeRows rows
  /// x this many columns of its two innermost outer dims (transpose_tiles.cpp); 0: row by row.
  int64_t transpose_tile = 0;
  /// > 0: a tiled contraction whose whole rows run as register blocks of this many rows
  /// (plan_row_blocks); its launches are split into chunks of whole blocks of rows.
  int64_t row_block = 0;
};
/// A tiled column kernel launched with fewer columns than this (innermost outer extent) runs
/// point by point: a 1-lane tile carries each accumulator through memory between reduce points
/// (a store-to-load chain), while the point path keeps it in a register and vectorises the then
/// contiguous reduce loop. [1e6, 1] f32, 1 thread: sum axis 0 0.13 ms point by point vs 0.87 ms
/// as 1-lane tiles, max 0.14 vs 4.1 ms; from 2 columns on tiles win or tie ([1e6, 2]: sum 0.91 vs
/// 0.99 ms, max 4.2 vs 7.4 ms, x - mean(x, 0) 2.1 vs 2.2 ms).
inline constexpr int64_t kColumnTileMinLen = 2;
LaunchPlan plan_launch(const ir::Kernel& k);

// ---- transpose_tiles.cpp ----
/// Tiles of a transposing pointwise kernel: columns per block (kTransposeTile) and rows per block.
inline constexpr int64_t kTransposeTile = 8, kTransposeRows = 256;
/// The tile width for `k` (0: not a pointwise kernel reading an input transposed).
int64_t plan_transpose_tile(const ir::Kernel& k);
/// Bounds on a kernel whose 8 x 8 tiles are transposed in registers (each tile evaluates the
/// kernel's expression once per row, 8 vector copies): expression nodes of its stores,
/// transposed loads.
inline constexpr size_t kTransposeTileMaxNodes = 48, kTransposeTileMaxLoads = 4;
/// 8-column blocks per chunk of an 8 x 8 tiled walk (Lowerer::tiled_range).
inline constexpr int64_t kTransposeChunk = 16;
/// The transposed loads of a tiled kernel (plan_transpose_tile) that an 8 x 8 tile reads as 8
/// vectors along the next-to-innermost dim and transposes in registers: unmasked, unit step along
/// that dim; empty when any transposed load is not such, or the kernel is past the bounds above.
std::vector<const ir::Expr*> transpose_tile_loads(const ir::Kernel& k);
class ExprEmitter;
/// The transposed inputs of the 8 x 8 points from `row` (the leading dims' indices; its
/// next-to-innermost index the first of 8 in one run of that dim) x columns [c0, c0 + 8). Each
/// load of `tloads` is read as 8 vectors, one per column, each along the 8 rows, transposed in
/// registers, and stored row by row into its slot of `slots` (rows `stride` elements of its
/// memory type apart, this tile's 8 from element `first` of each), where the tile's points read
/// it as a contiguous row (Lowerer::tiled_range). Left to the vectoriser, a row's 8 transposed
/// elements were one gather (vgatherqps on x86).
void transpose_tile8(Builder& b, ExprEmitter& ex, const std::vector<const ir::Expr*>& tloads,
                     const std::vector<llvm::Value*>& row, llvm::Value* c0, const std::vector<llvm::Value*>& slots,
                     int64_t stride, int64_t first);

// ---- row_pieces.cpp ----
/// One piece of a pointwise kernel's rows: the innermost index in [lo, hi), the kernel's phases
/// with their stores folded for that range.
struct RowPiece {
  int64_t lo, hi;
  std::vector<ir::Phase> phases;
};
/// At most this many cuts (each piece is a copy of the kernel's stores).
inline constexpr size_t kMaxRowCuts = 8;
/// The pieces of `k`'s rows (empty: not a pointwise kernel comparing its innermost index with
/// constants, or more than kMaxRowCuts cuts).
std::vector<RowPiece> plan_row_pieces(const ir::Kernel& k);
/// Whether `k`'s functions get "+prefer-no-gather" (a pointwise kernel with a load strided by 2-8
/// or indexed by data along the innermost dim).
bool prefers_no_gather(const ir::Kernel& k);

// ---- column_tiles.cpp ----
/// The tile width for `k` (0: not a column kernel with lane-contiguous accesses).
int64_t plan_column_tile(const ir::Kernel& k);
/// Whether `k` is a segment kernel whose fold reads a row at lane column / 2 (a 4-bit table):
/// its generic tile then walks the lanes in pairs.
bool plan_lane_pairs(const ir::Kernel& k);
/// Whether `k`, tiled `column_tile` lanes wide (plan_column_tile), is a contraction whose whole
/// rows run as register blocks of rows x lanes.
bool plan_row_blocks(const ir::Kernel& k, int64_t column_tile);
/// The load of a contraction's phase-0 values that moves with the lane (B), when it is the only
/// one, unmasked, of a stored f32/f64/i32/i64 buffer, moves by a constant >= 1 per lane and not
/// with the row: what row blocks can pack. Null otherwise.
const ir::Expr* contraction_b(const ir::Kernel& k);

/// Generated entry points (in one object; each kernel lives in its own JITDylib, so the
/// names are fixed):
///   kf_main(void** bufs, const int64_t* params, int64_t begin, int64_t end)
///       runs outer points [begin, end) of the flattened outer domain (row-blocked contractions:
///       a fifth argument, the scratch; RowMainFn);
///   kf_part(void** bufs, const int64_t* params, int64_t b0, int64_t b1, void* partials)
///       (split plans) folds blocks [b0, b1) into partials[block * nacc + i];
///   kf_fin(void** bufs, const int64_t* params, const void* partials, int64_t nblocks)
///       (split plans) combines the partials in block order and runs the later phases.
using MainFn = void (*)(void* const*, const int64_t*, int64_t, int64_t);
/// kf_main of a row-blocked contraction (LaunchPlan::row_block): one more argument, a scratch
/// of kf_scratch bytes (an i64 constant in the object; 0: none needed), 64-byte aligned, private
/// to the calling thread for the call (the sums of a packed panel, Lowerer::row_panel).
using RowMainFn = void (*)(void* const*, const int64_t*, int64_t, int64_t, void*);
using PartFn = void (*)(void* const*, const int64_t*, int64_t, int64_t, void*);
using FinFn = void (*)(void* const*, const int64_t*, const void*, int64_t);
inline constexpr const char* kMainName = "kf_main";
inline constexpr const char* kPartName = "kf_part";
inline constexpr const char* kFinName = "kf_fin";
inline constexpr const char* kScratchName = "kf_scratch";

/// Lowers `k` into a new module of `ctx`. Throws BackendError for constructs it cannot lower.
std::unique_ptr<llvm::Module> lower_kernel(const ir::Kernel& k, const LaunchPlan& plan, llvm::LLVMContext& ctx,
                                           const MathLib& math, llvm::TargetMachine& tm);

// ---- lower_expr.cpp ----
llvm::Type* reg_type(llvm::LLVMContext& c, DType dt);  ///< bool -> i1
llvm::Type* mem_type(llvm::LLVMContext& c, DType dt);  ///< bool -> i8

/// Emits kernel-IR expressions at the builder's insertion point. Values are memoised per Expr
/// node until reset() (call it whenever the insertion point leaves the region where the cached
/// values dominate, e.g. at the start of each phase body).
class ExprEmitter {
 public:
  ExprEmitter(Builder& b, const ir::Kernel& k, const MathLib& math) : b_(b), k_(k), math_(math) {}
  llvm::Value* emit(const ir::ExprRef& e);
  void reset() { cache_.clear(); }
  /// A loaded element (memory type) as the value emit gives for a load of `dt` (narrow types
  /// widened, bool from its byte).
  llvm::Value* widen_loaded(llvm::Value* v, DType dt);

  /// Values that emit gives for these expressions instead of emitting them (kept across
  /// reset(): a transpose tile's loads, read once per tile).
  std::unordered_map<const ir::Expr*, llvm::Value*> fixed;
  /// A store: buffer, element index, value in the buffer's memory type.
  struct Store {
    int buffer;
    llvm::Value* index;
    llvm::Value* value;
  };
  /// When set, store() appends here instead of storing (a transpose tile stores a row's points
  /// as one vector).
  std::vector<Store>* captured = nullptr;

  std::vector<llvm::Value*> buffers;  ///< one pointer per kernel buffer
  std::vector<llvm::Value*> params;   ///< i64 per kernel param
  std::vector<llvm::Value*> outer;    ///< i64 per outer dim (current point)
  std::vector<llvm::Value*> reduce;   ///< i64 per reduce dim (current point)
  std::vector<llvm::Value*> accs;     ///< final value per accumulator (in its register type)

  /// Kernel-IR cast semantics (float -> int: truncate, NaN/out of range give the minimum).
  llvm::Value* convert(llvm::Value* v, DType from, DType to);
  llvm::Value* round_narrow(llvm::Value* v, DType to);
  llvm::Value* truth(llvm::Value* v, DType dt);  ///< value != 0 as i1 (NaN is true)
  void store(int buffer, llvm::Value* index, llvm::Value* value);

 private:
  llvm::Value* emit_op(const ir::Expr& e);
  llvm::Value* emit_load(const ir::Expr& e);
  llvm::Value* emit_rand(const ir::Expr& e);  ///< lower_random.cpp
  bool is_index(const ir::Expr* e);

  Builder& b_;
  const ir::Kernel& k_;
  const MathLib& math_;
  std::unordered_map<const ir::Expr*, llvm::Value*> cache_;
  std::unordered_map<const ir::Expr*, bool> index_like_;
};

// ---- prefetch_rows.cpp ----
/// The loads of `ph`'s accumulator values that gather a row per reduce position (index reads
/// memory and moves with reduce var 0): what a segment tile prefetches.
std::vector<const ir::Expr*> gathered_row_loads(const ir::Phase& ph, const ir::Kernel& k);
/// Software prefetch of the rows `loads` read for the `width` lanes from outer.back() (outer =
/// the point of a tile's first lane). Built once per tile: what does not depend on the id (a
/// row's span) is computed there, so emit() per id is the row address and the prefetches.
class RowPrefetch {
 public:
  RowPrefetch(Builder& b, ExprEmitter& ex, std::vector<const ir::Expr*> loads, const std::vector<llvm::Value*>& outer,
              llvm::Value* width);
  /// Prefetches the lines the loads read at reduce position `pos` for the point `outer` (the
  /// tile's first lane, possibly of another bag). Leaves `ex` reset.
  void emit(const std::vector<llvm::Value*>& outer, llvm::Value* pos);
  bool empty() const { return rows_.empty(); }
  /// How many points ahead `emit`'s caller prefetches (backend/gather_prefetch.hpp).
  int64_t ahead() const { return how_.ahead; }

 private:
  struct Row {
    const ir::Expr* load;
    llvm::Value* span = nullptr;       ///< bytes from the first lane's element to the last lane's end, less 1
    bool step0 = false;                ///< lane-invariant element (a scale or bias)
    llvm::Value* last_lane = nullptr;  ///< no constant lane step: the last lane, addresses compared per id
  };
  llvm::Value* address(const ir::Expr* l, llvm::Value* lane, const std::vector<llvm::Value*>& outer, llvm::Value* pos);
  void line(llvm::Value* addr);
  void line_loop(llvm::Value* first, llvm::Value* lines);
  Builder& b_;
  ExprEmitter& ex_;
  std::vector<Row> rows_;
  GatherPrefetch how_{0, true};
};

// ---- optimize.cpp ----
/// Runs the O3 pipeline (loop and SLP vectorisation on, vector-math mappings registered).
void optimize_module(llvm::Module& m, llvm::TargetMachine& tm, const MathLib& math);

// ---- jit_session.cpp ----
/// Code loaded into the JIT: one JITDylib, removed (code memory freed) on destruction.
class LoadedCode {
 public:
  virtual ~LoadedCode() = default;
  virtual void* symbol(const std::string& name) const = 0;  ///< null when absent
};

class JitSession {
 public:
  virtual ~JitSession() = default;
  /// Creates the process-wide session (targets, host detection, LLJIT); `avx2_only`: code for
  /// the AVX2 tier even on an AVX-512 host (KFUSE_ISA=avx2). Throws BackendError.
  static std::shared_ptr<JitSession> create(bool avx2_only = false);
  virtual const std::string& target() const = 0;
  virtual const MathLib& math() const = 0;
  /// Lowers, optimises and compiles `k` into an ELF relocatable object; returns the object bytes
  /// and (in `ir_text`) the optimised LLVM IR. Serialised internally (one codegen at a time).
  virtual std::vector<uint8_t> compile(const ir::Kernel& k, const LaunchPlan& plan, std::string* ir_text,
                                       double* lower_ms = nullptr, double* opt_ms = nullptr) = 0;
  /// Links an object produced by compile() (possibly in another process with the same target)
  /// into a fresh JITDylib and resolves `symbols`. Throws BackendError.
  virtual std::shared_ptr<LoadedCode> load(const std::vector<uint8_t>& object,
                                           const std::vector<std::string>& symbols) = 0;
};

}  // namespace kfuse::detail::llvmjit
