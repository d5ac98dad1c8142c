// Polynomial and range-reduction constants of the f32 math that kfuse defines itself.
//
// THE single source of these numbers: the composite ops' decomposition (decompose.cpp: sigmoid,
// silu, gelu in both forms, which every backend runs or mirrors) and the xbyak injectors (exp,
// log, tanh, erf, and their fused forms of the composites) take them from here, so that the
// backends compute the same functions; tests/backends/test_ulp_table.cpp measures each backend.
//
// Provenance: exp's range reduction and log follow the classic Cephes single-precision code
// (expf, logf); the exp polynomial and the tanh rational are our own fits (scripts/fit_math.py,
// which prints these literals and their measured bounds); erf is the widely published odd/even rational fit on [-4, 4]
// (also used by Eigen and XLA). The algorithms around them are described next to each group.
#pragma once
#include <cstdint>

namespace kfuse::ir::mathc {

// ---- exp(x) = 2^n * P(r), n = round(x*log2e), r = x - n*ln2 (two-part ln2, Cody-Waite) ----
// Inputs are clamped to [kExpLo, kExpHi] (NaN kept); 2^n is applied as 2^(n>>1) * 2^(n-(n>>1))
// so that subnormal results and the overflow to +inf are both exact.
inline constexpr float kExpHi = 89.0f;    // exp(89) > FLT_MAX -> inf
inline constexpr float kExpLo = -104.0f;  // exp(-104) < FLT_TRUE_MIN/2 -> 0
// Functions that multiply exp of a very negative argument by something of magnitude <= |x|
// (gelu, silu) flush it to 0 below kExpNormalLo, where exp(x) < 1.7e-38 would be subnormal:
// the product is below 1e-36 either way, and subnormal operands and results cost the AMD cores
// a microcode assist each (xbyak gelu_tanh on inputs in [-40, 40]: 1.45 against 0.69 ns/element).
inline constexpr float kExpNormalLo = -87.0f;
inline constexpr double kExpNormalLoD = -708.0;  // (f64: exp(-708) > DBL_MIN)
// gelu (erf) scales its exp by t/2 >= 1/12 before the product: flushed below this instead.
inline constexpr float kGeluErfExpLo = -84.0f;
inline constexpr float kExp2Hi = 129.0f;
inline constexpr float kExp2Lo = -151.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kLn2 = 0.693147180559945309f;
// exp(r) = 1 + r + r^2 (kExpP[4] + kExpP[3] r + ... + kExpP[0] r^4),  |r| <= ln2/2, evaluated
// as Horner from kExpP[0] and two final FMAs with 1 (6 FMAs). Our own fit (scripts/fit_math.py):
// max 0.97 ulp in f32 after the reduction; it replaced the Cephes form 1 + r + r^2 P(r), a
// degree higher and two vector ops more per exp (exp is in every softmax-family kernel).
inline constexpr float kExpP[5] = {1.335789566e-03f, 8.354433812e-03f, 4.167241231e-02f, 1.666666269e-01f,
                                   5.000000596e-01f};

// ---- log(x): x = m * 2^e, m in [sqrt(1/2), sqrt(2)), f = m - 1 ----
// log(x) = f - f^2/2 + f^3 * P(f) + e*ln2 (ln2 split as kLn2Hi + kLn2Lo).
inline constexpr float kSqrtHalf = 0.707106781186547524f;
inline constexpr float kLogP[9] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                                   -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                                   2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
inline constexpr float kMinNormal = 1.17549435e-38f;
inline constexpr float kTwo23 = 8388608.0f;

// ---- tanh(x) = x * P(x^2) / Q(x^2), x clamped to [-kTanhClamp, kTanhClamp] (NaN kept) ----
// A rational fit of our own (scripts/fit_math.py: minimax of the relative error by linear
// programming, then f32 rounding tuned against the f32 evaluation): 8 FMAs and one reciprocal,
// no exp and no branch-free select of two formulas (the Cephes small-|x| polynomial plus
// 1 - 2/(exp(2|x|) + 1) cost twice as many vector ops, which bounded tanh-heavy chains on one
// core). Odd by construction: tanh(-0) = -0, tanh(+-inf) = +-1. Measured bound: README
// "xbyak backend" (about 5 ulp, from the Horner rounding at large x; ops.def allows 6e-7).
// P and Q: coefficients of s^4 .. s^0 (Horner in s = x^2).
inline constexpr float kTanhClamp = 9.125f;  // tanh rounds to 1 in f32 above 9.01
inline constexpr float kTanhP[5] = {1.319681520e-08f, 2.050080911e-05f, 3.489266615e-03f, 1.337579638e-01f,
                                    1.000000000e+00f};
inline constexpr float kTanhQ[5] = {7.713599643e-07f, 3.275111958e-04f, 2.585321665e-02f, 4.670911431e-01f,
                                    1.000000000e+00f};

// ---- sigmoid(x) = e/(1+e) with e = exp(-|x|) mirrored: x >= 0 ? 1/(1+e) : e/(1+e) ----
// (no cancellation for large negative x: the subnormal tail is kept)

// ---- erf(x) = x * (A(x^2) / B(x^2)) on x clamped to [-4, 4] ----
inline constexpr float kErfClamp = 4.0f;
// A: coefficients of x^12 .. x^0 (Horner in x^2), B: x^8 .. x^0
inline constexpr float kErfA[7] = {-2.72614225801306e-10f, 2.77068142495902e-08f,  -2.10102402082508e-06f,
                                   -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                                   -1.60960333262415e-02f};
inline constexpr float kErfB[5] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                                   -7.37332916720468e-03f, -1.42647390514189e-02f};

// ---- erfc(a), a >= 0 (used by gelu, erf form, to avoid the cancellation of 1 + erf(x) for x < 0) ----
// erfc(a) = t * exp(-a^2 + C(t)), t = 1 / (1 + a/2): the Chebyshev fit of Numerical Recipes
// ("erfcc", fractional error < 1.2e-7 for all a >= 0). C: coefficients of t^9 .. t^0. The argument
// is clamped to kErfcClamp (erfc(12)/2 rounds to 0 in f32, so gelu(-inf) = -inf * 0 = NaN like the reference) and a^2
// is split exactly (fma).
inline constexpr float kErfcClamp = 12.0f;
inline constexpr float kErfcC[10] = {0.17087277f,  -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                     -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};

// expm1(x) = -1 in f32 below this
inline constexpr float kExpm1MinusOne = -18.0f;

// ---- gelu ----
inline constexpr double kSqrtHalfD = 0.7071067811865476;   // gelu(erf form) = x * erfc(-x/sqrt2) / 2
inline constexpr double kGeluTanhKD = 0.7978845608028654;  // sqrt(2/pi)
inline constexpr double kGeluTanhCD = 0.044715;
inline constexpr float kSqrtHalfF = static_cast<float>(kSqrtHalfD);
inline constexpr float kGeluTanhK = static_cast<float>(kGeluTanhKD);
inline constexpr float kGeluTanhC = static_cast<float>(kGeluTanhCD);
// gelu(tanh form) = x * sigmoid(2k (x + c x^3)), identical to 0.5 x (1 + tanh(k (x + c x^3))).

}  // namespace kfuse::ir::mathc
