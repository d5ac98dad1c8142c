// One benchmark workload: what to compute, on which shapes, with which input data.
// Shared by the kfuse runner and every peer implementation (bench/peers/*). Peers see only
// this header and plain C++ types, so each can be compiled with its own flags.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kbench {

enum class Kind {
  LogSoftmax,  // x[R,C] -> log_softmax over the last axis
  Softmax,     // x[R,C] -> softmax over the last axis
  LayerNorm,   // x[R,C], w[C], b[C] -> layer_norm over the last axis, eps 1e-5
  ReluFma,     // a,b,c[N] -> relu(a*b + c)
  Gelu,        // x[N] -> gelu, tanh form
  Chain3,      // a,b,c[N] -> tanh(a*0.5 + b) * sigmoid(c) - exp(-a*a)
  Add,         // a,b[R,C] -> a + b
  Relu,        // a[R,C] -> relu(a)
  AddRelu,     // a,b[R,C] -> relu(a + b)
  SumAxis0,    // x[R,C] -> [C]
  SumAxis1,    // x[R,C] -> [R]
  SumAll,      // x[R,C] -> []
  Chain10,     // x[N] -> sqrt(sigmoid(log(relu(tanh(x*1.5 + 0.5)^2 - 0.25) + 1)))  (10 ops)
  Compile,     // kfuse only: compile time of a fresh kernel per backend
  CacheHit,    // kfuse only: record + cached eval overhead
};

/// Which target of the issue applies to the kfuse rows of this workload.
enum class Target {
  None,
  FasterThanBestPeer4x,   // log_softmax [4096,10]: >= 4x faster than the best peer
  Ceiling75,              // log_softmax / layer_norm [32768,512]: >= 75% of the triad ceiling
  Chain16M,               // element-wise at 16M: >= 90% ceiling, >= Eigen, natural >= 4x LibTorch natural
  Ceiling90,              // sums over [4096,4096]: >= 90% of the ceiling
  Under1us,               // 10-op chain on 8 floats: <= 1 us
  Compile100us,           // xbyak compile: <= 100 us median
};

constexpr float kLayerNormEps = 1e-5f;

struct Workload {
  std::string name;  // e.g. "log_softmax [4096,10]"
  Kind kind{};
  Target target = Target::None;
  int64_t rows = 0, cols = 0;  // for 1-D workloads rows = 1, cols = N
  std::vector<std::vector<float>> inputs;  // filled by make_inputs()
  int64_t out_numel = 0;
  double compulsory_bytes = 0;  // inputs read once + output written once

  int64_t numel() const { return rows * cols; }
  bool rowwise() const { return kind == Kind::LogSoftmax || kind == Kind::Softmax || kind == Kind::LayerNorm; }
  bool one_d() const {
    return kind == Kind::ReluFma || kind == Kind::Gelu || kind == Kind::Chain3 || kind == Kind::Chain10;
  }
};

/// One implementation of a workload, ready to run. `setup` runs before warm-up (thread counts,
/// allocation), `run` is the timed call, `result` returns the output of the last run.
struct Impl {
  std::string name;     // e.g. "torch natural"
  std::string note;     // free text shown after the row
  std::function<void()> setup;
  std::function<void()> run;
  std::function<const float*()> result;
};

/// Number of inputs of a workload kind.
int num_inputs(Kind k);
/// Fills `w.inputs`, `w.out_numel` and `w.compulsory_bytes`; deterministic for a seed.
void make_inputs(Workload& w, uint64_t seed);

}  // namespace kbench
