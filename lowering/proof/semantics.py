"""ONNX elementwise semantics over the extended reals, for any backend that can hold a number.

A value is a pair (kind, real): kind is finite, +inf, -inf or NaN, and the real is what a finite
value holds (ignored otherwise). Every op is written once here, as IEEE 754 and onnxruntime define
it on that pair (0 * inf is NaN, comparisons with NaN are false, Max and Min propagate NaN, Where
selects and never blends, Shrink maps NaN to 0, Sign(+-0) = 0), and runs on two backends:

  exact (Python Fractions and bools), to evaluate a region at a point with no rounding at all;
  z3 (lowering.proof.solver), where leaves are unknowns and the same code builds the formula a
  solver decides for every input at once.

Signed zeros are not tracked (-0 and +0 are one real 0): they differ only as a divisor, so
`a / 0` for a finite nonzero a is an infinity of a sign the backend leaves open (`fresh_bool`), and
a region whose result hangs on it is not proved. With `saturate` set, an arithmetic result whose
magnitude exceeds the float range of its type becomes +-inf, as IEEE rounding makes it: the
overflow query (lowering.proof.prove) compares that with the exact result.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

FIN, PINF, NINF, NAN = 0, 1, 2, 3


class Backend(Protocol):
    """What the semantics needs of a number system. Bools and kinds may be Python values or the
    backend's terms; every method folds Python values at once."""

    def num(self, value: Fraction | int) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
    def div(self, a: Any, b: Any) -> Any: ...  # b is nonzero wherever the result is used
    def neg(self, a: Any) -> Any: ...
    def lt(self, a: Any, b: Any) -> Any: ...
    def eq(self, a: Any, b: Any) -> Any: ...
    def ite(self, c: Any, a: Any, b: Any) -> Any: ...
    def and_(self, *xs: Any) -> Any: ...
    def or_(self, *xs: Any) -> Any: ...
    def not_(self, a: Any) -> Any: ...
    def fresh_bool(self, hint: str) -> Any: ...


class Undetermined(Exception):
    """Exact evaluation met a value it cannot compute exactly."""


@dataclass(frozen=True)
class Ext:
    """One extended-real value: `kind` (FIN, PINF, NINF, NAN) and, when finite, `real`."""

    kind: Any
    real: Any


class Semantics:
    """The ops of an elementwise ONNX region on Ext values of one backend."""

    def __init__(self, b: Backend, saturate: bool = False, bound: Fraction | None = None) -> None:
        """With `saturate`, `limit` rounds overflowing values to +-inf; with a `bound` as well,
        every arithmetic result is limited by it (the contract, computed in one type)."""
        self.b = b
        self.saturate = saturate
        self.bound = bound
        self.trace: list[Ext] | None = None  # when a list: every arithmetic result, in order

    def _auto(self, e: Ext) -> Ext:
        if self.trace is not None:
            self.trace.append(e)
        return self.limit(e, self.bound) if self.bound is not None else e

    # -- constructors and kind tests ---------------------------------------------------------
    def const(self, value: Fraction | int | float) -> Ext:
        if isinstance(value, float):
            if value != value:
                return Ext(NAN, self.b.num(0))
            if value in (float("inf"), float("-inf")):
                return Ext(PINF if value > 0 else NINF, self.b.num(0))
            value = Fraction(value)
        return Ext(FIN, self.b.num(value))

    def _is(self, e: Ext, kind: int) -> Any:
        if isinstance(e.kind, int):
            return e.kind == kind
        return self.b.eq(e.kind, kind)

    def finite(self, e: Ext) -> Any:
        return self._is(e, FIN)

    def isnan(self, e: Ext) -> Any:
        return self._is(e, NAN)

    def _pinf(self, e: Ext) -> Any:
        return self._is(e, PINF)

    def _ninf(self, e: Ext) -> Any:
        return self._is(e, NINF)

    def _inf(self, e: Ext) -> Any:
        return self.b.or_(self._pinf(e), self._ninf(e))

    def _kind(self, nan: Any, pinf: Any, ninf: Any) -> Any:
        b = self.b
        return b.ite(nan, NAN, b.ite(pinf, PINF, b.ite(ninf, NINF, FIN)))

    def where(self, c: Any, x: Ext, y: Ext) -> Ext:
        return Ext(self.b.ite(c, x.kind, y.kind), self.b.ite(c, x.real, y.real))

    def _positive(self, e: Ext) -> Any:
        return self.b.or_(self._pinf(e), self.b.and_(self.finite(e), self.b.lt(self.b.num(0), e.real)))

    def _negative(self, e: Ext) -> Any:
        return self.b.or_(self._ninf(e), self.b.and_(self.finite(e), self.b.lt(e.real, self.b.num(0))))

    def _is_zero(self, e: Ext) -> Any:
        return self.b.and_(self.finite(e), self.b.eq(e.real, self.b.num(0)))

    def limit(self, e: Ext, bound: Fraction | None) -> Ext:
        """e, with a finite magnitude at or above `bound` (where IEEE rounding overflows) made
        +-inf (saturating mode only)."""
        if not self.saturate or bound is None:
            return e
        b = self.b
        top = b.num(bound)
        fin = self.finite(e)
        up = b.and_(fin, b.not_(b.lt(e.real, top)))
        down = b.and_(fin, b.not_(b.lt(b.neg(top), e.real)))
        return Ext(b.ite(up, PINF, b.ite(down, NINF, e.kind)), e.real)

    # -- arithmetic ---------------------------------------------------------------------------
    def neg(self, a: Ext) -> Ext:
        b = self.b
        if isinstance(a.kind, int):
            kind = {PINF: NINF, NINF: PINF}.get(a.kind, a.kind)
        else:
            kind = b.ite(self._pinf(a), NINF, b.ite(self._ninf(a), PINF, a.kind))
        return Ext(kind, b.neg(a.real))

    def add(self, x: Ext, y: Ext) -> Ext:
        b = self.b
        real = b.add(x.real, y.real)
        if _finite_now(x) and _finite_now(y):
            return self._auto(Ext(FIN, real))
        nan = b.or_(self.isnan(x), self.isnan(y), b.and_(self._pinf(x), self._ninf(y)),
                    b.and_(self._ninf(x), self._pinf(y)))
        return self._auto(Ext(self._kind(nan, b.or_(self._pinf(x), self._pinf(y)), b.or_(self._ninf(x), self._ninf(y))),
                              real))

    def sub(self, x: Ext, y: Ext) -> Ext:
        return self.add(x, self.neg(y))

    def mul(self, x: Ext, y: Ext) -> Ext:
        b = self.b
        real = b.mul(x.real, y.real)
        if _finite_now(x) and _finite_now(y):
            return self._auto(Ext(FIN, real))
        xi, yi = self._inf(x), self._inf(y)
        nan = b.or_(self.isnan(x), self.isnan(y), b.and_(xi, self._is_zero(y)), b.and_(yi, self._is_zero(x)))
        inf = b.or_(xi, yi)
        pos = b.or_(b.and_(self._positive(x), self._positive(y)), b.and_(self._negative(x), self._negative(y)))
        return self._auto(Ext(b.ite(nan, NAN, b.ite(inf, b.ite(pos, PINF, NINF), FIN)), real))

    def div(self, x: Ext, y: Ext) -> Ext:
        b = self.b
        zero = b.num(0)
        y_zero = self._is_zero(y)
        x_zero = self._is_zero(x)
        safe = b.ite(b.or_(y_zero, b.not_(self.finite(y))), b.num(1), y.real)
        real = b.ite(self._inf(y), zero, b.div(x.real, safe))
        xi, yi = self._inf(x), self._inf(y)
        nan = b.or_(self.isnan(x), self.isnan(y), b.and_(xi, yi), b.and_(x_zero, y_zero))
        inf = b.or_(b.and_(xi, self.finite(y)), b.and_(self.finite(x), b.not_(x_zero), y_zero))
        signs_known = b.or_(b.and_(self._positive(x), self._positive(y)), b.and_(self._negative(x), self._negative(y)))
        if y_zero is False:
            pos = signs_known
        elif y_zero is True and (x_zero is True or self.isnan(x) is True):
            pos = False  # 0 / 0 and NaN / 0 are NaN: no sign to choose
        else:
            # the sign of an infinity from a zero divisor is the zero's sign, which is not tracked
            open_sign = b.fresh_bool("signed-zero divisor")
            x_pos = self._positive(x)
            pos = b.ite(y_zero, b.ite(open_sign, x_pos, b.not_(x_pos)), signs_known)
        return self._auto(Ext(b.ite(nan, NAN, b.ite(inf, b.ite(pos, PINF, NINF), FIN)), real))

    def abs(self, a: Ext) -> Ext:
        b = self.b
        kind = a.kind if isinstance(a.kind, int) and a.kind in (FIN, NAN) else b.ite(self._ninf(a), PINF, a.kind)
        return Ext(kind, b.ite(b.lt(a.real, b.num(0)), b.neg(a.real), a.real))

    def sign(self, a: Ext) -> Ext:
        b = self.b
        one, zero = b.num(1), b.num(0)
        finite_sign = b.ite(b.lt(zero, a.real), one, b.ite(b.lt(a.real, zero), b.num(-1), zero))
        if _finite_now(a):
            return Ext(FIN, finite_sign)
        real = b.ite(self._pinf(a), one, b.ite(self._ninf(a), b.num(-1), finite_sign))
        return Ext(b.ite(self.isnan(a), NAN, FIN), real)

    # -- comparisons (false whenever either side is NaN) -------------------------------------
    def lt(self, x: Ext, y: Ext) -> Any:
        b = self.b
        both = b.and_(self.finite(x), self.finite(y), b.lt(x.real, y.real))
        if _finite_now(x) and _finite_now(y):
            return both
        return b.or_(both, b.and_(self._ninf(x), b.not_(self._ninf(y)), b.not_(self.isnan(y))),
                     b.and_(self._pinf(y), b.not_(self._pinf(x)), b.not_(self.isnan(x))))

    def eq(self, x: Ext, y: Ext) -> Any:
        b = self.b
        both = b.and_(self.finite(x), self.finite(y), b.eq(x.real, y.real))
        if _finite_now(x) and _finite_now(y):
            return both
        return b.or_(both, b.and_(self._pinf(x), self._pinf(y)), b.and_(self._ninf(x), self._ninf(y)))

    def le(self, x: Ext, y: Ext) -> Any:
        return self.b.or_(self.lt(x, y), self.eq(x, y))

    # -- selections --------------------------------------------------------------------------
    def _nan_either(self, x: Ext, y: Ext) -> Any:
        return self.b.or_(self.isnan(x), self.isnan(y))

    def max(self, x: Ext, y: Ext) -> Ext:
        """onnxruntime's Max: NaN if either is NaN, else the larger."""
        picked = self.where(self.lt(x, y), y, x)
        return self.where(self._nan_either(x, y), self.const(float("nan")), picked)

    def min(self, x: Ext, y: Ext) -> Ext:
        picked = self.where(self.lt(y, x), y, x)
        return self.where(self._nan_either(x, y), self.const(float("nan")), picked)

    def shrink(self, x: Ext, lambd: Ext, bias: Ext) -> Ext:
        """ONNX Shrink: x + bias below -lambd, x - bias above lambd, else 0 (NaN too)."""
        zero = self.const(0)
        return self.where(self.lt(x, self.neg(lambd)), self.add(x, bias),
                          self.where(self.lt(lambd, x), self.sub(x, bias), zero))

    def truth(self, c: Any) -> Ext:
        """A bool as a float (Cast(bool -> float))."""
        return self.where(c, self.const(1), self.const(0))

    def nonzero(self, x: Ext) -> Any:
        """Cast(float -> bool): NaN is true."""
        return self.b.not_(self.eq(x, self.const(0)))

    def differs(self, x: Ext, y: Ext) -> Any:
        """x and y are not the same value (NaN is the same as NaN; -0 as +0)."""
        b = self.b
        same_kind = b.eq(x.kind, y.kind) if not (isinstance(x.kind, int) and isinstance(y.kind, int)) \
            else x.kind == y.kind
        same = b.and_(same_kind, b.or_(b.not_(self.finite(x)), b.eq(x.real, y.real)))
        return b.not_(same)


def _finite_now(e: Ext) -> bool:
    """Whether e is known finite without asking the backend (its kind is the Python FIN)."""
    return isinstance(e.kind, int) and e.kind == FIN


class ExactBackend:
    """Python Fractions and bools: evaluation at a point, with no rounding."""

    def num(self, value: Fraction | int) -> Fraction:
        return Fraction(value)

    def add(self, a: Fraction, b: Fraction) -> Fraction:
        return a + b

    def mul(self, a: Fraction, b: Fraction) -> Fraction:
        return a * b

    def div(self, a: Fraction, b: Fraction) -> Fraction:
        return a / b

    def neg(self, a: Fraction) -> Fraction:
        return -a

    def lt(self, a: Fraction, b: Fraction) -> bool:
        return a < b

    def eq(self, a: object, b: object) -> bool:
        return a == b

    def ite(self, c: bool, a: Any, b: Any) -> Any:
        return a if c else b

    def and_(self, *xs: bool) -> bool:
        return all(xs)

    def or_(self, *xs: bool) -> bool:
        return any(xs)

    def not_(self, a: bool) -> bool:
        return not a

    def fresh_bool(self, hint: str) -> bool:
        """The sign of a zero divisor: either is right for a value a select then drops, and a
        value that reaches the result is +-inf, which evaluation at a point reports as no number."""
        return True
