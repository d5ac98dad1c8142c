// Whether a kernel may write its output over one of its inputs: the runtime then hands the
// output the memory of an intermediate whose last reader is this kernel (no allocation, and
// the stores hit the lines the kernel has just read instead of fetching cold ones for
// ownership; lib/runtime/program.cpp, docs/fusion-and-ir.md "Outputs in place").
#pragma once
#include "kernel.hpp"

namespace kfuse::ir {

/// True when, by the kernel's semantics, every element of input `in` is read only at the point
/// that stores the element of output `out` at the same index, or in an earlier phase of that
/// point: the kernel has exactly one store (to `out`, in its last phase), at an index that
/// names every loop variable of that phase with no gather, division or modulo (each point its
/// own element), every load of `in` reads exactly that index, and both buffers have one dtype.
/// Pointwise and row kernels only: contraction and segment kernels read their inputs across
/// points. A backend must also run each point's loads before its store (CompiledKernel::
/// in_order_writes): the IR alone does not say how code orders them.
bool may_write_in_place(const Kernel& k, int in, int out);

}  // namespace kfuse::ir
