#!/usr/bin/python3
"""Fits the erfc approximation of float GELU (tensor/kernels_exp.cpp) and prints its constants.

erfc(z) = t·P(t)·e^(−z²) for z >= 0, t = 1/(1 + p·z), p = 0.5, P of degree 10: P is fitted to
R(z) = erfc(z)·e^(z²) for the least maximum relative error over z in [0, 10.5] (past 10.5,
e^(−z²) is below float's smallest denormal), by least squares on Chebyshev nodes in t, then
Lawson's reweighting towards the minimax fit. Prints the coefficients rounded to float and the
maximum relative error of t·P(t) with them over 20,001 points, as kernels_exp.cpp quotes it.

Usage: /usr/bin/python3 scripts/fit_erfc.py   (needs python3-numpy)
"""
import math

import numpy as np

P = 0.5
DEGREE = 10
ZMAX = 10.5


def r_exact(z):
    return math.erfc(z) * math.exp(z * z)


def basis(t):
    return np.vstack([t ** (j + 1) for j in range(DEGREE + 1)]).T


def main():
    n = 2000
    tmin = 1 / (1 + P * ZMAX)
    k = np.arange(n)
    t = (tmin + 1) / 2 + (1 - tmin) / 2 * np.cos(np.pi * (k + 0.5) / n)
    r = np.array([r_exact(z) for z in (1 / t - 1) / P])
    a = basis(t) / r[:, None]  # relative error: divide each row by the value
    weight = np.ones(n)
    for _ in range(30):
        sw = np.sqrt(weight)
        c = np.linalg.lstsq(a * sw[:, None], sw, rcond=None)[0]
        err = np.abs(a @ c - 1)
        weight = weight * err
        weight /= weight.sum()
    c32 = c.astype(np.float32)
    zt = np.linspace(0, ZMAX, 20001)
    tt = 1 / (1 + P * zt)
    rel = np.abs(basis(tt) @ c32.astype(np.float64) / np.array([r_exact(z) for z in zt]) - 1)
    print(f"p = {P}, degree {DEGREE}, z in [0, {ZMAX}]")
    for j, v in enumerate(c32):
        print(f"  c{j + 1} = {float(v):.9g}f")
    print(f"max relative error of t*P(t), float coefficients: {rel.max():.3g}")


if __name__ == "__main__":
    main()
