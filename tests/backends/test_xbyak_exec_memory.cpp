// The xbyak backend's executable memory (jit/xbyak/exec_memory.cpp): code lands intact on
// read+execute pages that are never writable at the same time, runs, and freed pages are reused
// and handed back to the system once a chunk is empty.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../jit/xbyak/exec_memory.hpp"

namespace kfuse::detail::xb {
namespace {

// "mov eax, imm32; ret", then filler up to n bytes.
std::vector<uint8_t> return_const(uint32_t v, size_t n) {
  std::vector<uint8_t> c{0xb8, uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24), 0xc3};
  for (size_t i = c.size(); i < n; ++i) c.push_back(uint8_t(i * 7 + v));
  return c;
}

// The permissions /proc/self/maps gives the mapping that holds `p` ("r-xp", ...).
std::string perms_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream is(line);
    std::string range, perms;
    is >> range >> perms;
    auto dash = range.find('-');
    uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16),
              hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (a >= lo && a < hi) return perms;
  }
  return "unmapped";
}

TEST(XbyakExecMemory, CodeRunsFromReadExecutePages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<std::unique_ptr<ExecMem>> mems;
  std::vector<std::vector<uint8_t>> codes;
  // Sizes around page multiples, and one larger than a chunk (its own mapping).
  const size_t sizes[] = {6, 100, page - 1, page, page + 1, 3 * page + 5, 70 * page};
  for (int round = 0; round < 3; ++round)
    for (size_t n : sizes) {
      codes.push_back(return_const(static_cast<uint32_t>(codes.size() * 1000 + n), n));
      mems.push_back(std::make_unique<ExecMem>(codes.back().data(), n));
    }
  for (size_t i = 0; i < mems.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(mems[i]->entry());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % page, 0u);
    EXPECT_EQ(0, std::memcmp(p, codes[i].data(), codes[i].size())) << "kernel " << i;
    EXPECT_EQ(perms_of(p), "r-xp") << "kernel " << i << " must be executable and not writable";
    auto fn = reinterpret_cast<uint32_t (*)()>(const_cast<void*>(mems[i]->entry()));
    uint32_t want;
    std::memcpy(&want, codes[i].data() + 1, 4);
    EXPECT_EQ(fn(), want) << "kernel " << i;
  }
  // Free every other kernel, then allocate again: freed pages are reused, and what is still
  // held is untouched.
  for (size_t i = 0; i < mems.size(); i += 2) mems[i].reset();
  for (size_t i = 0; i < mems.size(); i += 2) {
    codes[i] = return_const(static_cast<uint32_t>(i + 7), codes[i].size());
    mems[i] = std::make_unique<ExecMem>(codes[i].data(), codes[i].size());
  }
  for (size_t i = 0; i < mems.size(); ++i) {
    auto fn = reinterpret_cast<uint32_t (*)()>(const_cast<void*>(mems[i]->entry()));
    uint32_t want;
    std::memcpy(&want, codes[i].data() + 1, 4);
    EXPECT_EQ(fn(), want) << "kernel " << i;
  }
  mems.clear();
  // Chunks emptied are unmapped (one is kept for the next kernel); chunks that also hold code
  // still cached by earlier tests stay.
  const size_t base = exec_arena_mapped_pages();
  std::vector<std::unique_ptr<ExecMem>> many;
  auto c = return_const(1, 2 * page);
  for (int i = 0; i < 200; ++i) many.push_back(std::make_unique<ExecMem>(c.data(), c.size()));
  EXPECT_GE(exec_arena_mapped_pages(), 400u);
  many.clear();
  EXPECT_LE(exec_arena_mapped_pages(), base + 64);
}

}  // namespace
}  // namespace kfuse::detail::xb
