// The software f16/bf16 conversions (rules in include/kfuse/half.hpp). Integer bit
// manipulation only, so the result never depends on the FPU rounding mode or on flush-to-zero.
#include "kfuse/half.hpp"

#include <bit>

namespace kfuse {

uint16_t float_to_f16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  // 65520 = 0x477ff000 is the tie between 65504 (odd mantissa) and 2^16: even is infinity.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {  // f16 normal: rebias the exponent (127 - 15 = 112), round 13 bits
    const uint32_t r = ax - 0x38000000u;
    return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));  // a carry bumps the exponent
  }
  // f16 subnormal (units of 2^-24) or zero. Below 2^-25 everything rounds to 0; 2^-25 itself is
  // a tie that goes to the even 0.
  const uint32_t e = ax >> 23;
  if (e < 102) return sign;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;  // value = m * 2^(e - 150)
  const uint32_t shift = 126 - e;                   // 14 .. 24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // may reach 0x400, the smallest normal
  return static_cast<uint16_t>(sign | h);
}

float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);  // inf, or a quiet NaN
  } else if (e != 0) {
    x = sign | ((e + 112) << 23) | (m << 13);
  } else if (m == 0) {
    x = sign;
  } else {                             // subnormal: normalise (m * 2^-24 with m < 2^10)
    int s = std::countl_zero(m) - 21;  // shifts that bring the top bit to bit 10
    x = sign | static_cast<uint32_t>(113 - s) << 23 | ((m << s) & 0x3ffu) << 13;
  }
  return std::bit_cast<float>(x);
}

uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);                  // overflow carries into inf
}

float bf16_bits_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace kfuse
