// Online softmax and pipelined rows in the xbyak backend (jit/xbyak/online.cpp): which kernels
// take them, results against the reference interpreter on rows built to hit every special case
// of the running maximum, and bitwise independence from how the rows are split into chunks and
// in which order a call runs them (row cursors, Frame::ways).
#include "test_xbyak_util.hpp"

namespace kfuse::xbt {
namespace {

using detail::xb::kOnlineMinReduce;

// out0[o] = m (max of x), out1[o] = s (sum of exp(x - m)): the two accumulators as stored values.
Kernel max_and_sum(int64_t R, int64_t C) {
  Kernel k = row_base("k_max_sum", 1, R, C);
  k.buffers.push_back({"out1", DType::F32, true});
  k.accs.push_back({AccKind::Max, DType::F32, row_x(C)});
  k.accs.push_back({AccKind::Sum, DType::F32, un(Op::Exp, bin(Op::Sub, row_x(C), acc(0, DType::F32)))});
  k.phases.push_back(reduce_phase({0}));
  k.phases.push_back(reduce_phase({1}));
  Phase once;
  once.stores.push_back({1, var(Space::Outer, 0), acc(0, DType::F32)});
  once.stores.push_back({2, var(Space::Outer, 0), acc(1, DType::F32)});
  k.phases.push_back(once);
  return k;
}

TEST(XbyakOnline, Plan) {
  detail::xb::Plan p;
  const int64_t C = kOnlineMinReduce;
  ASSERT_EQ("", detail::xb::analyze(softmax(8, C, true), p));
  EXPECT_EQ(p.online.phase, 0);
  EXPECT_EQ(p.online.max_acc, 0);
  EXPECT_EQ(p.online.sum_acc, 1);
  EXPECT_TRUE(p.pipeline);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, 3 * C + 7, false), p));
  EXPECT_TRUE(p.pipeline);
  ASSERT_EQ("", detail::xb::analyze(logsumexp(8, C), p));  // a once phase last: no pipeline
  EXPECT_EQ(p.online.phase, 0);
  EXPECT_FALSE(p.pipeline);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, C - 1, true), p));  // shorter rows: two loops, pipelined
  EXPECT_EQ(p.online.phase, -1);
  EXPECT_TRUE(p.pipeline);
  ASSERT_EQ("", detail::xb::analyze(rms_norm(8, 100), p));
  EXPECT_TRUE(p.pipeline);
  EXPECT_FALSE(p.reuse);  // x*x: cheaper to compute again than to store and load
  // softmax stores exp(x - m) / s: the exp of the sum loop is kept in a scratch row
  ASSERT_EQ("", detail::xb::analyze(softmax(8, 1000, false), p));
  ASSERT_TRUE(p.reuse);
  EXPECT_EQ(p.scratch_bytes, 4000 + 32);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, 1000, true), p));  // log_softmax stores no exp
  EXPECT_FALSE(p.reuse);
  // Long softmax rows keep their exps too (two loops and the scratch row: one exp per element
  // instead of two) below kOnlineOverReuse; from there on they take the online loop, whose sums
  // are relative to a running maximum, and recompute the exps (one loop reads row i while the
  // previous row is written: faster on one core once the row no longer fits in L1).
  using detail::xb::kOnlineOverReuse;
  static_assert(kOnlineOverReuse > kOnlineMinReduce && kOnlineOverReuse <= detail::xb::kReuseMaxReduce);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, C, false), p));
  EXPECT_TRUE(p.reuse);
  EXPECT_EQ(p.online.phase, -1);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, kOnlineOverReuse - 1, false), p));
  EXPECT_TRUE(p.reuse);
  EXPECT_EQ(p.online.phase, -1);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, kOnlineOverReuse, false), p));
  EXPECT_FALSE(p.reuse);
  EXPECT_EQ(p.scratch_bytes, 0);
  EXPECT_EQ(p.online.phase, 0);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, detail::xb::kReuseMaxReduce + 1, false), p));
  EXPECT_FALSE(p.reuse);
  EXPECT_EQ(p.online.phase, 0);
  // a sum of exps that is not the online pair's (exp(2x - m) after a max of x) keeps the
  // scratch row at any length
  Kernel e = softmax(8, kOnlineOverReuse, false);
  ExprRef ev = un(Op::Exp, bin(Op::Sub, bin(Op::Mul, row_x(kOnlineOverReuse), f32c(2)), acc(0, DType::F32)));
  e.accs[1].value = ev;
  e.phases[2].stores[0].value = bin(Op::Div, ev, acc(1, DType::F32));
  ASSERT_EQ("", detail::xb::analyze(e, p));
  EXPECT_EQ(p.online.phase, -1);
  EXPECT_TRUE(p.reuse);
  ASSERT_EQ("", detail::xb::analyze(softmax(8, 10, false), p));  // rows across lanes
  EXPECT_FALSE(p.reuse);
  // layer_norm: x, weight, bias, y. The weight and bias do not move with the row: the previous
  // row's pointers of x and y only, 6 pointers in all.
  ASSERT_EQ("", detail::xb::analyze(layer_norm(8, C), p));
  EXPECT_EQ(p.online.phase, -1);
  EXPECT_TRUE(p.pipeline);
  std::vector<int> prev_ptr;
  EXPECT_EQ(detail::xb::stream_pointers(p, p.pipeline, &prev_ptr), 6);
  ASSERT_EQ(prev_ptr.size(), 4u);
  int fixed = 0;
  for (int a = 0; a < 4; ++a) fixed += prev_ptr[static_cast<size_t>(a)] == a ? 1 : 0;
  EXPECT_EQ(fixed, 2);
  // with a weight and a bias per row, all four move: 8 pointers do not fit, one row at a time
  Kernel ln_rows = layer_norm(8, C);
  for (auto& st : ln_rows.phases[2].stores)
    st.value = bin(Op::Add, bin(Op::Mul, bin(Op::Sub, row_x(C), f32c(1)), load(1, DType::F32, row_index(C))),
                   load(2, DType::F32, row_index(C)));
  ASSERT_EQ("", detail::xb::analyze(ln_rows, p));
  EXPECT_FALSE(p.pipeline);
  EXPECT_EQ(detail::xb::stream_pointers(p, true), 8);
  EXPECT_EQ(detail::xb::stream_pointers(p, p.pipeline), 4);
  // the sum is not over exp(v - m) of the same v: no match
  Kernel k = softmax(8, C, true);
  k.accs[1].value = un(Op::Exp, bin(Op::Sub, bin(Op::Mul, row_x(C), f32c(2)), acc(0, DType::F32)));
  ASSERT_EQ("", detail::xb::analyze(k, p));
  EXPECT_EQ(p.online.phase, -1);
}

// Row r of [R, C] built to exercise one case of the running maximum and its fix-ups.
std::vector<float> special_rows(int64_t R, int64_t C, uint64_t seed) {
  auto x = inputs(static_cast<size_t>(R * C), seed, -4, 4, 0);
  auto row = [&](int64_t r) { return x.data() + r * C; };
  for (int64_t r = 0; r < R; ++r) {
    float* v = row(r);
    switch (r % 14) {
      case 0: break;  // random
      case 1:
        for (int64_t j = 0; j < C; ++j) v[j] = -8 + 0.01f * j;
        break;  // grows every block
      case 2:
        for (int64_t j = 0; j < C; ++j) v[j] = 8 - 0.01f * j;
        break;  // max in the first vector
      case 3:
        for (int64_t j = 0; j < C; ++j) v[j] = -INFINITY;
        break;  // m = -inf: s = NaN
      case 4:
        for (int64_t j = 0; j < C / 2; ++j) v[j] = -INFINITY;
        break;                             // -inf, then numbers
      case 5: v[0] = NAN; break;           // NaN first
      case 6: v[C - 1] = NAN; break;       // NaN in the tail
      case 7: v[C / 3] = INFINITY; break;  // +inf: rescan, no NaN
      case 8:
        v[C / 3] = INFINITY;
        v[C - 2] = NAN;
        break;  // +inf and NaN
      case 9:
        for (int64_t j = 0; j < C; ++j) v[j] *= 1e29f;
        break;  // huge magnitudes
      case 10:
        for (int64_t j = 0; j < C; ++j) v[j] = 0.75f;
        break;  // all equal
      case 11:
        for (int64_t j = 0; j < C - 1; ++j) v[j] = -INFINITY;
        break;  // one number, last
      case 12:
        for (int64_t j = 0; j < C; ++j) v[j] = j % 97 == 0 ? 88.0f : v[j];
        break;  // spikes near exp's limit
      case 13:
        for (int64_t j = 0; j < C; ++j) v[j] *= 30;
        break;  // wide range
    }
  }
  return x;
}

TEST(XbyakOnline, SpecialRowsMatchTheReference) {
  const int64_t W16 = 16;
  for (Isa isa : isas())
    for (int64_t C : {kOnlineMinReduce, kOnlineMinReduce + 5, kOnlineMinReduce + 3 * W16 + 7,
                      kOnlineMinReduce + 2 * W16, int64_t{4099}, int64_t{32000}, detail::xb::kReuseMaxReduce + 3}) {
      const int64_t R = C > 10000 ? 14 : 29;
      auto x = special_rows(R, C, 90 + C);
      const size_t n = static_cast<size_t>(R * C), r = static_cast<size_t>(R);
      std::string tag = " C=" + std::to_string(C);
      compare(max_and_sum(R, C), {x}, {r, r}, isa, {2e-6, 0}, "max and sum" + tag);
      compare(softmax(R, C, false), {x}, {n}, isa, {1e-5, 2e-7}, "softmax" + tag);
      compare(softmax(R, C, true), {x}, {n}, isa, {1e-5, 1e-5}, "log_softmax" + tag);
      compare(logsumexp(R, C), {x}, {r}, isa, {1e-5, 1e-5}, "logsumexp" + tag);
    }
}

// Pipelined rows run row i's loop together with row i-1's stores; a chunk's first row has no
// previous row and its last row's stores run after the loop. The results must be the same bits
// for any split of the rows (thread count, chunking): online and two-loop softmax rows, rms_norm,
// layer_norm (whose weight and bias pointers serve both rows).
TEST(XbyakOnline, PipelinedRowsChunkingIndependent) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    const int64_t R = 23;
    for (int64_t C : {int64_t{100}, kOnlineMinReduce + 37, detail::xb::kReuseMaxReduce + 5}) {
      auto x = special_rows(R, C, 7);
      auto w = inputs(static_cast<size_t>(C), 8, -2, 2, 0);
      auto b = inputs(static_cast<size_t>(C), 9, -2, 2, 0);
      for (const Kernel& k : {softmax(R, C, true), softmax(R, C, false), rms_norm(R, C), layer_norm(R, C)}) {
        auto c = be->compile(k);
        ASSERT_TRUE(c.kernel) << c.declined;
        auto run_rows = [&](int64_t first, int64_t n, std::vector<float>& out) {
          std::vector<void*> bufs{x.data() + first * C};
          if (k.num_inputs() > 1) bufs.push_back(w.data());
          if (k.num_inputs() > 2) bufs.push_back(b.data());
          bufs.push_back(out.data() + first * C);
          c.kernel->run(LaunchArgs{bufs, {n}});
        };
        const size_t on = static_cast<size_t>(R * C);
        std::vector<float> all(on, 1.0f);
        run_rows(0, R, all);
        for (int64_t chunk : {1, 2, 5, 22}) {
          std::vector<float> split(on, 1.0f);
          for (int64_t r0 = 0; r0 < R; r0 += chunk) run_rows(r0, std::min(chunk, R - r0), split);
          EXPECT_EQ(0, std::memcmp(all.data(), split.data(), on * 4)) << k.name << " C=" << C << " chunk=" << chunk;
        }
      }
    }
  }
}

// Options under which every call of a row kernel takes its rows from `ways` cursors (1: in order).
Options row_ways(int ways) {
  Options o;
  o.xbyak_row_ways = ways;
  return o;
}

// Row cursors (Frame::ways, emitter.cpp next_cursor): a call runs its rows round-robin from up to
// kMaxWays sub-ranges (sizes differing by one, fewer rows than 2 * ways: in order), pipelined
// rows carrying the previous row across cursors. The bits must be those of the rows in order,
// for every ways count and chunk split, row lengths with tails and both sides of the 2048 limit
// of the default (forced here for every length); against the reference too.
TEST(XbyakOnline, InterleavedRowsMatchInOrder) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    for (int64_t C : {int64_t{37}, int64_t{512}, int64_t{2048 + 5}})
      for (int64_t R : {int64_t{5}, int64_t{23}, int64_t{61}}) {
        auto x = special_rows(R, C, 17 + C + R);
        auto w = inputs(static_cast<size_t>(C), 18, -2, 2, 0);
        auto b = inputs(static_cast<size_t>(C), 19, -2, 2, 0);
        const size_t on = static_cast<size_t>(R * C), r = static_cast<size_t>(R);
        for (const Kernel& k :
             {softmax(R, C, true), softmax(R, C, false), rms_norm(R, C), layer_norm(R, C), max_and_sum(R, C)}) {
          const bool two = k.buffers.size() == 3 && k.num_inputs() == 1;  // max_and_sum: m, s per row
          auto run_rows = [&](int ways, int64_t first, int64_t n, std::vector<float>& out) {
            auto c = be->compile(k, row_ways(ways));
            ASSERT_TRUE(c.kernel) << c.declined;
            std::vector<void*> bufs{x.data() + first * C};
            if (k.num_inputs() > 1) bufs.push_back(w.data());
            if (k.num_inputs() > 2) bufs.push_back(b.data());
            if (two) {
              bufs.push_back(out.data() + first);
              bufs.push_back(out.data() + r + first);
            } else {
              bufs.push_back(out.data() + first * C);
            }
            c.kernel->run(LaunchArgs{bufs, {n}});
          };
          const size_t size = two ? 2 * r : on;
          std::vector<float> in_order(size, 1.0f);
          run_rows(1, 0, R, in_order);
          for (int ways : {2, 3, 4, detail::xb::kMaxWays}) {
            std::vector<float> all(size, 1.0f), split(size, 1.0f);
            run_rows(ways, 0, R, all);
            EXPECT_EQ(0, std::memcmp(in_order.data(), all.data(), size * 4))
                << k.name << " C=" << C << " R=" << R << " ways=" << ways;
            const int64_t half = R / 2 + 1;
            run_rows(ways, 0, half, split);
            run_rows(ways, half, R - half, split);
            EXPECT_EQ(0, std::memcmp(in_order.data(), split.data(), size * 4))
                << k.name << " C=" << C << " R=" << R << " ways=" << ways << " in two chunks";
          }
        }
        const std::string tag = " ways=3 C=" + std::to_string(C) + " R=" + std::to_string(R);
        compare(softmax(R, C, true), {x}, {on}, isa, {1e-5, 1e-5}, "log_softmax" + tag, row_ways(3));
        compare(layer_norm(R, C), {x, w, b}, {on}, isa, {1e-5, 1e-5}, "layer_norm" + tag, row_ways(3));
      }
  }
}

// Rows over a 2-D outer domain whose row order is not memory order (softmax over the last
// axis of a [B, A, C] tensor viewed as [A, B, C]): row (a, b) starts at (b*A + a)*C, so
// consecutive rows are not at a fixed stride and the previous row's pointers must be the saved
// ones. Against the reference, for the two-loop and the online row lengths, and chunk splits.
TEST(XbyakOnline, PipelinedRowsTwoOuterDims) {
  for (Isa isa : isas()) {
    auto be = detail::xb::make_backend(isa);
    for (int64_t C : {int64_t{37}, kOnlineMinReduce + 3}) {
      const int64_t A = 3, B = 5;
      Kernel k = skeleton("k_log_softmax_2d", ir::KernelKind::Row, 1);
      k.params = {{"outer0", A}, {"outer1", B}};
      k.outer = {param(0), param(1)};
      k.reduce = {C};
      // in[(o1*A + o0)*C + r0]; out in row order: out[(o0*B + o1)*C + r0]
      ExprRef in_idx = iadd(imul(iadd(imul(var(Space::Outer, 1), param(0)), var(Space::Outer, 0)), iconst(C)),
                            var(Space::Reduce, 0));
      ExprRef out_idx = iadd(imul(iadd(imul(var(Space::Outer, 0), param(1)), var(Space::Outer, 1)), iconst(C)),
                             var(Space::Reduce, 0));
      auto x = [&] { return load(0, DType::F32, in_idx); };
      k.accs.push_back({AccKind::Max, DType::F32, x()});
      k.accs.push_back({AccKind::Sum, DType::F32, un(Op::Exp, bin(Op::Sub, x(), acc(0, DType::F32)))});
      k.phases.push_back(reduce_phase({0}));
      k.phases.push_back(reduce_phase({1}));
      k.phases.push_back(reduce_phase(
          {}, {{1, out_idx, bin(Op::Sub, bin(Op::Sub, x(), acc(0, DType::F32)), un(Op::Log, acc(1, DType::F32)))}}));
      detail::xb::Plan p;
      ASSERT_EQ("", detail::xb::analyze(k, p));
      EXPECT_TRUE(p.pipeline);
      EXPECT_EQ(p.online.phase, C >= kOnlineMinReduce ? 0 : -1);
      const size_t n = static_cast<size_t>(A * B * C);
      auto xs = special_rows(A * B, C, 11 + C);
      for (int ways : {1, 3}) {  // row cursors carry both outer indices (next_cursor)
        compare(k, {xs}, {n}, isa, {1e-5, 1e-5},
                "log_softmax [B,A,C] rows C=" + std::to_string(C) + " ways=" + std::to_string(ways), row_ways(ways));
      }
    }
  }
}

}  // namespace
}  // namespace kfuse::xbt
