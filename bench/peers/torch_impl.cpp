// LibTorch (ATen) implementations: "natural" = the allocating form as usually written
// (y = f(x)), "out=" = preallocated outputs and in-place ops.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cmath>
#include <memory>

#include "../bag_problem.hpp"
#include "peers.hpp"
#include "torch_threads.hpp"

namespace kbench {

std::string torch_version() { return TORCH_VERSION; }

namespace {

struct State {
  std::vector<at::Tensor> in;
  at::Tensor y, t1, t2, s1, s2;  // output and temporaries
};

at::Tensor wrap(const std::vector<float>& v, at::IntArrayRef sizes) {
  return at::from_blob(const_cast<float*>(v.data()), sizes, at::TensorOptions().dtype(at::kFloat));
}

// GEMM workloads: at::mm / addmm + gelu + layer_norm, allocating ("natural") and into
// preallocated outputs ("out=").
std::vector<Impl> torch_gemm_impls(const Workload& w, int threads) {
  if (w.u8s8) return {};  // (LibTorch 1.13 has no int8 GEMM on plain tensors, only quantized-tensor ops)
  auto st = std::make_shared<State>();
  const int64_t M = w.rows, N = w.cols, K = w.inner;
  // bf16 rows: the operands as stored, at::mm on bf16 tensors (oneDNN's bf16 GEMM inside LibTorch)
  auto operand = [&](size_t i, at::IntArrayRef sizes) {
    if (!w.bf16) return wrap(w.inputs[i], sizes);
    return at::from_blob(const_cast<uint8_t*>(w.inputs_stored[i].data()), sizes,
                         at::TensorOptions().dtype(at::kBFloat16));
  };
  st->in = {operand(0, {M, K}), w.b_t ? operand(1, {N, K}).t() : operand(1, {K, N})};
  if (w.kind == Kind::Mlp) st->in.push_back(wrap(w.inputs[2], {N}));
  auto opts = at::TensorOptions().dtype(w.bf16 ? at::kBFloat16 : at::kFloat);
  auto setup = [threads] { set_torch_threads(threads); };
  auto* s = st.get();
  auto result = [st] {
    if (st->y.scalar_type() != at::kFloat) st->s2 = st->y.to(at::kFloat);  // (bf16 rows: checked as floats)
    const at::Tensor& f = st->y.scalar_type() == at::kFloat ? st->y : st->s2;
    return static_cast<const float*>(f.data_ptr<float>());
  };
  Impl nat{"torch natural", "", setup, nullptr, result};
  Impl out{"torch out=", "",
           [setup, s, M, N, opts] {
             setup();
             s->y = at::empty({M, N}, opts);
             s->t1 = at::empty({M, N}, opts);
             s->t2 = at::empty({M, N}, opts);
             s->s1 = at::empty({M, 1}, opts);
             s->s2 = at::empty({M, 1}, opts);
           },
           nullptr, result};
  if (w.kind == Kind::Matmul) {
    nat.run = [s] { s->y = at::mm(s->in[0], s->in[1]); };
    out.run = [s] { at::mm_out(s->y, s->in[0], s->in[1]); };
  } else {
    nat.run = [s, N] {
      s->y = at::layer_norm(at::gelu(at::addmm(s->in[2], s->in[0], s->in[1]), "tanh"), {N}, {}, {}, kLayerNormEps);
    };
    nat.note = "addmm, gelu, layer_norm";
    out.run = [s, N] {
      at::addmm_out(s->t1, s->in[2], s->in[0], s->in[1]);
      at::gelu_out(s->t2, s->t1, "tanh");
      at::native_layer_norm_out(s->y, s->s1, s->s2, s->t2, {N}, {}, {}, kLayerNormEps);
    };
  }
  return {nat, out};
}

// Attention as a model writes it without a fused kernel (LibTorch 1.13 has no
// scaled_dot_product_attention): bmm, scale, softmax, bmm.
std::vector<Impl> torch_attention_impls(const Workload& w, int threads) {
  auto st = std::make_shared<State>();
  const int64_t B = w.batch, T = w.rows, D = w.cols;
  for (int i = 0; i < 3; ++i) st->in.push_back(wrap(w.inputs[static_cast<size_t>(i)], {B, T, D}));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto setup = [threads] { set_torch_threads(threads); };
  auto* s = st.get();
  auto result = [st] { return static_cast<const float*>(st->y.data_ptr<float>()); };
  Impl nat{"torch natural", "matmul, mul, softmax, matmul", setup,
           [s, scale] {
             s->y = at::matmul(at::softmax(at::matmul(s->in[0], s->in[1].transpose(1, 2)) * scale, -1), s->in[2]);
           },
           result};
  Impl out{"torch out=", "baddbmm (alpha = scale), softmax, bmm into preallocated outputs",
           [setup, s, B, T, D, opts] {
             setup();
             s->y = at::empty({B, T, D}, opts);
             s->t1 = at::empty({B, T, T}, opts);
             s->t2 = at::empty({B, T, T}, opts);
           },
           [s, scale] {
             at::baddbmm_out(s->t1, s->t1, s->in[0], s->in[1].transpose(1, 2), 0.0, scale);
             at::_softmax_out(s->t2, s->t1, -1, false);
             at::bmm_out(s->y, s->t2, s->in[2]);
           },
           result};
  return {nat, out};
}

}  // namespace

std::vector<Impl> torch_impls(const Workload& w, int threads) {
  if (w.kind == Kind::Compile || w.kind == Kind::CacheHit) return {};
  if (w.kind == Kind::Attention) return torch_attention_impls(w, threads);
  if (w.gemm()) return torch_gemm_impls(w, threads);
  if (w.kind == Kind::EmbeddingBag) {  // f32: at::embedding_bag; 8-bit: PyTorch's quantised bag
    if (w.fused_rows) return {torch_bag_fused_impl(*w.bag, w.fused_rows, w.fused_bits, threads)};
    if (w.table != "f32") return {};
    Impl im = torch_bag_impl(*w.bag, threads);
    im.name = "torch natural";
    return {im};
  }
  auto st = std::make_shared<State>();
  const int64_t R = w.rows, C = w.cols;
  std::vector<int64_t> shape = w.one_d() ? std::vector<int64_t>{C} : std::vector<int64_t>{R, C};
  for (size_t i = 0; i < w.inputs.size(); ++i) {
    if (w.kind == Kind::LayerNorm && i > 0) st->in.push_back(wrap(w.inputs[i], {C}));
    else st->in.push_back(wrap(w.inputs[i], shape));
  }
  auto opts = at::TensorOptions().dtype(at::kFloat);
  std::vector<int64_t> out_shape = shape;
  if (w.kind == Kind::SumAxis0) out_shape = {C};
  if (w.kind == Kind::SumAxis1) out_shape = {R};
  if (w.kind == Kind::SumAll) out_shape = {};
  if (w.kind == Kind::Stack) out_shape = {R, w.inner, C};
  auto setup = [threads] { set_torch_threads(threads); };
  auto result = [st] { return st->y.data_ptr<float>(); };
  auto& in = st->in;
  auto* s = st.get();

  Impl nat{"torch natural", "", setup, nullptr, result};
  Impl out{"torch out=", "",
           [setup, s, out_shape, opts] {
             setup();
             s->y = at::empty(out_shape, opts);
           },
           nullptr, result};
  std::vector<Impl> extra;

  switch (w.kind) {
    case Kind::LogSoftmax:
      nat.run = [s] { s->y = at::log_softmax(s->in[0], 1); };
      out.run = [s] { at::log_softmax_out(s->y, s->in[0], 1); };
      extra.push_back(Impl{"torch composed", "x - logsumexp(x)", setup,
                           [s] { s->y = s->in[0] - at::logsumexp(s->in[0], {1}, true); }, result});
      break;
    case Kind::Softmax:
      nat.run = [s] { s->y = at::softmax(s->in[0], 1); };
      out.run = [s] { at::softmax_out(s->y, s->in[0], 1); };
      break;
    case Kind::LayerNorm:
      nat.run = [s, C] { s->y = at::layer_norm(s->in[0], {C}, s->in[1], s->in[2], kLayerNormEps); };
      out.setup = [setup, s, R, C, opts] {
        setup();
        s->y = at::empty({R, C}, opts);
        s->s1 = at::empty({R, 1}, opts);
        s->s2 = at::empty({R, 1}, opts);
      };
      out.run = [s, C] {
        at::native_layer_norm_out(s->y, s->s1, s->s2, s->in[0], {C}, s->in[1], s->in[2], kLayerNormEps);
      };
      break;
    case Kind::ReluFma:
      nat.run = [s] { s->y = at::relu(s->in[0] * s->in[1] + s->in[2]); };
      out.run = [s] {
        at::addcmul_out(s->y, s->in[2], s->in[0], s->in[1]);
        s->y.relu_();
      };
      break;
    case Kind::Gelu:
      nat.run = [s] { s->y = at::gelu(s->in[0], "tanh"); };
      out.run = [s] { at::gelu_out(s->y, s->in[0], "tanh"); };
      break;
    case Kind::Chain3:
      nat.run = [s] {
        auto& a = s->in[0];
        s->y = at::tanh(a * 0.5 + s->in[1]) * at::sigmoid(s->in[2]) - at::exp(-(a * a));
      };
      out.setup = [setup, s, shape, opts] {
        setup();
        s->y = at::empty(shape, opts);
        s->t1 = at::empty(shape, opts);
        s->t2 = at::empty(shape, opts);
      };
      out.run = [s] {
        auto &a = s->in[0], &b = s->in[1], &c = s->in[2];
        at::add_out(s->t1, b, a, 0.5);  // b + 0.5 * a
        s->t1.tanh_();
        at::sigmoid_out(s->t2, c);
        s->t1.mul_(s->t2);
        at::mul_out(s->t2, a, a);
        s->t2.neg_().exp_();
        at::sub_out(s->y, s->t1, s->t2);
      };
      break;
    case Kind::Add:
      nat.run = [s] { s->y = s->in[0] + s->in[1]; };
      out.run = [s] { at::add_out(s->y, s->in[0], s->in[1]); };
      break;
    case Kind::Relu:
      nat.run = [s] { s->y = at::relu(s->in[0]); };
      out.run = [s] { at::clamp_min_out(s->y, s->in[0], 0); };
      break;
    case Kind::AddRelu:
      nat.run = [s] { s->y = at::relu(s->in[0] + s->in[1]); };
      out.run = [s] {
        at::add_out(s->y, s->in[0], s->in[1]);
        s->y.relu_();
      };
      break;
    case Kind::SumAxis0:
      nat.run = [s] { s->y = s->in[0].sum(0); };
      out.run = [s] { at::sum_out(s->y, s->in[0], at::IntArrayRef{0}); };
      break;
    case Kind::SumAxis1:
      nat.run = [s] { s->y = s->in[0].sum(1); };
      out.run = [s] { at::sum_out(s->y, s->in[0], at::IntArrayRef{1}); };
      break;
    case Kind::SumAll:
      nat.run = [s] { s->y = s->in[0].sum(); };
      out.run = [s] { at::sum_out(s->y, s->in[0], at::IntArrayRef{0, 1}); };
      break;
    case Kind::Chain10:
      nat.run = [s] {
        auto t = at::square(at::tanh(s->in[0] * 1.5 + 0.5));
        s->y = at::sqrt(at::sigmoid(at::log(at::relu(t - 0.25) + 1)));
      };
      out.run = [s] {
        s->y.copy_(s->in[0]);
        s->y.mul_(1.5).add_(0.5).tanh_().square_().sub_(0.25).relu_().add_(1).log_().sigmoid_().sqrt_();
      };
      out.note = "copy + 10 in-place ops";
      break;
    case Kind::Stack:
      nat.run = [s] { s->y = at::stack(s->in, 1); };
      out.run = [s] { at::stack_out(s->y, s->in, 1); };
      break;
    default: return {};
  }
  (void)in;
  std::vector<Impl> v{nat, out};
  for (auto& e : extra) v.push_back(e);
  return v;
}

}  // namespace kbench
