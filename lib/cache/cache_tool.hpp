// The kfuse-cache command line (tools/kfuse_cache.cpp is a thin main over this; tests call it
// directly). Commands: list, show, stats, why-miss, verify, prune, clear, path, machine (the
// machine model of lib/prof); `--help` on each.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace kfuse::detail::cache {

struct ToolHooks {
  /// Disassembles x86-64 machine code placed at `address`; false when it cannot. Supplied by the
  /// tool when it is built with LLVM (the library itself never links LLVM).
  std::function<bool(const uint8_t* code, size_t size, uint64_t address, std::string* text)> disassemble_x86;
  /// Printed with the hex dump when there is no disassembler.
  std::string no_disassembler_reason = "kfuse-cache was built without LLVM (no MC disassembler)";
};

/// Runs one kfuse-cache command line (args excludes the program name). Returns the exit code:
/// 0 success, 1 failure (bad key, problems found by verify, ...), 2 usage error.
int run_cache_tool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   const ToolHooks& hooks = {});

/// "1.5 KiB", "3.0 MiB"; "12s", "5m", "3h", "2d".
std::string human_bytes(uint64_t n);
std::string human_age(int64_t seconds);
/// "4096", "64K", "10M", "1G" (powers of 1024); "30s", "15m", "12h", "7d". False on bad input.
bool parse_bytes(const std::string& s, uint64_t* out);
bool parse_duration(const std::string& s, int64_t* seconds);

}  // namespace kfuse::detail::cache
