// oneDNN implementations (primitives created once, outside the timed call). oneDNN from Debian
// uses the OpenMP runtime: the thread count is set with omp_set_num_threads.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>

#include "peers.hpp"

namespace kbench {

std::string dnnl_version_string() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

namespace {

using dnnl::algorithm;
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Step {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
};

struct State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::vector<float> y, t1, t2;
  std::vector<Step> steps;
  void run() {
    for (auto& s : steps) s.prim.execute(strm, s.args);
    strm.wait();
  }
};

memory mem(State& st, const memory::desc& md, const float* p) { return memory(md, st.eng, const_cast<float*>(p)); }

int post_arg(int idx) { return DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1; }

dnnl::primitive_attr with_post_ops(const dnnl::post_ops& po) {
  dnnl::primitive_attr a;
  a.set_post_ops(po);
  return a;
}

void eltwise(State& st, algorithm alg, float alpha, float beta, const memory& src, const memory& dst,
             const dnnl::post_ops& po = {}, std::unordered_map<int, memory> extra = {}) {
  dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, src.get_desc(), alpha, beta);
  dnnl::eltwise_forward::primitive_desc pd(d, with_post_ops(po), st.eng);
  extra[DNNL_ARG_SRC] = src;
  extra[DNNL_ARG_DST] = dst;
  st.steps.push_back({dnnl::eltwise_forward(pd), std::move(extra)});
}

void binary(State& st, algorithm alg, const memory& a, const memory& b, const memory& dst,
            const dnnl::post_ops& po = {}, std::unordered_map<int, memory> extra = {}) {
  dnnl::binary::desc d(alg, a.get_desc(), b.get_desc(), dst.get_desc());
  dnnl::binary::primitive_desc pd(d, with_post_ops(po), st.eng);
  extra[DNNL_ARG_SRC_0] = a;
  extra[DNNL_ARG_SRC_1] = b;
  extra[DNNL_ARG_DST] = dst;
  st.steps.push_back({dnnl::binary(pd), std::move(extra)});
}

void reduce_sum(State& st, const memory& src, const memory& dst) {
  dnnl::reduction::desc d(algorithm::reduction_sum, src.get_desc(), dst.get_desc(), 0.f, 0.f);
  dnnl::reduction::primitive_desc pd(d, st.eng);
  st.steps.push_back({dnnl::reduction(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}});
}

// GEMM workloads: dnnl_sgemm (the BLAS-style call) and the matmul primitive; for the MLP block
// the primitive with bias and a gelu post-op, then the layer_norm primitive.
std::vector<Impl> dnnl_gemm_impls(const Workload& w, int threads) {
  const memory::dim M = w.rows, N = w.cols, K = w.inner;
  auto setup = [threads] { omp_set_num_threads(threads); };
  auto st = std::make_shared<State>();
  st->y.assign(static_cast<size_t>(M * N), 0.0f);
  // b_t: B [K, N] is W [N, K] row-major, i.e. B in column-major (tag::ba)
  // bf16 and u8 x s8 rows: the matmul primitive on that memory (bf16 result of f32 sums; s32
  // result), its result converted for the check
  if (w.stored_narrow()) {
    const bool q = w.u8s8;
    memory::desc a_md({M, K}, q ? dt::u8 : dt::bf16, tag::ab),
        b_md({K, N}, q ? dt::s8 : dt::bf16, w.b_t ? tag::ba : tag::ab), c_md({M, N}, q ? dt::s32 : dt::bf16, tag::ab);
    auto c = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(M * N) * (q ? 4 : 2));
    auto in = [&](size_t i) { return const_cast<uint8_t*>(w.inputs_stored[i].data()); };
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), st->eng);
    st->steps.push_back({dnnl::matmul(pd),
                         {{DNNL_ARG_SRC, memory(a_md, st->eng, in(0))},
                          {DNNL_ARG_WEIGHTS, memory(b_md, st->eng, in(1))},
                          {DNNL_ARG_DST, memory(c_md, st->eng, c->data())}}});
    return {Impl{"onednn matmul", std::string(q ? "u8 x s8 -> s32, " : "bf16, ") + pd.impl_info_str(), setup,
                 [st] { st->run(); },
                 [st, c, q] {
                   for (size_t i = 0; i < st->y.size(); ++i) {
                     if (q) {
                       int32_t v;
                       std::memcpy(&v, c->data() + 4 * i, 4);
                       st->y[i] = static_cast<float>(v);
                     } else {
                       const uint32_t u = static_cast<uint32_t>((*c)[2 * i] | (*c)[2 * i + 1] << 8) << 16;
                       std::memcpy(&st->y[i], &u, 4);
                     }
                   }
                   return static_cast<const float*>(st->y.data());
                 }}};
  }
  memory::desc a_md({M, K}, dt::f32, tag::ab), b_md({K, N}, dt::f32, w.b_t ? tag::ba : tag::ab),
      c_md({M, N}, dt::f32, tag::ab);
  memory a = mem(*st, a_md, w.inputs[0].data()), b = mem(*st, b_md, w.inputs[1].data());
  std::vector<Impl> v;
  std::string note;
  if (w.kind == Kind::Matmul) {
    auto gs = std::make_shared<std::vector<float>>(static_cast<size_t>(M * N));
    const float* pa = w.inputs[0].data();
    const float* pb = w.inputs[1].data();
    const char tb = w.b_t ? 'T' : 'N';
    const memory::dim ldb = w.b_t ? K : N;
    v.push_back(Impl{"onednn sgemm", "dnnl_sgemm", setup,
                     [=] { dnnl_sgemm('N', tb, M, N, K, 1.0f, pa, K, pb, ldb, 0.0f, gs->data(), N); },
                     [gs] { return static_cast<const float*>(gs->data()); }});
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(d, st->eng);
    st->steps.push_back(
        {dnnl::matmul(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, mem(*st, c_md, st->y.data())}}});
  } else {
    st->t1.assign(static_cast<size_t>(M * N), 0.0f);
    memory::desc bias_md({1, N}, dt::f32, tag::ab);
    memory t1 = mem(*st, c_md, st->t1.data());
    dnnl::post_ops po;
    po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
    dnnl::matmul::desc d(a_md, b_md, bias_md, c_md);
    dnnl::matmul::primitive_desc pd(d, with_post_ops(po), st->eng);
    st->steps.push_back({dnnl::matmul(pd),
                         {{DNNL_ARG_SRC, a},
                          {DNNL_ARG_WEIGHTS, b},
                          {DNNL_ARG_BIAS, mem(*st, bias_md, w.inputs[2].data())},
                          {DNNL_ARG_DST, t1}}});
    dnnl::layer_normalization_forward::desc ld(dnnl::prop_kind::forward_inference, c_md, kLayerNormEps,
                                               dnnl::normalization_flags::none);
    dnnl::layer_normalization_forward::primitive_desc lpd(ld, st->eng);
    st->steps.push_back(
        {dnnl::layer_normalization_forward(lpd), {{DNNL_ARG_SRC, t1}, {DNNL_ARG_DST, mem(*st, c_md, st->y.data())}}});
    note = "matmul + bias + gelu post-op, then layer_norm";
  }
  v.push_back(Impl{"onednn matmul", note, setup, [st] { st->run(); },
                   [st] { return static_cast<const float*>(st->y.data()); }});
  return v;
}

// Attention from primitives: a batched matmul scaled by an output scale, softmax, a batched matmul.
std::vector<Impl> dnnl_attention_impls(const Workload& w, int threads) {
  const memory::dim B = w.batch, T = w.rows, D = w.cols;
  auto st = std::make_shared<State>();
  st->y.assign(static_cast<size_t>(B * T * D), 0.0f);
  st->t1.assign(static_cast<size_t>(B * T * T), 0.0f);
  st->t2.assign(static_cast<size_t>(B * T * T), 0.0f);
  memory::desc x_md({B, T, D}, dt::f32, tag::abc), kt_md({B, D, T}, dt::f32, tag::acb),
      s_md({B, T, T}, dt::f32, tag::abc);
  memory q = mem(*st, x_md, w.inputs[0].data()), kt = mem(*st, kt_md, w.inputs[1].data()),
         v = mem(*st, x_md, w.inputs[2].data());
  memory s = mem(*st, s_md, st->t1.data()), p = mem(*st, s_md, st->t2.data()), y = mem(*st, x_md, st->y.data());
  dnnl::primitive_attr scaled;
  scaled.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(D))});
  dnnl::matmul::primitive_desc qk(dnnl::matmul::desc(x_md, kt_md, s_md), scaled, st->eng);
  st->steps.push_back({dnnl::matmul(qk), {{DNNL_ARG_SRC, q}, {DNNL_ARG_WEIGHTS, kt}, {DNNL_ARG_DST, s}}});
  dnnl::softmax_v2_forward::desc sd(dnnl::prop_kind::forward_inference, algorithm::softmax_accurate, s_md, s_md, 2);
  st->steps.push_back({dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(sd, st->eng)),
                       {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, p}}});
  dnnl::matmul::primitive_desc pv(dnnl::matmul::desc(s_md, x_md, x_md), st->eng);
  st->steps.push_back({dnnl::matmul(pv), {{DNNL_ARG_SRC, p}, {DNNL_ARG_WEIGHTS, v}, {DNNL_ARG_DST, y}}});
  return {Impl{"onednn", "matmul (output scale), softmax, matmul", [threads] { omp_set_num_threads(threads); },
               [st] { st->run(); }, [st] { return static_cast<const float*>(st->y.data()); }}};
}

}  // namespace

std::vector<Impl> dnnl_impls(const Workload& w, int threads) {
  // A primitive fixes its thread count when it is created (its descriptor plans the work for the
  // OpenMP threads of that moment), not when it runs: set it before any is made. Created after a
  // 1-thread row with no other peer resetting OpenMP, the 2-thread rows' primitives ran on one
  // thread (`--peers onednn`: the matmul primitive 20.3 ms at "2 threads" for 1024^3).
  omp_set_num_threads(threads);
  if (w.kind == Kind::Compile || w.kind == Kind::CacheHit || w.kind == Kind::EmbeddingBag) return {};
  if (w.kind == Kind::Attention) return dnnl_attention_impls(w, threads);
  if (w.gemm()) return dnnl_gemm_impls(w, threads);
  auto st = std::make_shared<State>();
  const memory::dim R = w.rows, C = w.cols, N = w.numel();
  const bool oned = w.one_d() || w.kind == Kind::Add || w.kind == Kind::Relu || w.kind == Kind::AddRelu;
  memory::desc md = oned ? memory::desc({N}, dt::f32, tag::a) : memory::desc({R, C}, dt::f32, tag::ab);
  st->y.assign(static_cast<size_t>(std::max<int64_t>(w.out_numel, 1)), 0.0f);
  std::vector<memory> in;
  for (size_t i = 0; i < w.inputs.size(); ++i) {
    if (w.kind == Kind::LayerNorm && i > 0)
      in.push_back(mem(*st, memory::desc({C}, dt::f32, tag::a), w.inputs[i].data()));
    else in.push_back(mem(*st, md, w.inputs[i].data()));
  }
  memory y = mem(*st, md, st->y.data());
  std::string note;
  switch (w.kind) {
    case Kind::LogSoftmax:
    case Kind::Softmax: {
      auto alg = w.kind == Kind::LogSoftmax ? algorithm::softmax_log : algorithm::softmax_accurate;
      dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, md, 1);
      dnnl::softmax_v2_forward::primitive_desc pd(d, st->eng);
      st->steps.push_back({dnnl::softmax_v2_forward(pd), {{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DST, y}}});
      break;
    }
    case Kind::LayerNorm: {
      auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, kLayerNormEps, flags);
      dnnl::layer_normalization_forward::primitive_desc pd(d, st->eng);
      st->steps.push_back(
          {dnnl::layer_normalization_forward(pd),
           {{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DST, y}, {DNNL_ARG_SCALE, in[1]}, {DNNL_ARG_SHIFT, in[2]}}});
      break;
    }
    case Kind::ReluFma: {
      dnnl::post_ops po;
      po.append_binary(algorithm::binary_add, md);
      po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      binary(*st, algorithm::binary_mul, in[0], in[1], y, po, {{post_arg(0), in[2]}});
      note = "binary mul + post-ops add, relu";
      break;
    }
    case Kind::Gelu: eltwise(*st, algorithm::eltwise_gelu_tanh, 0.f, 0.f, in[0], y); break;
    case Kind::Chain3: {
      // oneDNN 2.6 gave wrong results with eltwise post-op chains here (eltwise primitives ignore
      // post-ops, binary ones mis-applied eltwise_linear), so this is one primitive per op.
      st->t1.assign(static_cast<size_t>(N), 0.f);
      st->t2.assign(static_cast<size_t>(N), 0.f);
      memory t1 = mem(*st, md, st->t1.data()), t2 = mem(*st, md, st->t2.data());
      eltwise(*st, algorithm::eltwise_linear, 0.5f, 0.f, in[0], t1);  // t1 = 0.5 a
      binary(*st, algorithm::binary_add, t1, in[1], t1);              // t1 += b
      eltwise(*st, algorithm::eltwise_tanh, 0.f, 0.f, t1, t1);
      eltwise(*st, algorithm::eltwise_logistic, 0.f, 0.f, in[2], t2);  // t2 = sigmoid(c)
      binary(*st, algorithm::binary_mul, t1, t2, t1);                  // t1 *= t2
      binary(*st, algorithm::binary_mul, in[0], in[0], t2);            // t2 = a * a
      eltwise(*st, algorithm::eltwise_linear, -1.f, 0.f, t2, t2);      // t2 = -a*a
      eltwise(*st, algorithm::eltwise_exp, 0.f, 0.f, t2, t2);
      binary(*st, algorithm::binary_sub, t1, t2, y);
      note = "9 primitives (post-op chains were wrong in this oneDNN)";
      break;
    }
    case Kind::Add: binary(*st, algorithm::binary_add, in[0], in[1], y); break;
    case Kind::Relu: eltwise(*st, algorithm::eltwise_relu, 0.f, 0.f, in[0], y); break;
    case Kind::AddRelu: {
      dnnl::post_ops po;
      po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      binary(*st, algorithm::binary_add, in[0], in[1], y, po);
      note = "binary add + post-op relu";
      break;
    }
    case Kind::SumAxis0: reduce_sum(*st, in[0], mem(*st, memory::desc({1, C}, dt::f32, tag::ab), st->y.data())); break;
    case Kind::SumAxis1: reduce_sum(*st, in[0], mem(*st, memory::desc({R, 1}, dt::f32, tag::ab), st->y.data())); break;
    case Kind::SumAll: reduce_sum(*st, in[0], mem(*st, memory::desc({1, 1}, dt::f32, tag::ab), st->y.data())); break;
    case Kind::Chain10: {
      // One primitive per op (see Chain3: post-op chains gave wrong results in oneDNN 2.6).
      eltwise(*st, algorithm::eltwise_linear, 1.5f, 0.5f, in[0], y);
      eltwise(*st, algorithm::eltwise_tanh, 0.f, 0.f, y, y);
      eltwise(*st, algorithm::eltwise_square, 0.f, 0.f, y, y);
      eltwise(*st, algorithm::eltwise_linear, 1.f, -0.25f, y, y);
      eltwise(*st, algorithm::eltwise_relu, 0.f, 0.f, y, y);
      eltwise(*st, algorithm::eltwise_linear, 1.f, 1.f, y, y);
      eltwise(*st, algorithm::eltwise_log, 0.f, 0.f, y, y);
      eltwise(*st, algorithm::eltwise_logistic, 0.f, 0.f, y, y);
      eltwise(*st, algorithm::eltwise_sqrt, 0.f, 0.f, y, y);
      note = "9 primitives (x*1.5+0.5 is one)";
      break;
    }
    case Kind::Stack: {  // the concat primitive over [R, 1, C] views of the parts
      const memory::desc part({R, 1, C}, dt::f32, tag::abc), all({R, w.inner, C}, dt::f32, tag::abc);
      std::vector<memory::desc> srcs(static_cast<size_t>(w.inner), part);
      dnnl::concat::primitive_desc pd(all, 1, srcs, st->eng);
      std::unordered_map<int, memory> args{{DNNL_ARG_DST, mem(*st, all, st->y.data())}};
      for (size_t i = 0; i < w.inputs.size(); ++i)
        args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = mem(*st, part, w.inputs[i].data());
      st->steps.push_back({dnnl::concat(pd), std::move(args)});
      note = "concat primitive";
      break;
    }
    default: return {};
  }
  Impl im{"onednn", note, [threads] { omp_set_num_threads(threads); }, [st] { st->run(); },
          [st] { return static_cast<const float*>(st->y.data()); }};
  return {im};
}

}  // namespace kbench
