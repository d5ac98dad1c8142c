// One renderer from kernel IR (lib/ir/kernel.hpp) to C-like GPU source, driven by a dialect
// table (CUDA C++ for NVRTC, OpenCL C 1.2). Kernel skeletons live in templates/ and are embedded
// into the library at build time (gpu_templates.hpp).
//
// Strategy (README "GPU backends"): every launch runs a grid-stride loop over WORK UNITS; a unit
// is processed by a TEAM of lanes:
//   Team::Thread  one thread per unit (pointwise kernels, a unit of V elements with 16-byte vector
//                 accesses when every access is contiguous; column reductions: coalesced, serial
//                 over the reduce domain in reference order)
//   Team::Warp    one warp per unit, xor-shuffle reductions (CUDA, short rows)
//   Team::Block   one block / work-group per unit, tree reduction in shared/local memory
// A unit is an outer point (single-stage kernels: every phase in one launch, accumulators
// broadcast to the team), or, for two-stage column/global reductions, an (outer point, chunk)
// pair in stage 1 (fixed-size chunks write partials) and an outer point in stage 2 (partials
// combined in fixed order, then the remaining phases). Lanes fold strided reduce indices in
// increasing order and combine through a fixed tree, so results do not depend on the grid size.
// Contraction kernels (matmul) in the GEMM form run "gemm-tiled" instead: a unit is a tile of C,
// computed by a block through shared/local memory (gemm_render.cpp, templates/gpu/gemm.tmpl).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/kernel.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail::gpu {

/// The renderer's code generator version, the OpenCL and CUDA backends' codegen_version():
/// bump it whenever rendered source may change for the same kernel IR (history in git log).
inline constexpr int kRenderVersion = 10;

/// The dialect table: everything that differs between the C-like GPU languages.
struct Dialect {
  const char* name;              ///< "cuda" | "opencl"
  const char* prelude_template;  ///< dialect macros: qualifiers, index builtins, barrier, shuffle
  // scalar types, by DType (bool is stored and computed as an unsigned byte)
  const char* t_bool;
  const char* t_i32;
  const char* t_i64;
  const char* t_u32;
  const char* t_u64;
  const char* i64_literal_suffix;  ///< "LL" | "L"
  const char* f32_math_suffix;     ///< float math names: expf (CUDA) vs overloaded exp (OpenCL)
  const char* global_qual;         ///< pointer qualifier of kernel buffers
  const char* local_qual;          ///< pointer qualifier into shared/local memory
  bool warp_shuffle;               ///< __shfl_xor_sync available (PoCL has no sub-groups)
  int warp_size;
  int block_size;      ///< threads per block for thread/warp teams and long rows
  int64_t max_groups;  ///< grid cap (the grid-stride loop covers the rest)
};
const Dialect& cuda_dialect();
const Dialect& opencl_dialect();

enum class Team { Thread, Warp, Block };
const char* team_name(Team t);

/// One launch of the program.
struct Stage {
  std::string entry;  ///< kernel function name
  Team team = Team::Thread;
  int block = 1;                ///< threads per block / work-group
  int64_t units_per_outer = 1;  ///< units = outer points * this
  bool uses_scratch = false;    ///< takes the partials buffer as its last argument
  /// gemm-tiled: a unit is one tile_m x tile_n tile of the last two outer dims (per batch point).
  int tile_m = 0, tile_n = 0;
  /// pointwise-vec: a unit is this many consecutive outer points (one vector access per buffer).
  int vec = 1;
  /// Blocks one multiprocessor should hold at once (CUDA: __launch_bounds__' second argument, which
  /// caps the registers per lane to fit them); 1: no such request.
  int min_blocks = 1;
};

struct Rendered {
  std::string source;
  std::string strategy;       ///< pointwise | pointwise-vec{2,4,8} | row-warp | row-block | serial | two-stage-thread |
                              ///< two-stage-block | gemm-tiled
  std::vector<Stage> stages;  ///< launches per run, in order
  int64_t split = 1;          ///< chunks per outer point (two-stage)
  int64_t scratch_slots = 0;  ///< 8-byte partial slots per stage-1 unit
  bool uses_f64 = false;
  int num_params = 0;  ///< the params argument holds max(1, this) int64 values
};

/// Thrown when a kernel uses something this renderer does not support: backends decline it.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Code knobs of the renderer (Options, each in the backends' cache key when set).
struct RenderKnobs {
  int gemm_tile = 0;  ///< Options::gpu_gemm_tile: 0 by dtype, 64 the 64 x 64 tiling of 4-byte GEMMs
};

/// The knobs `o` sets; throws UserError when Options::gpu_gemm_tile is neither 0, 64 nor 128.
RenderKnobs render_knobs(const Options& o);
/// Backend::options_key of the GPU backends: the knobs set, "" when none is.
std::string render_options_key(const Options& o);

Rendered render(const ir::Kernel& k, const Dialect& d, const RenderKnobs& knobs = {});
/// render(), or false with `declined` set ("<dialect>: why") when the kernel is unsupported.
bool try_render(const ir::Kernel& k, const Dialect& d, Rendered& out, std::string& declined,
                const RenderKnobs& knobs = {});

/// The work units of stage `s` for a launch with these param values.
int64_t stage_units(const Stage& s, const ir::Kernel& k, const std::vector<int64_t>& params);
/// Work-groups / blocks to launch for `units` work units (0 when there is nothing to do).
int64_t groups_for(const Stage& s, const Dialect& d, int64_t units);

/// A template by its path under templates/ (embedded at build time).
const char* template_text(const std::string& name);

}  // namespace kfuse::detail::gpu
