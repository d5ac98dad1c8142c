// Shared by the CPU and OpenCL profiler tests (tests/unit/test_profile.cpp defines them).
#pragma once
#include <kfuse/profile.hpp>

namespace kfuse {
/// A fixed machine model (no measuring in tests).
MachineModel fake_machine();
/// Profiles the standard workloads on `dev` and checks launches, bytes and FLOPs against the plan.
void check_counts_equal_plan(Device dev);
}  // namespace kfuse
