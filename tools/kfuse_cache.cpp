// kfuse-cache: a thin main over lib/cache/cache_tool (README "kfuse-cache"). When LLVM is found
// at configure time this file also supplies the x86 disassembler for `show` (LLVM MC); the
// library itself never links LLVM.
#include <iostream>
#include <string>
#include <vector>

#include "cache/cache_tool.hpp"

#ifdef KFUSE_CACHE_TOOL_LLVM
#include <llvm-c/Disassembler.h>
#include <llvm-c/Target.h>

#include <cstdio>

namespace {
bool disassemble_x86(const uint8_t* code, size_t size, uint64_t address, std::string* text) {
  LLVMInitializeX86TargetInfo();
  LLVMInitializeX86TargetMC();
  LLVMInitializeX86Disassembler();
  LLVMDisasmContextRef dc = LLVMCreateDisasmCPU("x86_64-unknown-linux-gnu", "x86-64-v4", nullptr, 0, nullptr, nullptr);
  if (!dc) return false;
  LLVMSetDisasmOptions(dc, LLVMDisassembler_Option_AsmPrinterVariant | LLVMDisassembler_Option_PrintImmHex);
  size_t pos = 0;
  char line[256];
  while (pos < size) {
    size_t n =
        LLVMDisasmInstruction(dc, const_cast<uint8_t*>(code + pos), size - pos, address + pos, line, sizeof line);
    char addr[32];
    std::snprintf(addr, sizeof addr, "  %6llx:", static_cast<unsigned long long>(address + pos));
    *text += addr;
    if (n == 0) {
      char b[16];
      std::snprintf(b, sizeof b, "\t.byte 0x%02x\n", code[pos]);
      *text += b;
      ++pos;
      continue;
    }
    *text += line;
    *text += "\n";
    pos += n;
  }
  LLVMDisasmDispose(dc);
  return true;
}
}  // namespace
#endif

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  kfuse::detail::cache::ToolHooks hooks;
#ifdef KFUSE_CACHE_TOOL_LLVM
  hooks.disassemble_x86 = disassemble_x86;
#endif
  return kfuse::detail::cache::run_cache_tool(args, std::cout, std::cerr, hooks);
}
