// Helpers of the LLVM backend tests: typed host buffers, hand-built kernels, running one kernel
// on the "llvm" and "reference" backends with the same inputs, and tolerant comparison.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "ir/kernel.hpp"
#include "kfuse/error.hpp"
#include "kfuse/half.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail::llvmjit {
// The LLVM backend's choice for a kernel (jit/llvm/column_tiles.cpp): the tile width, 0 for the
// point-by-point path (Options::llvm_column_tile replaces a non-zero width at compile). Declared
// here because its header, llvm_jit.hpp, needs LLVM's headers.
int64_t plan_column_tile(const ir::Kernel& k);
// The same for pointwise kernels that read an input transposed (transpose_tiles.cpp): the column
// width of their tiles, 0 for the row-by-row walk.
int64_t plan_transpose_tile(const ir::Kernel& k);
// Its transposed loads that 8 x 8 tiles read as vectors and transpose in registers.
std::vector<const ir::Expr*> transpose_tile_loads(const ir::Kernel& k);
}  // namespace kfuse::detail::llvmjit

namespace kfuse::test::llvmt {

using namespace kfuse::ir;
using detail::Backend;
using detail::CompiledKernel;

inline std::shared_ptr<Backend> llvm_backend() { return detail::find_backend("llvm"); }
inline std::shared_ptr<Backend> ref_backend() { return detail::find_backend("reference"); }

#define KFUSE_REQUIRE_LLVM()                                                                \
  do {                                                                                      \
    if (!::kfuse::test::llvmt::llvm_backend()) GTEST_SKIP() << "llvm backend not built in"; \
  } while (0)

/// Options with the LLVM backend's knobs: tiles of `tile` lanes for eligible column kernels and
/// launches in sequential chunks of `chunk` points (0: the backend's choice, the pool's split).
inline Options llvm_knobs(int64_t tile, int64_t chunk = 0) {
  Options o;
  o.llvm_column_tile = tile;
  o.llvm_launch_chunk = chunk;
  return o;
}

/// A host buffer of one dtype.
struct Buf {
  DType dt = DType::F32;
  std::vector<uint8_t> bytes;
  Buf() = default;
  Buf(DType d, size_t n) : dt(d), bytes(n * dtype_size(d) + 8, 0) {}  // +8: never a null pointer
  size_t size() const { return (bytes.size() - 8) / dtype_size(dt); }
  void* data() { return bytes.data(); }
  void set(size_t i, double v) {
    uint8_t* p = bytes.data();
    switch (dt) {
      case DType::Bool: p[i] = v != 0.0; break;
      case DType::I32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
      case DType::I64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
      case DType::F32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DType::F64: reinterpret_cast<double*>(p)[i] = v; break;
      case DType::U8: p[i] = static_cast<uint8_t>(v); break;
      case DType::I8: p[i] = static_cast<uint8_t>(static_cast<int8_t>(v)); break;
      case DType::F16: reinterpret_cast<uint16_t*>(p)[i] = float_to_f16_bits(static_cast<float>(v)); break;
      case DType::BF16: reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16_bits(static_cast<float>(v)); break;
    }
  }
  double get(size_t i) const {
    const uint8_t* p = bytes.data();
    switch (dt) {
      case DType::Bool: return p[i];
      case DType::I32: return reinterpret_cast<const int32_t*>(p)[i];
      case DType::I64: return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
      case DType::F32: return reinterpret_cast<const float*>(p)[i];
      case DType::F64: return reinterpret_cast<const double*>(p)[i];
      case DType::U8: return p[i];
      case DType::I8: return static_cast<int8_t>(p[i]);
      case DType::F16: return f16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
      case DType::BF16: return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    }
    return 0;
  }
  static Buf from(DType d, const std::vector<double>& v) {
    Buf b(d, v.size());
    for (size_t i = 0; i < v.size(); ++i) b.set(i, v[i]);
    return b;
  }
};

/// Random values in [lo, hi) with some specials mixed in (for float dtypes) when `specials`.
inline std::vector<double> rand_values(size_t n, uint64_t seed, double lo, double hi, bool specials = false) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  const double sp[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, 0.0, -0.0, 1e-40, -1e-310};
  for (size_t i = 0; i < n; ++i) v[i] = specials && g() % 13 == 0 ? sp[g() % 7] : d(g);
  return v;
}
/// Runs compiled kernel `ck` of `k` on copies of `inputs`; outputs sized by `out_sizes`, pre-filled
/// with a sentinel (-77) so unwritten elements show up.
inline std::vector<Buf> run_on(const CompiledKernel& ck, const Kernel& k, std::vector<Buf> inputs,
                               const std::vector<size_t>& out_sizes) {
  LaunchArgs a;
  std::vector<Buf> outs;
  size_t in = 0;
  for (const auto& bp : k.buffers) {
    if (bp.output) {
      Buf o(bp.dtype, out_sizes.at(outs.size()));
      for (size_t i = 0; i < o.size(); ++i) o.set(i, -77);
      outs.push_back(std::move(o));
    } else {
      EXPECT_EQ(inputs.at(in).dt, bp.dtype) << "input " << in;
      ++in;
    }
  }
  in = 0;
  size_t on = 0;
  for (const auto& bp : k.buffers) a.buffers.push_back(bp.output ? outs[on++].data() : inputs[in++].data());
  a.params = k.param_values();
  ck.run(a);
  return outs;
}

inline std::shared_ptr<CompiledKernel> compile_with(Backend& b, const Kernel& k,
                                                    const Options& o = detail::default_options()) {
  verify_kernel(k);
  auto r = b.compile(k, o);
  if (!r.kernel) throw std::runtime_error(b.name() + " declined: " + r.declined);
  return r.kernel;
}

/// LLVM kernel `ck` of `k` loaded again from its object (no code generation) with launches in
/// sequential chunks of `chunk` outer points or reduce blocks, emulating any thread split.
inline std::shared_ptr<CompiledKernel> chunked(const Kernel& k, const CompiledKernel& ck, int64_t chunk,
                                               int64_t tile = 0) {
  auto l = llvm_backend()->load(k, ck.binary, llvm_knobs(tile, chunk));
  if (!l) throw std::runtime_error("llvm declined to load its own object");
  return l;
}

/// |a - b| <= rtol*|b| + ulps * ulp(b in dt); NaN matches NaN; infinities must be equal.
inline bool close(double a, double b, DType dt, double rtol, double ulps) {
  if (std::isnan(b)) return std::isnan(a);
  if (std::isnan(a)) return false;
  if (std::isinf(b) || std::isinf(a)) return a == b;
  if (!is_float(dt)) return a == b;
  if (rtol == 0 && ulps == 0) return a == b && std::signbit(a) == std::signbit(b);
  double ulp = dt == DType::F32 ? std::fabs(std::nextafter(static_cast<float>(b), INFINITY) - static_cast<float>(b))
                                : std::fabs(std::nextafter(b, INFINITY) - b);
  if (ulp == 0 || std::isinf(ulp)) ulp = dt == DType::F32 ? 1.2e-7 * std::fabs(b) : 2.3e-16 * std::fabs(b);
  return std::fabs(a - b) <= rtol * std::fabs(b) + ulps * ulp;
}

struct Tol {
  double rtol = 0, ulps = 0;
  double atol = 0;  ///< absolute slack on top (tails of the composites, test_ulp_table.cpp)
};

/// Compiles `k` on llvm and reference, runs both on `inputs`, and compares every output.
/// Returns the llvm outputs.
inline std::vector<Buf> check_vs_reference(const Kernel& k, const std::vector<Buf>& inputs,
                                           const std::vector<size_t>& out_sizes, Tol tol,
                                           const std::string& what = "") {
  auto lk = compile_with(*llvm_backend(), k);
  auto rk = compile_with(*ref_backend(), k);
  auto lo = run_on(*lk, k, inputs, out_sizes);
  auto ro = run_on(*rk, k, inputs, out_sizes);
  for (size_t o = 0; o < lo.size(); ++o) {
    int bad = 0;
    for (size_t i = 0; i < lo[o].size() && bad < 5; ++i) {
      double a = lo[o].get(i), b = ro[o].get(i);
      if (!close(a, b, lo[o].dt, tol.rtol, tol.ulps) && !(std::fabs(a - b) <= tol.atol)) {
        ++bad;
        ADD_FAILURE() << what << " kernel " << k.name << " out" << o << "[" << i << "]: llvm " << a << " reference "
                      << b << "\n"
                      << (bad == 1 ? print_kernel(k) : "");
      }
    }
  }
  return lo;
}

/// Bitwise equality of two output sets.
inline bool same_bits(const std::vector<Buf>& a, const std::vector<Buf>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bytes != b[i].bytes) return false;
  return true;
}

/// The frame of a kernel over a 2-D outer domain [$0 = o0, $1 = o1] with one input and one
/// output of dtype `t`; the caller adds the reduce domain, accumulators and phases.
inline Kernel outer2d(const std::string& name, ir::KernelKind kind, DType t, int64_t o0, int64_t o1) {
  Kernel k;
  k.name = name;
  k.kind = kind;
  k.buffers = {{"in0", t, false}, {"out0", t, true}};
  k.params = {{"outer0", o0}, {"outer1", o1}};
  k.outer = {param(0), param(1)};
  return k;
}

/// A reduction with one accumulator: outer [$0 = n] of kind `kind` ("row" or "column"), reduce
/// [r], one input of dtype `in` read by `value`, out0[o0] = the accumulator (of dtype `accdt`).
inline Kernel single_reduce(const std::string& name, ir::KernelKind kind, AccKind acc_kind, DType in, DType accdt,
                            int64_t n, int64_t r, ExprRef value) {
  Kernel k;
  k.name = name;
  k.kind = kind;
  k.buffers = {{"in0", in, false}, {"out0", accdt, true}};
  k.params = {{"outer0", n}};
  k.outer = {param(0)};
  k.reduce = {r};
  k.accs = {{acc_kind, accdt, std::move(value)}};
  Phase p0, p1;
  p0.over_reduce = true;
  p0.accs = {0};
  p1.stores = {{1, var(Space::Outer, 0), acc(0, accdt)}};
  k.phases = {p0, p1};
  return k;
}

/// A 1-D pointwise kernel: outer [$0 = n], inputs of `in_types`, one output of `out` computed by
/// `body(loads)` where loads[i] = in_i[o0].
inline Kernel pointwise(const std::string& name, const std::vector<DType>& in_types, DType out, int64_t n,
                        const std::function<ExprRef(const std::vector<ExprRef>&)>& body) {
  Kernel k;
  k.name = name;
  k.kind = ir::KernelKind::Pointwise;
  std::vector<ExprRef> loads;
  for (size_t i = 0; i < in_types.size(); ++i) {
    k.buffers.push_back({"in" + std::to_string(i), in_types[i], false});
    loads.push_back(load(static_cast<int>(i), in_types[i], var(Space::Outer, 0)));
  }
  k.buffers.push_back({"out0", out, true});
  k.params.push_back({"outer0", n});
  k.outer = {param(0)};
  Phase ph;
  ph.stores.push_back({static_cast<int>(in_types.size()), var(Space::Outer, 0), body(loads)});
  k.phases.push_back(ph);
  return k;
}

/// Public-API tests on the llvm backend alone (no fallback backend), options restored after.
class LlvmOnly : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!llvm_backend()) GTEST_SKIP() << "llvm backend not built in";
    saved_ = options();
    Options o = saved_;
    o.backends = {"llvm"};
    set_options(o);
  }
  void TearDown() override {
    if (llvm_backend()) set_options(saved_);
  }
  Options saved_;
};

}  // namespace kfuse::test::llvmt
