// The tiled GEMM writer of the C-like GPU renderer (gemm_render.cpp), private to jit/gpu/.
#pragma once
#include <string>

#include "render_expr.hpp"

namespace kfuse::detail::gpu {

/// The kernel of a contraction in the GEMM form as one "gemm-tiled" launch: its source into
/// `kernels` (entry point `name`) and its launch into `stage`. False, with nothing written, when
/// the kernel is not in that form. `gemm_tile`: RenderKnobs::gemm_tile.
bool render_gemm(rx::Ctx& c, const std::string& name, int gemm_tile, std::string& kernels, Stage& stage);

}  // namespace kfuse::detail::gpu
