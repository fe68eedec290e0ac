"""Bounds on what a structure computes: a proof, without the solver, that no value the result
depends on can overflow its type while the inputs stay inside a box.

The overflow question (lowering.proof.prove, question 3) first asks whether any such value can
overflow where the inputs are away from their types' ranges. Most regions scale their inputs by
constants and pick among the results; bounds show at once that nothing there reaches the range,
and the solver is asked only about the values they do not bound (SmoothL1's g * x, with a scale
of two open constants, reaches the range over their boxes; only the contract's result, g * x /
beta, keeps it inside).

Each value gets two bounds on its *finite* values, both sound, and the tighter one counts:
  * an interval, by interval arithmetic over the constants' boxes (a family's proof leaves each
    constant open within its relations: lowering.proof.relations.box);
  * a bound on its magnitude as a sum of monomials in the constants' magnitudes,
    |v| <= sum k * prod |c_j|^e_j, which keeps a constant's correlation with itself: SmoothL1's
    g * x / beta, where |x| < beta, is bounded by |g|, though beta's box spans 2^16.
An op whose result is finite reads finite operands (a sum, difference or product with +-inf or
NaN is not finite), except two: a division by +-inf gives 0, and Sign(+-inf) gives +-1. A Where,
Max, Min or Clip picks one of its operands. A value that is never finite (an inf or NaN constant,
or a value a branch's comparison leaves no finite value) has no bounds (None); conditions have
none either (BOOL).

An op counts only where the result depends on it (lowering.proof.formula.liveness): in a branch
of Where, only where that branch is chosen. There the comparison that chooses it narrows the
value it compares with a constant (|x| < beta: |x| at most beta), and every op of the branch is
bounded with that narrowed value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import onnx

from .structure import MIRROR, OVERFLOWING, Structure, float_max, overflow_at

Bound = Fraction | float  # a float only for +-inf
Interval = tuple[Bound, Bound]
Monomial = tuple[tuple[int, int], ...]  # (constant index, exponent), by index
Posy = dict[Monomial, Bound]  # sum of coefficient * monomial; {} is 0
BOOL = "bool"
Box = Interval | None | str  # a leaf's or constant's interval, never finite (None), or a condition (BOOL)
Ref = tuple[str, int]
_INF = float("inf")
_ZERO: Interval = (Fraction(0), Fraction(0))
_UNBOUNDED: Interval = (-_INF, _INF)
_MAX_TERMS = 64  # a magnitude bound with more terms is dropped (the interval stays)


@dataclass(frozen=True)
class _Value:
    interval: Interval
    mag: Posy | None  # None: no magnitude bound beyond the interval's

    def narrowed(self, other: _Value) -> _Value | None:
        lo, hi = max(self.interval[0], other.interval[0]), min(self.interval[1], other.interval[1])
        if lo > hi:
            return None
        return _Value((lo, hi), other.mag if other.mag is not None else self.mag)


Value = _Value | None | str  # bounds, never finite (None), or a condition (BOOL)
Narrowed = dict[Ref, _Value | None]  # what a chosen branch tells of values (None: never finite there)


def may_overflow(s: Structure, leaves: Sequence[Interval | None], constants: Sequence[Box],
                 numels: Sequence[int | None]) -> set[int]:
    """The ops of `s` in OVERFLOWING that the bounds do not show to stay below their type's
    overflow threshold where the result depends on them, when each leaf and constant lies in
    its box (`leaves[k]` None: a leaf of no float type, unbounded); `numels[k]` is the constant a
    count leaf is, or None for an unknown count (at least 1). An op left out cannot overflow
    there; one in the set is "not shown", never "can"."""
    if s.output[0] != "v":
        return set()
    bounds = _Bounds(s, leaves, constants, numels)
    seen: set[tuple[int, tuple]] = set()
    stack: list[tuple[int, Narrowed]] = [(s.output[1], {})]
    contexts: dict[tuple, list[Value]] = {}
    found: set[int] = set()
    while stack:
        k, narrowed = stack.pop()
        key = _context_key(narrowed)
        if (k, key) in seen:
            continue
        seen.add((k, key))
        values = contexts.get(key)
        if values is None:
            values = contexts[key] = bounds.run(narrowed)
        op, _, refs = s.ops[k]
        top = overflow_at(s.dtypes[k])
        if op in OVERFLOWING and top is not None and not bounds.below(values[k], top):
            found.add(k)
        for i, ref in enumerate(refs):
            if ref[0] != "v":
                continue
            if op == "Where" and i > 0:
                stack.append((ref[1], bounds.narrow(values, refs[0], i == 1, narrowed)))
            else:
                stack.append((ref[1], narrowed))
    return found


class _Bounds:
    """Every op's bounds, with some values narrowed (a context: what a chosen branch bounds)."""

    def __init__(self, s: Structure, leaves: Sequence[Interval | None], constants: Sequence[Box],
                 numels: Sequence[int | None]) -> None:
        self.s = s
        self.leaves = [_Value(_UNBOUNDED if b is None else b, None if b is None else {(): max(-b[0], b[1])})
                       for b in leaves]
        self.constants: list[Value] = [_constant(j, c) for j, c in enumerate(constants)]
        # a magnitude bound's monomials are evaluated over the constants' magnitudes
        self.magnitudes: list[tuple[Bound, Bound]] = [_magnitudes(c) for c in constants]
        self.numels: list[Value] = [_Value((Fraction(1), _INF), None) if j is None else self.constants[j]
                                    for j in numels]

    def get(self, values: list[Value], ref: Ref, narrowed: Narrowed) -> Value:
        kind, k = ref
        v: Value
        if kind == "v":
            v = values[k]
        elif kind == "in":
            v = self.leaves[k]
        elif kind == "c":
            v = self.constants[k]
        elif kind == "n":
            v = self.numels[k]
        else:
            return None
        return _narrowed(v, narrowed, ref)

    def run(self, narrowed: Narrowed) -> list[Value]:
        values: list[Value] = []
        for k, (op, _, refs) in enumerate(self.s.ops):
            args = [self.get(values, r, narrowed) for r in refs]
            out = _op(op, refs, args, self.s.dtypes[k], k in self.s.narrowing)
            values.append(_narrowed(out, narrowed, ("v", k)))
        return values

    def below(self, v: Value, top: Fraction) -> bool:
        """Whether every finite value `v` takes is less than `top` in magnitude."""
        if not isinstance(v, _Value):
            return True
        lo, hi = v.interval
        if max(-lo, hi) < top:
            return True
        return v.mag is not None and self.largest(v.mag) < top

    def largest(self, p: Posy) -> Bound:
        total: Bound = Fraction(0)
        for mono, coef in p.items():
            term: Bound = coef
            for j, e in mono:
                lo, hi = self.magnitudes[j]
                if (e < 0 and lo == 0) or (e > 0 and hi == _INF):
                    return _INF
                term *= (hi if e > 0 else lo) ** e
            total += term
        return total

    def narrow(self, values: list[Value], cond: Ref, truth: bool, narrowed: Narrowed) -> Narrowed:
        """`narrowed` with what `cond` being `truth` tells of the values it compares with constants."""
        out = dict(narrowed)
        for ref, bound in self._implied(values, cond, truth, narrowed):
            known = out.get(ref, bound)
            out[ref] = None if known is None else known.narrowed(bound)
        return out

    def _implied(self, values: list[Value], cond: Ref, truth: bool,
                 narrowed: Narrowed) -> list[tuple[Ref, _Value]]:
        """(ref, bounds its finite values keep) wherever `cond` is `truth`. Only comparisons with
        a constant narrow: a computed bound may be +-inf or NaN, which its bounds do not hold."""
        s = self.s
        if cond[0] != "v":
            return []
        op, _, refs = s.ops[cond[1]]
        if op == "Not":
            return self._implied(values, refs[0], not truth, narrowed)
        if (op == "And" and truth) or (op == "Or" and not truth):
            return [*self._implied(values, refs[0], truth, narrowed),
                    *self._implied(values, refs[1], truth, narrowed)]
        if op not in MIRROR or len(refs) != 2 or (refs[0][0] == "c") == (refs[1][0] == "c"):
            return []
        value, const = (refs[1], refs[0]) if refs[0][0] == "c" else refs
        relation = MIRROR[op] if refs[0][0] == "c" else op  # as `value relation const`
        c = self.get(values, const, narrowed)
        if not isinstance(c, _Value):
            return []
        clo, chi = c.interval
        below = relation in ("Less", "LessOrEqual")
        if not truth:  # NaN fails every comparison, and has no bounds to narrow
            below = not below
        found = [(value, _Value((-_INF, chi) if below else (clo, _INF), None))]
        if below and value[0] == "v" and s.ops[value[1]][0] == "Abs":
            # |y| <= c: y and |y| are at most the constant's magnitude
            mag = c.mag if clo >= 0 else None
            found = [(value, _Value((Fraction(0), chi), mag)),
                     (s.ops[value[1]][2][0], _Value((-chi, chi), mag))]
        return found


def _context_key(narrowed: Narrowed) -> tuple:
    def frozen(v: _Value | None) -> tuple | None:
        if v is None:
            return None
        return v.interval, None if v.mag is None else tuple(sorted(v.mag.items()))

    return tuple(sorted((ref, frozen(v)) for ref, v in narrowed.items()))


def _narrowed(v: Value, narrowed: Narrowed, ref: Ref) -> Value:
    if ref not in narrowed or not isinstance(v, _Value):
        return v
    n = narrowed[ref]
    return None if n is None else v.narrowed(n)


def _constant(j: int, c: Box) -> Value:
    if not isinstance(c, tuple):
        return c
    lo, hi = c
    if lo == hi == 0:
        return _Value(_ZERO, {})
    return _Value((lo, hi), {((j, 1),): Fraction(1)})


def _magnitudes(c: Box) -> tuple[Bound, Bound]:
    if not isinstance(c, tuple):
        return (Fraction(0), Fraction(1))
    lo, hi = c
    if lo > 0:
        return (lo, hi)
    if hi < 0:
        return (-hi, -lo)
    return (Fraction(0), max(-lo, hi))


# -- arithmetic on bounds --------------------------------------------------------------------

def _times(a: Bound, b: Bound) -> Bound:
    return Fraction(0) if a == 0 or b == 0 else a * b


def _hull(*xs: Value) -> Value:
    found = [x for x in xs if isinstance(x, _Value)]
    if not found:
        return None
    interval = (min(x.interval[0] for x in found), max(x.interval[1] for x in found))
    return _Value(interval, _sum(*[x.mag for x in found]))


def _sum(*ps: Posy | None) -> Posy | None:
    out: Posy = {}
    for p in ps:
        if p is None:
            return None
        for mono, coef in p.items():
            out[mono] = out.get(mono, Fraction(0)) + coef
    return out if len(out) <= _MAX_TERMS else None


def _product(p: Posy | None, q: Posy | None) -> Posy | None:
    if p is None or q is None:
        return None
    out: Posy = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            exps = dict(m1)
            for j, e in m2:
                exps[j] = exps.get(j, 0) + e
            mono = tuple(sorted((j, e) for j, e in exps.items() if e))
            out[mono] = out.get(mono, Fraction(0)) + c1 * c2
    return out if len(out) <= _MAX_TERMS else None


def _scaled(p: Posy | None, k: Bound) -> Posy | None:
    return None if p is None else {mono: coef * k for mono, coef in p.items()}


def _mul(x: _Value, y: _Value) -> _Value:
    corners = [_times(a, b) for a in x.interval for b in y.interval]
    return _Value((min(corners), max(corners)), _product(x.mag, y.mag))


def _div(x: _Value, y: _Value, y_ref: Ref) -> _Value:
    lo, hi = y.interval
    zero_in = lo <= 0 <= hi
    if zero_in:
        interval = _ZERO if x.interval == _ZERO else _UNBOUNDED
    else:
        corners = [Fraction(0) if abs(b) == _INF else a / b for a in x.interval for b in y.interval]
        interval = (min(corners + [Fraction(0)]), max(corners + [Fraction(0)]))
    mag: Posy | None = None
    if y_ref[0] == "c" and y.mag == {((y_ref[1], 1),): Fraction(1)} and not zero_in:
        # a constant whose bound is its own magnitude, exactly (one narrowed by a comparison has
        # another constant's, an upper bound only): divide by its monomial
        mag = _product(x.mag, {((y_ref[1], -1),): Fraction(1)})
    elif not zero_in:  # by the least magnitude the divisor takes
        least: Bound = lo if lo > 0 else -hi
        mag = _scaled(x.mag, Fraction(1) / least) if isinstance(least, Fraction) else None
    return _Value(interval, mag)


def _op(op: str, refs: tuple[Ref, ...], args: list[Value], dtype: int | None, narrowing: bool) -> Value:
    if op in ("Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal", "Not", "And", "Or", "Xor"):
        return BOOL
    if op in ("Where", "Max", "Min", "Clip", "Shrink", "Relu"):
        return _pick(op, args, dtype)
    if op in ("Cast", "CastLike"):
        if float_max(dtype) is None:
            return BOOL
        if args[0] == BOOL:
            return _Value((Fraction(0), Fraction(1)), {(): Fraction(1)})
        x = args[0]
        if narrowing and isinstance(x, _Value):
            # the proof's rounding (lowering.proof.rounding) keeps the sign or gives 0, and moves
            # a value by at most a relative half ulp plus half a subnormal, which is below the
            # value itself wherever it does not give 0: at most 3 times the magnitude
            lo, hi = x.interval
            widened: Interval = (3 * lo if lo < 0 else Fraction(0), 3 * hi if hi > 0 else Fraction(0))
            return _Value(widened, _scaled(x.mag, Fraction(3)))
        return x
    if op in ("Identity", "Expand"):
        return args[0]
    # finite results of operands that are not: Sign(+-inf) is +-1, a finite x over +-inf is 0
    if op == "Sign":
        return _Value((Fraction(-1), Fraction(1)), {(): Fraction(1)})
    if (op == "Reciprocal" and args[0] is None) or (op == "Div" and args[1] is None and args[0] is not None):
        return _Value(_ZERO, {})
    xs: list[_Value] = []
    for a in args:
        if a is None:
            return None  # an operand never finite: nor is the result
        xs.append(_Value((Fraction(0), Fraction(1)), {(): Fraction(1)}) if a == BOOL else a)  # type: ignore[arg-type]
    if op in ("Add", "Sum"):
        out = xs[0]
        for x in xs[1:]:
            out = _Value((out.interval[0] + x.interval[0], out.interval[1] + x.interval[1]), _sum(out.mag, x.mag))
        return out
    if op == "Sub":
        a, b = xs
        return _Value((a.interval[0] - b.interval[1], a.interval[1] - b.interval[0]), _sum(a.mag, b.mag))
    if op == "Mul":
        return _mul(xs[0], xs[1])
    if op == "Div":
        return _div(xs[0], xs[1], refs[1])
    if op == "Reciprocal":
        return _div(_Value((Fraction(1), Fraction(1)), {(): Fraction(1)}), xs[0], refs[0])
    if op == "Neg":
        return _Value((-xs[0].interval[1], -xs[0].interval[0]), xs[0].mag)
    if op == "Abs":
        lo, hi = xs[0].interval
        interval = xs[0].interval if lo >= 0 else ((-hi, -lo) if hi <= 0 else (Fraction(0), max(-lo, hi)))
        return _Value(interval, xs[0].mag)
    return _Value(_UNBOUNDED, None)


def _pick(op: str, args: list[Value], dtype: int | None) -> Value:
    """Ops whose finite result is one of their operands (or 0, or Shrink's shifted input)."""
    zero = _Value(_ZERO, {})
    if op == "Where":
        return BOOL if BOOL in (args[1], args[2]) else _hull(args[1], args[2])
    if op == "Relu":
        return _hull(args[0], zero)
    if op == "Shrink":  # x + bias below -lambd, x - bias above lambd, else 0
        x, bias = args[0], args[2]
        if not isinstance(x, _Value) or not isinstance(bias, _Value):
            return zero
        mag = _sum(x.mag, bias.mag)
        return _hull(_Value((x.interval[0] + bias.interval[0], x.interval[1] + bias.interval[1]), mag),
                     _Value((x.interval[0] - bias.interval[1], x.interval[1] - bias.interval[0]), mag), zero)
    if op == "Clip":
        # a bound left out is the type's largest finite value
        top = float_max(dtype) or float_max(onnx.TensorProto.FLOAT) or Fraction(0)
        return _hull(*args, _Value((-top, top), {(): top}))
    return _hull(*args)
