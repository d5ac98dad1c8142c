// Internal interface of the xbyak backend (no xbyak headers here, so tests can include it).
//
// The backend emits x86-64 machine code straight from kernel IR (lib/ir/kernel.hpp) for the
// subset described in README "xbyak backend"; everything else is declined with a reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "ir/online_softmax.hpp"

namespace kfuse::detail::xb {

enum class Isa { Avx2, Avx512 };
const char* isa_name(Isa isa);  ///< "avx2" | "avx512"

/// True when this CPU can run code of `isa` (AVX2+FMA+BMI2; AVX-512 also needs F/DQ/VL/BW).
bool cpu_supports(Isa isa);

/// The backend for an explicit ISA (tests); null when the CPU lacks it.
std::shared_ptr<Backend> make_backend(Isa isa);

// ---- analysis (ISA independent) ----
/// Segment: a dynamic reduce domain per bag (embedding bags; segment.hpp, Plan::segment).
enum class Mode { Pointwise, Row, Global, Segment };
struct SegmentPlan;

/// One memory stream: element pointer = buffer + base * elem_size, then + inner * coeff.
struct Addr {
  int buffer = 0;  ///< kScratchBuffer: the per-call scratch row on the stack (Plan::reuse)
  int base = 0;    ///< index into Plan::bases (-1 for the scratch row)
  /// The element type in memory: f32, or a narrow storage type (u8/i8 read, f16/bf16 read and
  /// written; narrow.cpp), whose values the kernel holds in f32 lanes.
  DType dtype = DType::F32;
};
inline constexpr int kScratchBuffer = -1;
/// An index stream (IndexCmp): its "pointer" is the value of its base expression itself (element
/// size 1), computed and stepped per row as the pointers of memory streams are.
inline constexpr int kIndexBuffer = -2;
/// Stream pointers kept in registers (Gen::ptr_pool): pipelined rows must fit theirs in them.
inline constexpr int kPipelinePointers = 7;
/// A comparison of i64 index expressions (the bounds of concat and pad, causal masks), a bool
/// leaf (index_masks.cpp): with X = lhs - rhs (+ a constant) = base + coeff * inner, normalised to
/// coeff 0 or 1, lane l is true where X < 0 (Lt), X >= 0 (Ge), X == 0 (Eq) or X != 0 (Ne). With
/// coeff 1 the true lanes of a vector are a prefix, a suffix or one lane, so a mask is one or
/// two loads from a table at an offset computed in general registers.
struct IndexCmp {
  enum class Pred : uint8_t { Lt, Ge, Eq, Ne };
  int addr = 0;  ///< the kIndexBuffer stream holding `base`
  int coeff = 0;
  Pred pred = Pred::Lt;
  int known = -1;  ///< 0 / 1: false / true at every point (the inner index is >= 0); -1: computed
};
/// An f32 uniform random number (Rand, random.cpp): the seed and the counter's base are index
/// streams; the counter of lane l is base + l (+ the inner index when coeff is 1).
struct RandLeaf {
  int seed_addr = 0, counter_addr = 0;
  int coeff = 0;
};
struct Access {
  int addr = 0;
  int coeff = 0;  ///< 0 (broadcast) or 1 (contiguous) in the inner variable
};

struct Plan {
  Mode mode = Mode::Pointwise;
  int row_dims = 0;      ///< outer dims walked by the row loop (idx[] in the frame)
  int64_t reduce_n = 0;  ///< Row/Global: the compile-time reduce extent
  bool scalar = false;   ///< Pointwise with an empty outer domain (one point)
  /// Pointwise kernels called on slices of rows that sit in L1/L2 (a GEMM's epilogue, run on each
  /// block of C as it is finished): no prefetch ahead, which would fetch lines past the slice.
  bool cached_rows = false;
  std::vector<ir::ExprRef> bases;  ///< i64 base expressions (no inner variable)
  std::vector<Addr> addrs;
  std::unordered_map<const ir::Expr*, Access> loads;  ///< (a load with a condition: masked, index_masks.cpp)
  std::unordered_map<const ir::Expr*, IndexCmp> cmps;
  std::unordered_map<const ir::Expr*, RandLeaf> rands;
  std::vector<std::vector<Access>> stores;  ///< per phase, per store
  /// Row kernels with a short reduce extent (<= kLaneMaxReduce) and one row dim whose every
  /// base is affine in the row index: rows across lanes (AVX-512: lane i owns row o+i).
  bool lanes = false;
  std::vector<int64_t> lane_stride;  ///< per base: elements between consecutive rows
  /// Row: per base, elements between consecutive rows (coefficient of the innermost row index;
  /// 0 when not affine in it). Used for prefetching the rows ahead.
  std::vector<int64_t> row_stride;
  /// Row kernels (not lanes): a max phase and the exp-sum phase after it, computed in one loop
  /// over the row with a running maximum (online.cpp). phase == -1: none.
  ir::OnlineExpSum online;
  /// Row kernels whose last loop only stores, after accumulating loops (softmax, log_softmax,
  /// rms_norm, layer_norm): the last accumulating loop over row i also runs the store loop of row i-1
  /// (online.cpp), so that the math of one row overlaps the memory writes of the other.
  bool pipeline = false;
  /// Pipelined rows whose store recomputes the sum loop's expensive value E (softmax: the sum
  /// of exp(x - m), then exp(x - m) / s stored): the sum loop over row i also writes E to a
  /// scratch row (Frame::scratch, scratch_bytes, stream kScratchBuffer: it stays in L1/L2), and
  /// row i-1's store loads it from there instead of computing it again (same bits). In the
  /// joined loop each vector runs row i-1's store before row i's sum, so one row suffices.
  struct Reuse {
    ir::Store keep;    ///< sum loop: scratch[r] = E
    ir::Store store;   ///< store loop: the store with E replaced by `load`
    ir::ExprRef load;  ///< scratch[r], registered in `loads`
    Access scratch;    ///< where keep stores and load loads
  };
  std::shared_ptr<const Reuse> reuse;
  int64_t scratch_bytes = 0;
  /// Mode::Segment: the bag walk (segment.hpp); row_dims is then the bag dims (all outer dims
  /// but the last, the columns), and `loads`/`stores` hold only the f32 loads and stores of the
  /// phases after the bag's (per-bag pointers, as for rows).
  std::shared_ptr<const SegmentPlan> segment;
};
// Scratch vector registers the injector of an op needs (injectors.hpp), beyond its result.
inline int scratch_count(const ir::Expr* e) {
  if (e->kind == ir::ExprKind::Rand) return 3;  // (random.cpp: the key and a 64-bit multiply's two)
  if (e->kind != ir::ExprKind::Op) return 0;
  switch (e->op) {
    case Op::Exp:
    case Op::Exp2: return 2;
    case Op::Log:
    case Op::Log2: return 4;
    case Op::Tanh: return 3;
    case Op::Sigmoid: return 4;
    case Op::Silu: return 5;
    case Op::Erf: return 3;
    case Op::GeluErf: return 6;
    case Op::GeluTanh: return 5;
    case Op::Log1p: return 5;
    case Op::Expm1: return 6;
    case Op::Fma: return 0;
    case Op::Maximum:
    case Op::Minimum:
    case Op::Sign:
    case Op::Relu:
    case Op::Where:
    case Op::Rsqrt:
    case Op::Recip: return 1;
    case Op::Cast: return e->dtype == DType::BF16 ? 2 : 1;  // (bf16 rounding: narrow.cpp)
    default: return 1;
  }
}

inline constexpr int64_t kLaneMaxReduce = 16;
/// Elements per global-reduction block (fixed: the blocks' partials are combined in block order).
inline constexpr int64_t kGlobalBlock = 1 << 16;
/// Cascaded sums (accumulators.cpp): partials per level.
inline constexpr int64_t kCascadeFan = 8;
inline constexpr int64_t kOnlineMinReduce = 6144;  ///< shortest row for Plan::online (analyze.cpp)
/// Longest row for Plan::reuse: its row and the scratch row (128 KiB each) stay in L2.
inline constexpr int64_t kReuseMaxReduce = 32768;
/// Shortest row for which the online loop is taken over Plan::reuse where both apply (analyze.cpp).
inline constexpr int64_t kOnlineOverReuse = 8192;

/// The stream pointers a kernel of `plan` keeps (slots, and registers while they last): one per
/// address, then, with `pipeline`, one for the previous row of each address whose base depends
/// on the row. `prev_ptr` (optional) gets, per address, the pointer holding the previous row's:
/// the address itself when its base does not depend on the row (layer_norm's weight and bias,
/// the scratch row), so that pipelined layer_norm needs 6 pointers, not 8.
int stream_pointers(const Plan& plan, bool pipeline, std::vector<int>* prev_ptr = nullptr);

/// Fills `plan`, or returns why the kernel is not supported ("xbyak: ...").
std::string analyze(const ir::Kernel& k, Plan& plan);

/// Machine code of one kernel: position independent (constants after the code, RIP-relative).
struct Code {
  std::vector<uint8_t> bytes;
  size_t code_bytes = 0;  ///< instructions (the rest is the constant table)
};
/// Emits code; throws DeclineError when a limit (registers, stack slots, code size) is hit.
Code emit(const ir::Kernel& k, const Plan& plan, Isa isa);

struct DeclineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// What the AVX-512 emitter declines and the AVX2 one takes (narrow streams and rounding, index
/// masks, not written for zmm yet): an AVX-512 machine then runs the kernel's AVX2 code.
struct Avx2OnlyError : DeclineError {
  using DeclineError::DeclineError;
};
/// emit() for `isa`, or for AVX2 where the AVX-512 emitter throws Avx2OnlyError (`isa` then
/// says AVX2): the kernels of XbyakBackend::compile and a GEMM's prologues and epilogue.
Code emit_code(const ir::Kernel& k, const Plan& plan, Isa& isa);

inline constexpr int kMaxOuterDims = 8;
/// Mode::Row: the most row cursors a kernel call interleaves (Frame::ways).
inline constexpr int kMaxWays = 8;

/// One of the sub-ranges of rows a kernel call takes its rows from in turn (Frame::ways).
struct RowCursor {
  int64_t row, end;            ///< next row to run, end of the sub-range
  int64_t pf_rows;             ///< Frame::pf_rows while this cursor runs
  int64_t idx[kMaxOuterDims];  ///< `row` decomposed over the row dims
};

/// Frame passed to the generated function `void fn(Frame*)` (offsets are part of the ABI
/// between the emitter and the host side; see frame_off below).
struct Frame {
  void* const* bufs;
  const int64_t* params;
  int64_t row_begin, row_end;  ///< rows (outer points of row_dims) to run
  int64_t lo, hi;              ///< inner range (Pointwise, Global)
  int64_t phase;               ///< Global: the phase to run
  float* accs;                 ///< accumulator values (read by Acc, written by reduce phases)
  int64_t idx[8];              ///< current outer index of the row dims (row_begin decomposed)
  int64_t ext[8];              ///< outer extents
  int64_t stream;              ///< kStream* bits: streaming stores where aligned, 4K-alias check
  float* scratch;              ///< Plan::reuse: the calling thread's scratch row (64-aligned)
  /// Mode::Row: with ways > 1 the rows come round-robin from cursors[0, ways) (sub-ranges of
  /// [row_begin, row_end), sizes not increasing, cursors[0] starting at row_begin), so that a
  /// core streams from several places of memory at once (README "Interleaved rows"). `way` is
  /// the kernel's state: the cursor being run.
  int64_t ways, way;
  /// Mode::Row: the rows a row loop's prefetch reaches ahead of the row being run (the row run
  /// two rows later: two rows down in order, another cursor's with ways > 1).
  int64_t pf_rows;
  RowCursor* cursors;  ///< ways > 1: the cursors (on the calling thread's stack)
};
namespace frame_off {
inline constexpr int bufs = 0, params = 8, row_begin = 16, row_end = 24, lo = 32, hi = 40, phase = 48, accs = 56,
                     idx = 64, ext = 128, stream = 192, scratch = 200, ways = 208, way = 216, pf_rows = 224,
                     cursors = 232, cursor_bytes = 88, cursor_row = 0, cursor_end = 8, cursor_pf_rows = 16,
                     cursor_idx = 24;
}
static_assert(offsetof(Frame, stream) == frame_off::stream, "frame layout");
static_assert(offsetof(Frame, scratch) == frame_off::scratch, "frame layout");
static_assert(offsetof(Frame, ways) == frame_off::ways && offsetof(Frame, way) == frame_off::way, "frame layout");
static_assert(offsetof(Frame, cursors) == frame_off::cursors && sizeof(RowCursor) == frame_off::cursor_bytes &&
                  offsetof(RowCursor, end) == frame_off::cursor_end &&
                  offsetof(RowCursor, idx) == frame_off::cursor_idx &&
                  offsetof(RowCursor, pf_rows) == frame_off::cursor_pf_rows &&
                  offsetof(Frame, pf_rows) == frame_off::pf_rows,
              "frame layout");
/// Frame::stream bits. kStreamStores: write full aligned vectors with non-temporal stores (the
/// output is too big to be read back from cache). kStreamAliasCheck: except where a load trails
/// a store by a few vectors modulo 4 KiB (emitter.cpp, streaming_check), on CPUs where such a load
/// waits for the streaming store (stream_alias_check below).
inline constexpr int64_t kStreamStores = 1, kStreamAliasCheck = 2;

/// Whether this CPU's loads stall behind streaming stores they 4K-alias: AMD's AVX2-only cores
/// (measured on a Zen 2 EPYC: y = 2x over 16M floats 8 -> 19 ms); not Intel (measured on a Xeon
/// with AVX-512: a load stream 16-256 bytes behind the store stream streams at the same 18 GB/s as
/// any other offset, regular stores 14 GB/s at every offset) and not AMD's cores with AVX-512
/// (Zen 4, 1 thread: y = 2x over 16M floats with the input 64 bytes behind the output modulo
/// 4 KiB 3.6 ms streaming, 5.7 ms with the check's regular stores; AVX2 code 3.2 / 4.7 ms; the
/// row kernels of 64 MiB in streaming 1.0-1.7x faster without the check, at every input offset
/// measured). Options::xbyak_alias_check overrides it per kernel.
bool stream_alias_check();
/// Whether row kernels whose output streams take their rows from several sub-ranges in turn
/// (backend.cpp, kRowWays): measured to pay on Intel's AVX-512 Xeon, to lose on Zen 4; AMD's
/// AVX2-only cores keep it (not measured there). Options::xbyak_row_ways overrides it.
bool interleave_streaming_rows();
inline constexpr int kMaxAccs = 64;
/// Frame::accs holds 2 * kMaxAccs floats: this row's accumulators, then (Plan::pipeline) the
/// previous row's.

}  // namespace kfuse::detail::xb
