// Eigen Tensor module implementations (compile-time expression fusion). One thread uses the
// DefaultDevice, more threads a ThreadPoolDevice. Row-wise ops keep their per-row statistics in
// small temporaries, as one would write them by hand.
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>

#include <memory>

#include "peers.hpp"

namespace kbench {

std::string eigen_version() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

namespace {

using Idx = Eigen::Index;
using CMap2 = Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor, Idx>>;
using CMap1 = Eigen::TensorMap<const Eigen::Tensor<float, 1, Eigen::RowMajor, Idx>>;
using Map2 = Eigen::TensorMap<Eigen::Tensor<float, 2, Eigen::RowMajor, Idx>>;
using Map1 = Eigen::TensorMap<Eigen::Tensor<float, 1, Eigen::RowMajor, Idx>>;
using Map0 = Eigen::TensorMap<Eigen::Tensor<float, 0, Eigen::RowMajor, Idx>>;

struct State {
  std::vector<float> y, m, s;
  std::unique_ptr<Eigen::ThreadPool> pool;
  std::unique_ptr<Eigen::ThreadPoolDevice> tp;
  Eigen::DefaultDevice def;
};

template <typename Dev>
std::function<void()> make_run(const Workload& w, State* st, Dev* dev) {
  const Idx R = w.rows, C = w.cols, N = w.numel();
  const float* x0 = w.inputs[0].data();
  const float* x1 = w.inputs.size() > 1 ? w.inputs[1].data() : nullptr;
  const float* x2 = w.inputs.size() > 2 ? w.inputs[2].data() : nullptr;
  float* y = st->y.data();
  float* m = st->m.data();
  float* s = st->s.data();
  const Eigen::array<Idx, 1> red1{1}, red0{0};
  const Eigen::array<Idx, 2> col{R, 1}, bc{1, C}, rowv{1, C}, bcr{R, 1};
  switch (w.kind) {
    case Kind::LogSoftmax:
    case Kind::Softmax: {
      const bool log_form = w.kind == Kind::LogSoftmax;
      return [=] {
        CMap2 x(x0, R, C);
        Map2 Y(y, R, C);
        Map1 M(m, R), S(s, R);
        M.device(*dev) = x.maximum(red1);
        S.device(*dev) = (x - M.reshape(col).broadcast(bc)).exp().sum(red1);
        if (log_form) {  // y = x - (max + log(sum))
          M.device(*dev) = M + S.log();
          Y.device(*dev) = x - M.reshape(col).broadcast(bc);
        } else {  // y = exp(x - max) / sum
          S.device(*dev) = S.inverse();
          Y.device(*dev) = (x - M.reshape(col).broadcast(bc)).exp() * S.reshape(col).broadcast(bc);
        }
      };
    }
    case Kind::LayerNorm:
      return [=] {
        CMap2 x(x0, R, C);
        CMap1 g(x1, C), b(x2, C);
        Map2 Y(y, R, C);
        Map1 M(m, R), S(s, R);
        M.device(*dev) = x.mean(red1);
        S.device(*dev) = ((x - M.reshape(col).broadcast(bc)).square().mean(red1) + kLayerNormEps).rsqrt();
        Y.device(*dev) =
            (x - M.reshape(col).broadcast(bc)) * S.reshape(col).broadcast(bc) * g.reshape(rowv).broadcast(bcr) +
            b.reshape(rowv).broadcast(bcr);
      };
    case Kind::ReluFma:
      return [=] {
        CMap1 a(x0, N), b(x1, N), c(x2, N);
        Map1 Y(y, N);
        Y.device(*dev) = (a * b + c).cwiseMax(0.0f);
      };
    case Kind::Gelu:
      return [=] {
        CMap1 x(x0, N);
        Map1 Y(y, N);
        const float k = 0.7978845608028654f;  // sqrt(2 / pi)
        Y.device(*dev) = x * 0.5f * (((x + x * x * x * 0.044715f) * k).tanh() + 1.0f);
      };
    case Kind::Chain3:
      return [=] {
        CMap1 a(x0, N), b(x1, N), c(x2, N);
        Map1 Y(y, N);
        Y.device(*dev) = (a * 0.5f + b).tanh() * c.sigmoid() - (-(a * a)).exp();
      };
    case Kind::Add:
      return [=] {
        CMap1 a(x0, N), b(x1, N);
        Map1 Y(y, N);
        Y.device(*dev) = a + b;
      };
    case Kind::Relu:
      return [=] {
        CMap1 a(x0, N);
        Map1 Y(y, N);
        Y.device(*dev) = a.cwiseMax(0.0f);
      };
    case Kind::AddRelu:
      return [=] {
        CMap1 a(x0, N), b(x1, N);
        Map1 Y(y, N);
        Y.device(*dev) = (a + b).cwiseMax(0.0f);
      };
    case Kind::SumAxis0:
      return [=] {
        CMap2 x(x0, R, C);
        Map1 Y(y, C);
        Y.device(*dev) = x.sum(red0);
      };
    case Kind::SumAxis1:
      return [=] {
        CMap2 x(x0, R, C);
        Map1 Y(y, R);
        Y.device(*dev) = x.sum(red1);
      };
    case Kind::SumAll:
      return [=] {
        CMap2 x(x0, R, C);
        Map0 Y(y);
        Y.device(*dev) = x.sum();
      };
    case Kind::Chain10:
      return [=] {
        CMap1 x(x0, N);
        Map1 Y(y, N);
        Y.device(*dev) = (((x * 1.5f + 0.5f).tanh().square() - 0.25f).cwiseMax(0.0f) + 1.0f).log().sigmoid().sqrt();
      };
    case Kind::Matmul:
    case Kind::Mlp: {
      const Idx K = w.inner;
      const bool mlp = w.kind == Kind::Mlp, bt = w.b_t;
      return [=] {
        CMap2 a(x0, R, K), b(x1, K, C);
        Map2 Y(y, R, C);
        const Eigen::array<Eigen::IndexPair<Idx>, 1> dims{Eigen::IndexPair<Idx>(1, 0)};
        if (bt) {  // W [C, K]: contract a's K with W's K
          const Eigen::array<Eigen::IndexPair<Idx>, 1> dt{Eigen::IndexPair<Idx>(1, 1)};
          Y.device(*dev) = a.contract(CMap2(x1, C, K), dt);
          return;
        }
        if (!mlp) {
          Y.device(*dev) = a.contract(b, dims);
          return;
        }
        CMap1 bias(x2, C);
        Map1 M(m, R), S(s, R);
        const float k = 0.7978845608028654f;  // sqrt(2 / pi)
        Y.device(*dev) = a.contract(b, dims) + bias.reshape(rowv).broadcast(bcr);
        Y.device(*dev) = Y * 0.5f * (((Y + Y * Y * Y * 0.044715f) * k).tanh() + 1.0f);
        M.device(*dev) = Y.mean(red1);
        S.device(*dev) = ((Y - M.reshape(col).broadcast(bc)).square().mean(red1) + kLayerNormEps).rsqrt();
        Y.device(*dev) = (Y - M.reshape(col).broadcast(bc)) * S.reshape(col).broadcast(bc);
      };
    }
    default: return nullptr;
  }
}

}  // namespace

std::vector<Impl> eigen_impls(const Workload& w, int threads) {
  if (w.kind == Kind::Compile || w.kind == Kind::CacheHit || w.kind == Kind::EmbeddingBag) return {};
  if (w.stored_narrow()) return {};  // (Eigen 3.4: no bf16 or int8 GEMM kernel; its contraction converts each element)
  auto st = std::make_shared<State>();
  st->y.assign(static_cast<size_t>(std::max<int64_t>(w.out_numel, 1)), 0.0f);
  st->m.assign(static_cast<size_t>(w.rows), 0.0f);
  st->s.assign(static_cast<size_t>(w.rows), 0.0f);
  std::function<void()> run;
  std::string note;
  if (threads <= 1) {
    run = make_run(w, st.get(), &st->def);
    note = "DefaultDevice";
  } else {
    st->pool = std::make_unique<Eigen::ThreadPool>(threads);
    st->tp = std::make_unique<Eigen::ThreadPoolDevice>(st->pool.get(), threads);
    run = make_run(w, st.get(), st->tp.get());
    note = "ThreadPoolDevice(" + std::to_string(threads) + ")";
  }
  if (!run) return {};
  Impl im{"eigen", note, [] {}, [st, run] { run(); }, [st] { return static_cast<const float*>(st->y.data()); }};
  return {im};
}

}  // namespace kbench
