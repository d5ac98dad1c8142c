#!/usr/bin/python3
"""Fits the f32 polynomial/rational coefficients of the xbyak math injectors that are our own
(lib/ir/math_constants.hpp: kExpP, kTanhP/kTanhQ) and prints them with the measured bound.

Both fits follow the same two steps:
1. Minimax of the relative error in real arithmetic, by linear programming on a Chebyshev grid.
2. The coefficients are rounded to f32, then nudged by +-1 ulp (seeded local search) to minimise
   the error of the f32 evaluation the backend performs (Horner with FMA, as in injectors.hpp),
   measured in ulps on a few hundred thousand points against the f64 function.
Requires python3-numpy and python3-scipy (Debian); not needed to build kfuse.
Usage: scripts/fit_math.py [exp|tanh]...   (default: both)
"""
import sys

import numpy as np
from scipy.optimize import linprog

f32 = np.float32
RNG = np.random.default_rng(7)


def fma(a, b, c):  # f32 fused multiply-add (the f64 product of two f32 is exact)
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(f32)


def horner(cs, s):
    p = np.full_like(s, cs[0])
    for k in cs[1:]:
        p = fma(p, s, k)
    return p


def max_ulps(got, ref):
    return np.max(np.abs(got.astype(np.float64) - ref) / np.spacing(ref.astype(f32)).astype(np.float64))


def nudge(coeffs, err, fixed=(), rounds=800):
    """Local search over +-1 ulp moves of the f32 coefficients (indices in `fixed` stay)."""
    best = err(coeffs)
    for _ in range(rounds):
        cand = [a.copy() for a in coeffs]
        for j, a in enumerate(cand):
            for i in range(len(a)):
                if (j, i) not in fixed and RNG.random() < 0.4:
                    a[i] = np.nextafter(a[i], f32(np.inf) if RNG.random() < 0.5 else f32(-np.inf))
        e = err(cand)
        if e < best:
            best, coeffs = e, cand
    return coeffs, best


# ---- exp(r) = 1 + r + c2 r^2 + ... + c6 r^6 on |r| <= ln2/2, evaluated as
#      p = c6; p = p r + c5 .. c2; p = p r + 1; p = p r + 1 (6 FMAs), after Cody-Waite reduction ----
def fit_exp():
    N, h = 2000, np.log(2) / 2
    r = h * np.cos(np.pi * (np.arange(N) + 0.5) / N)
    f = np.exp(r)
    A = np.vstack([r**i for i in range(2, 7)]).T / f[:, None]  # unknowns c2..c6 and the bound d
    b = (1 + r - f) / f
    res = linprog(np.r_[np.zeros(5), 1.0],
                  A_ub=np.vstack([np.hstack([A, -np.ones((N, 1))]), np.hstack([-A, -np.ones((N, 1))])]),
                  b_ub=np.r_[-b, b], bounds=[(None, None)] * 6, method="highs")
    c = res.x[:5][::-1].astype(f32)  # c6 .. c2
    x = np.concatenate([RNG.uniform(-87, 88, 400000), RNG.uniform(-2, 2, 200000)]).astype(f32)
    ref = np.exp(x.astype(np.float64))
    log2e, ln2hi, ln2lo = f32(1.44269504088896341), f32(0.693359375), f32(-2.12194440e-4)
    n = np.round((x * log2e).astype(f32)).astype(f32)
    rr = fma(-n, ln2lo, fma(-n, ln2hi, x))

    def err(cs):
        p = fma(fma(horner(cs[0], rr), rr, f32(1)), rr, f32(1))
        return max_ulps(p.astype(np.float64) * np.exp2(n.astype(np.float64)), ref)

    (c,), e = nudge([c], err)
    print("inline constexpr float kExpP[5] = {%s};" % ", ".join("%.9ef" % v for v in c))
    print("// f32 evaluation: max %.2f ulp on [-87, 88] (%d points)" % (e, x.size))


# ---- tanh(x) = x P(x^2) / Q(x^2) on [0, 9.125], P and Q of degree 4, P(0) = Q(0) = 1 ----
def tanh_minimax(c, N):
    x = c * (1 - np.cos(np.pi * (np.arange(N) + 0.5) / N)) / 2
    u = (x / c) ** 2  # scaled variable: conditioning
    g = np.tanh(x) / x
    Sp = np.vstack([u**i for i in range(1, 5)]).T
    Sq = np.vstack([u**i for i in range(1, 5)]).T

    def rel_err(sol):
        return np.max(np.abs((1 + Sp @ sol[:4]) / (1 + Sq @ sol[4:]) - g) / g)

    lo, hi, best = 0.0, 1e-2, None
    for _ in range(60):  # bisection on the bound d: |P - g Q| <= d g Q is linear for fixed d
        d = (lo + hi) / 2
        w = 1 / (g * d)  # rows scaled so the solver's absolute tolerance is relative to d
        A1 = w[:, None] * np.hstack([Sp, -(g * (1 + d))[:, None] * Sq])
        A2 = w[:, None] * np.hstack([-Sp, (g * (1 - d))[:, None] * Sq])
        r = linprog(np.zeros(8), A_ub=np.vstack([A1, A2]),
                    b_ub=np.r_[w * (g * (1 + d) - 1), w * (1 - g * (1 - d))],
                    bounds=[(None, None)] * 8, method="highs")
        if r.status == 0 and rel_err(r.x) < 1.5 * d:
            hi, best = d, r.x
        else:
            lo = d
        if hi - lo < 1e-3 * hi:
            break
    scale = c ** (2 * np.arange(1, 5))
    p = np.r_[1.0, best[:4] / scale][::-1].astype(f32)  # s^4 .. s^0
    q = np.r_[1.0, best[4:] / scale][::-1].astype(f32)
    return p, q


def fit_tanh():
    c = f32(9.125)  # tanh rounds to 1 in f32 above 9.01
    x = np.unique(np.concatenate([RNG.uniform(0, 9.2, 300000),
                                  np.exp(RNG.uniform(np.log(1e-4), np.log(9.2), 200000))]).astype(f32))
    ref = np.tanh(x.astype(np.float64))
    xc = np.minimum(x, c)
    s = (xc * xc).astype(f32)

    def err(pq):
        y = (xc * horner(pq[0], s)).astype(f32) * (1 / horner(pq[1], s).astype(np.float64)).astype(f32)
        return max_ulps(y.astype(f32), ref)

    starts = [tanh_minimax(float(c), N) for N in (2000, 2500, 3000, 4000)]  # the LP varies with the grid
    (p, q), e = nudge(list(min(starts, key=lambda pq: err(list(pq)))), err, fixed={(0, 4), (1, 4)})
    print("inline constexpr float kTanhP[5] = {%s};" % ", ".join("%.9ef" % v for v in p))
    print("inline constexpr float kTanhQ[5] = {%s};" % ", ".join("%.9ef" % v for v in q))
    print("// f32 evaluation: max %.2f ulp on [0, %g] (%d points)" % (e, c, x.size))


if __name__ == "__main__":
    for name in sys.argv[1:] or ["exp", "tanh"]:
        {"exp": fit_exp, "tanh": fit_tanh}[name]()
