// Word-at-a-time hashing for the hot paths of recording and evaluation (node interning, the
// plan-cache key). Node keys are a handful of 64-bit words, so a streaming hasher's
// reset/update/digest calls cost more than the mixing itself; this folds one word per
// 64x64->128-bit multiply (the wyhash/mum construction) and finishes with an avalanche.
// Not a persistent format: values may change between builds (the disk cache never sees them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kfuse::detail {

inline uint64_t hash_mum(uint64_t a, uint64_t b) {
  __uint128_t m = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

struct WordHasher {
  static constexpr uint64_t kP0 = 0xa0761d6478bd642full, kP1 = 0xe7037ed1a0b428dbull;
  uint64_t h = 0x8ebc6af09c88c6e3ull;
  void add(uint64_t w) { h = hash_mum(h ^ kP0, w ^ kP1); }
  void add_words(const void* p, size_t n) {  // n 64-bit words, possibly unaligned
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      uint64_t w;
      std::memcpy(&w, b + 8 * i, 8);
      add(w);
    }
  }
  uint64_t digest() const {
    // murmur3 fmix64: every input bit reaches every output bit (shard and slot use both ends).
    uint64_t x = h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }
};

}  // namespace kfuse::detail
