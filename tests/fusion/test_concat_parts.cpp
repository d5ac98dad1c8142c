// A concat of parts of one shape along an axis other than the innermost lowers to a kernel over
// one part's shape that stores each part at its offset along the axis (lower_group.cpp,
// concat_of_equal_parts): T stores per point, no chain of wheres over T masked loads. Checked:
// the lowered form (the domain, one store per part, no where) and where the masked form stays
// (unequal parts, the innermost axis); and the values against the fp64
// reference on every CPU backend, 1 and 2 threads, for 2-33 parts of odd sizes along each
// non-innermost axis, with computed, transposed, broadcast and sliced parts, in f32, i32 and f64.
#include <kfuse/options.hpp>

#include <string>
#include <vector>

#include "forced_backend.hpp"
#include "runtime/plan.hpp"

namespace kfuse::test {
namespace {

// The single kernel of ts's plan, lowered (not compiled).
ir::Kernel lowered(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> roots;
  for (const Tensor& t : ts) roots.push_back(t.node());
  auto plan = detail::make_plan(roots, /*compile=*/false, options());
  EXPECT_EQ(plan->kernels.size(), 1u);
  return plan->kernels.empty() ? ir::Kernel{} : plan->kernels[0].lowered.kernel;
}

size_t store_count(const ir::Kernel& k) {
  size_t n = 0;
  for (const auto& ph : k.phases) n += ph.stores.size();
  return n;
}

Tensor part(const Shape& s, uint64_t seed) {
  return make_tensor(random_values(static_cast<size_t>(count_of(s)), seed), s);
}

TEST(ConcatParts, EqualPartsLowerToOneStorePerPart) {
  std::vector<Tensor> parts;
  for (uint64_t p = 0; p < 5; ++p) parts.push_back(relu(part({3, 1, 7}, 200 + p) * 2.0));
  const ir::Kernel k = lowered({concat(parts, 1)});
  EXPECT_EQ(k.kind, ir::KernelKind::Pointwise);
  EXPECT_EQ(k.outer.size(), 3u) << ir::print_kernel(k);  // a part's [3, 1, 7]
  EXPECT_EQ(store_count(k), 5u) << ir::print_kernel(k);
  EXPECT_EQ(ir::print_kernel(k).find("where"), std::string::npos) << ir::print_kernel(k);
  // The masked form stays for parts of other extents along the axis and along the innermost axis.
  for (const ir::Kernel& m :
       {lowered({concat({parts[0], part({3, 2, 7}, 210)}, 1)}), lowered({concat({parts[0], parts[1]}, 2)})}) {
    EXPECT_EQ(store_count(m), 1u) << ir::print_kernel(m);
    EXPECT_NE(ir::print_kernel(m).find("where"), std::string::npos) << ir::print_kernel(m);
  }
}

class ConcatPartsOn : public ForcedBackend {};

TEST_P(ConcatPartsOn, ValuesMatchTheReference) {
  for (int threads : {1, 2}) {
    Options o = options();
    o.num_threads = threads;
    set_options(o);
    for (int parts : {2, 3, 9, 17, 33})
      for (DType dt : {DType::F32, DType::I32, DType::F64}) {
        if (dt == DType::F64 && GetParam() == "xbyak") continue;  // (xbyak takes f32 and narrower)
        const uint64_t seed = 300 + static_cast<uint64_t>(parts) * 7 + static_cast<uint64_t>(dt);
        // Along axis 0 of [parts x [5, 37]] and axis 1 of [parts x [4, 1, 19]]; each kind of part
        // in turn: computed, transposed, broadcast, sliced, plain.
        std::vector<Tensor> p0, p1;
        for (int p = 0; p < parts; ++p) {
          const uint64_t s = seed + static_cast<uint64_t>(p) * 3;
          switch (p % 5) {
            case 0: p0.push_back(abs(part({5, 37}, s).cast(dt)) + 1.0); break;
            case 1: p0.push_back(part({37, 5}, s).cast(dt).transpose()); break;
            case 2: p0.push_back(expand(part({1, 37}, s).cast(dt), {5, 37})); break;
            case 3: p0.push_back(part({7, 40}, s).cast(dt).slice({Range{1, 6}, Range{2, 39}})); break;
            default: p0.push_back(part({5, 37}, s).cast(dt));
          }
          p1.push_back(p % 2 ? part({4, 1, 19}, s + 1).cast(dt) * 3.0 : part({4, 1, 19}, s + 2).cast(dt));
        }
        for (const Tensor& y : {concat(p0, 0), concat(p1, 1)})
          EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-6, 1e-6))
              << GetParam() << " " << dtype_name(dt) << " " << parts << " parts, " << threads << " threads";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ConcatPartsOn, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kfuse::test
