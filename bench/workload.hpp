// One benchmark workload: what to compute, on which shapes, with which input data.
// Shared by the kfuse runner and every peer implementation (bench/peers/*). Peers see only
// this header and plain C++ types, so each can be compiled with its own flags.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kbench {

enum class Kind {
  LogSoftmax,    // x[R,C] -> log_softmax over the last axis
  Softmax,       // x[R,C] -> softmax over the last axis
  LayerNorm,     // x[R,C], w[C], b[C] -> layer_norm over the last axis, eps 1e-5
  ReluFma,       // a,b,c[N] -> relu(a*b + c)
  Gelu,          // x[N] -> gelu, tanh form
  Chain3,        // a,b,c[N] -> tanh(a*0.5 + b) * sigmoid(c) - exp(-a*a)
  Add,           // a,b[R,C] -> a + b
  Relu,          // a[R,C] -> relu(a)
  AddRelu,       // a,b[R,C] -> relu(a + b)
  SumAxis0,      // x[R,C] -> [C]
  SumAxis1,      // x[R,C] -> [R]
  SumAll,        // x[R,C] -> []
  Chain10,       // x[N] -> sqrt(sigmoid(log(relu(tanh(x*1.5 + 0.5)^2 - 0.25) + 1)))  (10 ops)
  Compile,       // kfuse only: compile time of a fresh kernel per backend
  CacheHit,      // kfuse only: record + cached eval overhead
  Matmul,        // a[M,K] @ b[K,N] (rows = M, cols = N, inner = K), f32
  Mlp,           // layer_norm(gelu_tanh(x[M,K] @ w[K,N] + b[N])) over the last axis, no affine, eps 1e-5
  EmbeddingBag,  // embedding_bag sum over a table [rows, cols] stored as `table` (f32, f16, 8-bit, 4-bit)
  Attention,     // q, k, v [batch, rows = T, cols = D] -> softmax(q @ k^T / sqrt(D)) @ v, f32
  Stack,         // inner = T parts [rows, cols] -> [rows, T, cols] (torch.stack(parts, 1), a concat along rows)
};

/// Which target of the issue applies to the kfuse rows of this workload.
enum class Target {
  None,
  FasterThanBestPeer4x,  // log_softmax [4096,10]: >= 4x faster than the best peer
  Ceiling75,             // log_softmax / layer_norm [32768,512]: >= 75% of the ceiling
  Chain16M,              // element-wise at 16M: >= 90% ceiling, >= Eigen, natural >= 4x LibTorch natural
  Ceiling90,             // sums over [4096,4096]: >= 90% of the ceiling
  Under1us,              // 10-op chain on 8 floats: <= 1 us
  Compile100us,          // xbyak compile: <= 100 us median
  Under5us,              // record + eval of an already-planned small matmul: <= 5 us
  Epilogue5pct,          // MLP block: <= 1.05x the bare GEMM of its shape (same run, threads, impl)
  BagVsTorch,            // f32 embedding bag: >= 1.5x LibTorch's at::embedding_bag
  Bag8Bit,               // 8-bit table bag: >= 2x the f32 bag of the same ids (`bare`), >= 70% of the ceiling
};

struct BagProblem;  // bag_problem.hpp

constexpr float kLayerNormEps = 1e-5f;

struct Workload {
  std::string name;  // e.g. "log_softmax [4096,10]"
  Kind kind{};
  Target target = Target::None;
  int64_t rows = 0, cols = 0;              // for 1-D workloads rows = 1, cols = N
  int64_t inner = 0;                       // GEMM workloads: K (rows = M, cols = N)
  bool b_t = false;                        // Matmul: B stored [N, K] (a linear layer's weight: x @ W^T)
  bool bf16 = false;                       // Matmul: A, B and C stored as bf16 (f32 sums; inputs_stored)
  bool u8s8 = false;                       // Matmul: A u8, B i8, C i32 (a quantised layer's product; inputs_stored)
  int64_t batch = 1;                       // Attention: batch x heads
  std::string bare;                        // the workload this one is timed against, same impl and threads:
                                           // Mlp: the bare GEMM of its shape; 8-bit bag: the f32 bag
  std::string table;                       // EmbeddingBag: the table's storage format
  int64_t bags = 0;                        // EmbeddingBag: bags per call
  bool zipf = false;                       // EmbeddingBag: ids drawn Zipf-like (else uniformly)
  std::shared_ptr<const BagProblem> bag;   // EmbeddingBag: filled by make_inputs()
  const uint8_t* fused_rows = nullptr;     // quantised bags: kfuse's table in PyTorch's fused rows
  int fused_bits = 0;                      // (kfuse_bag_share_table), for the PyTorch peer
  std::vector<std::vector<float>> inputs;  // filled by make_inputs()
  /// bf16 and u8s8 workloads: A and B as stored (bytes; `inputs` holds the same values as floats)
  std::vector<std::vector<uint8_t>> inputs_stored;
  bool stored_narrow() const { return bf16 || u8s8; }
  int64_t out_numel = 0;
  double compulsory_bytes = 0;             // inputs read once + output written once
  double read_bytes = 0, write_bytes = 0;  // its two parts (the ceiling weighs them apart)
  double flops = 0;                        // GEMM workloads: 2 M N K (0: a memory-bound workload)

  int64_t numel() const { return rows * cols; }
  bool rowwise() const { return kind == Kind::LogSoftmax || kind == Kind::Softmax || kind == Kind::LayerNorm; }
  /// Contractions: checked on sampled rows (gemm_reference), GFLOP/s columns, % of the FMA peak.
  bool gemm() const { return kind == Kind::Matmul || kind == Kind::Mlp || kind == Kind::Attention; }
  bool one_d() const {
    return kind == Kind::ReluFma || kind == Kind::Gelu || kind == Kind::Chain3 || kind == Kind::Chain10;
  }
};

/// One implementation of a workload, ready to run. `setup` runs before warm-up (thread counts,
/// allocation), `run` is the timed call, `result` returns the output of the last run.
struct Impl {
  std::string name;  // e.g. "torch natural"
  std::string note;  // free text shown after the row
  std::function<void()> setup;
  std::function<void()> run;
  std::function<const float*()> result;
};

/// What a result is checked against: fp64 values of every element, or (GEMM workloads, whose
/// interpreted reference would take minutes at [2048^3]) of a sample of rows. An element passes
/// when |got - ref| <= atol + bound[i] + rtol * |ref| (bound: per element, may be empty).
struct Reference {
  std::vector<double> values;
  std::vector<double> bound;
  std::vector<int64_t> rows;  // empty: values hold every element; else these rows of length row_len
  int64_t row_len = 0;
  double atol = 1e-5, rtol = 1e-4;
};

/// fp64 reference of a GEMM workload on sampled rows (all rows up to 256, else about 128 spread
/// over M plus the last; Attention: over batch x T), computed here in a cache-friendly loop.
Reference gemm_reference(const Workload& w);

/// The benchmarks' deterministic generator (SplitMix64): inputs must not depend on the library.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
};

/// Number of inputs of a workload kind.
int num_inputs(Kind k);
/// Fills `w.inputs`, `w.out_numel` and `w.compulsory_bytes`; deterministic for a seed.
void make_inputs(Workload& w, uint64_t seed);

}  // namespace kbench
