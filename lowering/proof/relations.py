"""How a match's constants relate, and which parameters are products of them.

A proof with the constants as unknowns holds for every match of the same structure whose
constants stand in the same relations: the same signs, the same power-of-two magnitude, the same
order among themselves and their negations, and the same position of each product of two against
+-1. `signature` is that, as a hashable key; `constraints` states it to the solver. A parameter
the kernel needs (sigma, the scale) is an `Expr` over the constants when it is one of them, its
reciprocal, or a product or quotient of two (`express`), so the proof covers it too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

Expr = tuple[int, tuple[tuple[int, int], ...]]  # sign, ((constant index, exponent +-1), ...)


def _cmp(a: Fraction, b: Fraction | int) -> int:
    return (a > b) - (a < b)


def _log2(v: Fraction) -> int:
    """floor(log2 |v|) for a nonzero v."""
    n, d = abs(v.numerator), v.denominator
    e = n.bit_length() - d.bit_length()
    return e if (d << e if e >= 0 else d) <= (n if e >= 0 else n << -e) else e - 1


_MODERATE_EXP = 8
# magnitudes the coarse relations do not tell apart
_MODERATE = Fraction(1, 1 << _MODERATE_EXP), Fraction(1 << _MODERATE_EXP)


def signs(values: Sequence[Fraction]) -> tuple:
    """The coarse relations: each constant's sign, whether it is +-1, its magnitude (moderate,
    or its power of two outside that), and which pairs are equal, opposite or reciprocal. Forms
    whose constants differ instance by instance (a step, a beta) keep these."""
    single = tuple((_cmp(v, 0), abs(v.numerator) == v.denominator, _magnitude(v)) for v in values)
    # in integers: a pass meets thousands of instances, and Fraction arithmetic is slow
    terms = [(v.numerator, v.denominator) for v in values]
    pairs = tuple((p == r and q == s, p == -r and q == s, p * r == q * s, p * r == -q * s)
                  for i, (p, q) in enumerate(terms) for r, s in terms[i + 1:])
    return single, pairs


def _magnitude(v: Fraction) -> int | None:
    if v == 0:
        return None
    e = _log2(v)
    top = _MODERATE_EXP
    moderate = -top <= e < top or (e == top and abs(v.numerator) == v.denominator << top)
    return None if moderate else e


def sign_constraints(symbols: Sequence[Any], values: Sequence[Fraction]) -> list[Any]:
    """`signs` as conditions on `symbols`."""
    import z3

    out: list[Any] = []
    for c, v in zip(symbols, values):
        out.append(c > 0 if v > 0 else (c < 0 if v < 0 else c == 0))
        if abs(v) == 1:
            out.append(c == v)
        elif v and _magnitude(v) is None:
            mag = c if v > 0 else -c
            out += [mag >= _real(_MODERATE[0], c.ctx), mag <= _real(_MODERATE[1], c.ctx)]
        elif v:
            e = _log2(v)
            mag = c if v > 0 else -c
            out += [mag >= _real(Fraction(2) ** e, c.ctx), mag < _real(Fraction(2) ** (e + 1), c.ctx)]
    for i, (a, va) in enumerate(zip(symbols, values)):
        for b, vb in zip(symbols[i + 1:], values[i + 1:]):
            for holds, cond in ((va == vb, a == b), (va == -vb, a == -b), (va * vb == 1, a * b == 1),
                                (va * vb == -1, a * b == -1)):
                out.append(cond if holds else z3.Not(cond))
    return out


def box(v: Fraction, fine: bool) -> tuple[Fraction, Fraction]:
    """An interval holding every value a constant of value `v` may take under its relations
    (fine: `constraints`, else `sign_constraints`): its sign and magnitude band."""
    if v == 0 or abs(v) == 1:
        return v, v
    if not fine and _magnitude(v) is None:
        lo, hi = _MODERATE
    else:
        e = _log2(v)
        lo, hi = Fraction(2) ** e, Fraction(2) ** (e + 1)
    return (lo, hi) if v > 0 else (-hi, -lo)


def _real(v: Fraction, ctx: Any) -> Any:
    import z3

    return z3.RealVal(f"{v.numerator}/{v.denominator}", ctx)


def _singles(symbols: Sequence[Any], values: Sequence[Fraction]) -> list[Any]:
    out: list[Any] = []
    for c, v in zip(symbols, values):
        out.append(c > 0 if v > 0 else (c < 0 if v < 0 else c == 0))
        if v:
            e = _log2(v)
            lo, hi = Fraction(2) ** e, Fraction(2) ** (e + 1)
            mag = c if v > 0 else -c
            out += [mag >= _real(lo, c.ctx), mag < _real(hi, c.ctx)]
            if abs(v) == 1:
                out.append(mag == 1)
    return out


def signature(values: Sequence[Fraction]) -> tuple:
    one = Fraction(1)
    single = tuple((_cmp(v, 0), abs(v) == 1, _log2(v) if v else 0) for v in values)
    pairs = []
    for i, a in enumerate(values):
        for b in values[i + 1:]:
            pairs.append((_cmp(a, b), _cmp(a, -b), _cmp(a * b, one), _cmp(a * b, -one)))
    return single, tuple(pairs)


def constraints(symbols: Sequence[Any], values: Sequence[Fraction]) -> list[Any]:
    """The relations of `values` (signature) as conditions on `symbols` (z3 reals)."""
    def rel(x: Any, y: Any, c: int) -> Any:
        return x > y if c > 0 else (x < y if c < 0 else x == y)

    out = _singles(symbols, values)
    for i, (a, va) in enumerate(zip(symbols, values)):
        for b, vb in zip(symbols[i + 1:], values[i + 1:]):
            out += [rel(a, b, _cmp(va, vb)), rel(a, -b, _cmp(va, -vb)), rel(a * b, 1, _cmp(va * vb, Fraction(1))),
                    rel(a * b, -1, _cmp(va * vb, Fraction(-1)))]
    return out


def value_of(expr: Expr, values: Sequence[Fraction]) -> Fraction:
    sign, factors = expr
    out = Fraction(sign)
    for i, e in factors:
        out = out * values[i] if e > 0 else out / values[i]
    return out


def evaluate(e: Expr, values: Sequence[Fraction]) -> Fraction:
    """The value of an `express` result at the constants `values`."""
    sign, factors = e
    out = Fraction(sign)
    for i, exp in factors:
        out = out * values[i] if exp > 0 else out / values[i]
    return out


def express(target: Fraction, values: Sequence[Fraction]) -> Expr | None:
    """target as +-1, +-c, +-1/c or +-c*d, +-c/d, +-1/(c*d) of nonzero constants; None otherwise."""
    if target == 0:
        return None
    sign = 1 if target > 0 else -1
    t = abs(target)
    if t == 1:
        return sign, ()
    nonzero = [(i, abs(v)) for i, v in enumerate(values) if v]
    for i, v in nonzero:
        if v == t:
            return sign * _sgn(values[i]), ((i, 1),)
        if 1 / v == t:
            return sign * _sgn(values[i]), ((i, -1),)
    for a, (i, v) in enumerate(nonzero):
        for j, w in nonzero[a:]:
            s = sign * _sgn(values[i]) * _sgn(values[j])
            if v * w == t:
                return s, ((i, 1), (j, 1))
            if 1 / (v * w) == t:
                return s, ((i, -1), (j, -1))
            if v / w == t:
                return s, ((i, 1), (j, -1))
            if w / v == t:
                return s, ((j, 1), (i, -1))
    return None


def _sgn(v: Fraction) -> int:
    return 1 if v > 0 else -1


def snap(value: float, values: Sequence[Fraction]) -> Fraction:
    """The constant, or product or quotient of two, that `value` (a float32 attribute) rounds:
    its float32 image equals value's, else the nearest within 2^-20; else value itself."""
    target = Fraction(value)
    if not math.isfinite(value) or value == 0:
        return target
    import numpy as np

    want = float(np.float32(value))
    best: tuple[Fraction, Fraction] | None = None
    for c in _candidates(values):
        if float(np.float32(float(c))) == want:
            return c
        gap = abs(c - target)
        if gap <= abs(target) * Fraction(1, 1 << 20) and (best is None or gap < best[0]):
            best = (gap, c)
    return target if best is None else best[1]


def _candidates(values: Sequence[Fraction]) -> list[Fraction]:
    mags = sorted({abs(v) for v in values if v})
    out = list(mags) + [1 / v for v in mags]
    for a, v in enumerate(mags):
        for w in mags[a:]:
            out += [v * w, v / w, w / v]
    return out
