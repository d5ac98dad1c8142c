// Generated code of a fixed kernel set, pinned: a digest per (form, kernel) in
// tests/golden/codegen.txt beside the version that must change with it. Two uses:
//  - a refactor that means to change nothing shows that it changed nothing (the digests hold);
//  - a change of generated code must bump the version that keys the disk cache (kCodegenVersion
//    for the kernel IR every backend lowers, the backend's codegen_version() for its own output),
//    or a disk cache would go on serving code of the old form: a digest that moved while its
//    version did not is the failure this test exists for.
// After an intended change (and the bump): KFUSE_UPDATE_GOLDEN=1 build/tests/kfuse_tests
// --gtest_filter='CodegenGolden.*' rewrites the file; commit it with the change.
//
// Forms: the canonical kernel IR (kfuse::ir::print_kernel), xbyak's AVX2 machine code (AVX2
// runs on AVX-512 machines too, and its bytes depend on nothing else), and the GPU renderer's
// CUDA and OpenCL source (no device needed). LLVM's output is not pinned: its IR carries the
// host CPU's name and vector widths, so it differs between machines by design.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#ifdef KFUSE_TEST_GPU_RENDER
#include "../../jit/gpu/gpu_render.hpp"
#endif
#include "../../jit/xbyak/xbyak_backend.hpp"
#include "../test_util.hpp"
#include "cache/key.hpp"
#include "ir/kernel.hpp"
#include "kfuse/index_ops.hpp"
#include "kfuse/kfuse.hpp"
#include "kfuse/options.hpp"
#include "kfuse/quantize.hpp"
#include "runtime/plan.hpp"

#ifndef KFUSE_SOURCE_DIR
#error "KFUSE_SOURCE_DIR must name the source tree (tests/CMakeLists.txt)"
#endif

namespace kfuse::test {
namespace {

// The fixed set: one graph per kernel family the planner emits.
std::vector<std::pair<std::string, std::vector<Tensor>>> graphs() {
  auto t = [](Shape s, uint64_t seed) {
    int64_t n = 1;
    for (auto d : s) n *= d;
    return make_tensor(random_values(static_cast<size_t>(n), seed), s);
  };
  Tensor a = t({37, 70}, 1), b = t({37, 70}, 2), c = t({70}, 3), w = t({70, 29}, 4), bias = t({29}, 5);
  Tensor ids = make_tensor({3, 0, 5, 5, 1, 2}, {6}, DType::I64), offs = make_tensor({0, 2, 2}, {3}, DType::I64);
  Tensor table = t({7, 12}, 6);
  Tensor m3 = matmul(t({2, 19, 70}, 8), w);                // batches fold into M; two outputs: a scratch C
  QuantizedTable q4 = quantize_rowwise(t({7, 13}, 7), 4);  // (stored first: the bag is then one kernel)
  eval({q4.values, q4.scale_bias});
  return {
      {"pointwise relu(a*b+c)", {relu(a * b + c)}},
      {"softmax", {softmax(a, -1)}},
      {"log_softmax", {log_softmax(a, -1)}},
      {"layer_norm", {layer_norm(a, {70}, c, c + 1.0)}},
      {"gelu_tanh", {gelu(a, true)}},
      {"sum axis 0", {sum(a, 0)}},
      {"centre columns", {a - mean(a, 0, true)}},
      {"matmul bias relu", {relu(matmul(a, w) + bias)}},
      {"batched matmul, two outputs", {m3, m3 * 0.5}},
      {"embedding_bag", {embedding_bag(table, ids, offs, BagMode::Mean)}},
      {"embedding_bag 4-bit", {embedding_bag(dequantize_rowwise(q4), ids, offs, BagMode::Sum)}},
      {"rand", {rand(Shape{37, 70}, 42) * a}},
  };
}

struct Pins {
  std::map<std::string, std::pair<int, std::string>> by_name;  // "form/kernel" -> (version, digest)
};

std::string golden_path() { return std::string(KFUSE_SOURCE_DIR) + "/tests/golden/codegen.txt"; }

Pins read_pins() {
  Pins p;
  std::ifstream f(golden_path());
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    // version digest name (the name may hold spaces)
    std::istringstream s(line);
    int v = 0;
    std::string d, name;
    s >> v >> d;
    std::getline(s >> std::ws, name);
    p.by_name[name] = {v, d};
  }
  return p;
}

// Digests of every form of every kernel of the set, with the version that covers each form.
Pins compute_pins() {
  Pins p;
  auto xb = detail::xb::make_backend(detail::xb::Isa::Avx2);
  for (const auto& [gname, ys] : graphs()) {
    std::vector<NodeRef> roots;
    for (const Tensor& y : ys) roots.push_back(y.node());
    auto plan = detail::make_plan(roots, /*compile=*/false, options());
    int i = 0;
    for (const auto& pk : plan->kernels) {
      const ir::Kernel& k = pk.lowered.kernel;
      const std::string name = gname + " #" + std::to_string(i++);
      const std::string ir_text = ir::print_kernel(k);
      p.by_name["ir/" + name] = {detail::cache::kCodegenVersion,
                                 detail::cache::digest_hex(ir_text.data(), ir_text.size())};
      auto cr = xb->compile(k);
      if (cr.kernel) {
        size_t off = 0, size = cr.kernel->binary.size();
        std::string what;
        xb->code_range(cr.kernel->binary, &off, &size, &what);
        p.by_name["xbyak-avx2/" + name] = {xb->codegen_version(),
                                           detail::cache::digest_hex(cr.kernel->binary.data() + off, size)};
      }
#ifdef KFUSE_TEST_GPU_RENDER
      for (const auto* d : {&detail::gpu::cuda_dialect(), &detail::gpu::opencl_dialect()}) {
        detail::gpu::Rendered r;
        std::string why;
        if (detail::gpu::try_render(k, *d, r, why))
          p.by_name[std::string(d->name) + "/" + name] = {detail::gpu::kRenderVersion,
                                                          detail::cache::digest_hex(r.source.data(), r.source.size())};
      }
#endif
    }
  }
  return p;
}

TEST(CodegenGolden, DigestsMoveOnlyWithTheirVersion) {
  if (!detail::xb::cpu_supports(detail::xb::Isa::Avx2)) GTEST_SKIP() << "no AVX2: xbyak's code cannot be generated";
  const Pins now = compute_pins();
  ASSERT_GT(now.by_name.size(), 20u) << "the kernel set produced too few forms";
  if (const char* u = std::getenv("KFUSE_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream f(golden_path());
    f << "# version digest form/kernel: tests/backends/test_xbyak_codegen_golden.cpp (regenerate with\n"
         "# KFUSE_UPDATE_GOLDEN=1 after bumping the version of every form whose code changed)\n";
    for (const auto& [name, vd] : now.by_name) f << vd.first << " " << vd.second << " " << name << "\n";
    GTEST_SKIP() << "rewrote " << golden_path();
  }
  const Pins was = read_pins();
  ASSERT_FALSE(was.by_name.empty()) << golden_path() << " is missing or empty";
  int moved = 0;
  for (const auto& [name, vd] : now.by_name) {
    auto it = was.by_name.find(name);
    if (it == was.by_name.end()) {
      ADD_FAILURE() << name << ": not in " << golden_path() << " (a new kernel or form: regenerate it)";
      continue;
    }
    const auto& [v0, d0] = it->second;
    if (vd.second == d0 && vd.first == v0) continue;
    ++moved;
    // A backend form of a kernel whose IR moved too is keyed anew by that IR's text (KeyFields::
    // ir_text): it needs no version bump of its own, only new digests.
    const size_t slash = name.find('/');
    auto ir_it = was.by_name.find("ir/" + name.substr(slash + 1));
    const bool ir_moved = name.compare(0, slash, "ir") != 0 && ir_it != was.by_name.end() &&
                          now.by_name.at("ir/" + name.substr(slash + 1)).second != ir_it->second.second;
    if (vd.first == v0 && !ir_moved)
      ADD_FAILURE() << name << ": the generated code changed but its version is still " << v0
                    << ": bump it (ir: kCodegenVersion; else the backend's codegen_version()) so that disk "
                       "caches drop code of the old form, then regenerate the digests";
    else
      ADD_FAILURE() << name << ": version " << v0 << " -> " << vd.first
                    << (vd.second == d0 ? " with the same code (bumped for nothing?)" : "")
                    << ": regenerate the digests with KFUSE_UPDATE_GOLDEN=1";
  }
  for (const auto& [name, vd] : was.by_name)
    if (!now.by_name.count(name)) ADD_FAILURE() << name << ": pinned but no longer generated (regenerate)";
  EXPECT_EQ(moved, 0);
}

}  // namespace
}  // namespace kfuse::test
