// The GPU dialects (CUDA and OpenCL C: type names, literal suffixes, address spaces, warp and
// group limits), the render knobs read from Options, and the launch arithmetic of a rendered
// stage (units of work, groups). Separate from gpu_render.cpp: these are facts about targets and
// launches, not about writing a kernel.
#include <algorithm>
#include <string>

#include "gpu_render.hpp"
#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail::gpu {

const Dialect& cuda_dialect() {
  static const Dialect d{"cuda",
                         "cuda/prelude.cu.tmpl",
                         "unsigned char",
                         "int",
                         "long long",
                         "unsigned int",
                         "unsigned long long",
                         "LL",
                         "f",
                         "",
                         "",
                         true,
                         32,
                         256,
                         int64_t{1} << 20};
  return d;
}
const Dialect& opencl_dialect() {
  static const Dialect d{"opencl",   "opencl/prelude.cl.tmpl",
                         "uchar",    "int",
                         "long",     "uint",
                         "ulong",    "L",
                         "",         "__global ",
                         "__local ", false,
                         1,          256,
                         4096};
  return d;
}

RenderKnobs render_knobs(const Options& o) {
  if (o.gpu_gemm_tile != 0 && o.gpu_gemm_tile != 64 && o.gpu_gemm_tile != 128)
    throw UserError("Options::gpu_gemm_tile (KFUSE_GPU_GEMM_TILE) is " + std::to_string(o.gpu_gemm_tile) +
                    ": use 0 (default), 64 or 128");
  return {o.gpu_gemm_tile == 128 ? 0 : o.gpu_gemm_tile};
}

std::string render_options_key(const Options& o) {
  const RenderKnobs k = render_knobs(o);
  return k.gemm_tile ? "gpu_gemm_tile=" + std::to_string(k.gemm_tile) : std::string();
}

const char* team_name(Team t) { return t == Team::Thread ? "thread" : t == Team::Warp ? "warp" : "block"; }

int64_t stage_units(const Stage& s, const ir::Kernel& k, const std::vector<int64_t>& params) {
  if (s.vec > 1) return (ir::outer_points(k, params) + s.vec - 1) / s.vec;
  if (s.tile_m == 0) return ir::outer_points(k, params) * s.units_per_outer;
  const size_t n = k.outer.size();
  int64_t u = 1;
  for (size_t i = 0; i + 2 < n; ++i) u *= ir::eval_index(k.outer[i], params);
  const int64_t m = ir::eval_index(k.outer[n - 2], params), nn = ir::eval_index(k.outer[n - 1], params);
  return u * ((m + s.tile_m - 1) / s.tile_m) * ((nn + s.tile_n - 1) / s.tile_n);
}

int64_t groups_for(const Stage& s, const Dialect& d, int64_t units) {
  if (units <= 0) return 0;
  const int64_t per = s.team == Team::Thread ? s.block : s.team == Team::Warp ? s.block / d.warp_size : 1;
  return std::min<int64_t>((units + per - 1) / per, d.max_groups);
}

}  // namespace kfuse::detail::gpu
