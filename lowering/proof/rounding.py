"""What every rounding to a narrower float type guarantees, as conditions a proof may use.

A Cast from float32 to float16 (or bfloat16) inside a region is not the identity: it rounds, it
flushes values below half the smallest subnormal to 0 and it overflows to +-inf. The proof does
not model the rounding exactly; it leaves the result unknown except for what any
round-to-nearest conversion satisfies, so a region whose result does not hang on the exact
rounding still proves (the sign of a value that underflows only where a clamp is 0 anyway), and
one whose comparison moves with it does not (|x| > 0 becomes |x| > 2^-25 in float16).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from .semantics import FIN, NINF, PINF, Ext, Semantics
from .structure import overflow_at

_TYPES: dict[int, Any] = {onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.BFLOAT16: ml_dtypes.bfloat16,
                          onnx.TensorProto.FLOAT: np.float32}


def bounds(m: Semantics, x: Any, v: Ext, dtype: int | None) -> list[Any]:
    """Conditions relating v = round(x) to x for a round-to-nearest conversion to `dtype`:
    non-finite values stay what they are; below half the smallest subnormal the result is 0,
    above it nonzero with x's sign and within half an ulp (relative) plus half a subnormal of x;
    from the overflow threshold on, +-inf. No conditions for a type it does not know."""
    if dtype not in _TYPES or not isinstance(x, Ext):
        return []
    b = m.b
    info = ml_dtypes.finfo(_TYPES[dtype])
    half_sub = Fraction(float(info.smallest_subnormal)) / 2
    rel = Fraction(1, 2 ** (int(info.nmant) + 1))
    top = overflow_at(dtype)
    assert top is not None
    zero = b.num(0)
    ax = b.ite(b.lt(x.real, zero), b.neg(x.real), x.real)
    av = b.ite(b.lt(v.real, zero), b.neg(v.real), v.real)
    fin_x = m.finite(x)
    small = b.and_(fin_x, b.lt(ax, b.num(half_sub)))
    big = b.and_(fin_x, b.not_(b.lt(ax, b.num(top))))
    middle = b.and_(fin_x, b.not_(small), b.not_(big), b.not_(b.eq(ax, b.num(half_sub))))
    same_sign = b.or_(b.and_(b.lt(zero, x.real), b.lt(zero, v.real)), b.and_(b.lt(x.real, zero), b.lt(v.real, zero)))
    close = b.not_(b.lt(b.add(b.mul(b.num(rel), ax), b.num(half_sub)),
                        b.ite(b.lt(b.add(v.real, b.neg(x.real)), zero), b.neg(b.add(v.real, b.neg(x.real))),
                              b.add(v.real, b.neg(x.real)))))
    out = [
        _implies(b, b.not_(fin_x), b.eq(v.kind, x.kind)),
        _implies(b, small, b.and_(b.eq(v.kind, FIN), b.eq(v.real, zero))),
        _implies(b, big, b.eq(v.kind, b.ite(b.lt(x.real, zero), NINF, PINF))),
        _implies(b, middle, b.and_(b.eq(v.kind, FIN), same_sign, close)),
        _implies(b, b.and_(fin_x, b.eq(ax, b.num(half_sub))), b.and_(b.eq(v.kind, FIN), b.not_(b.lt(b.num(
            2 * half_sub), av)))),
    ]
    return [c for c in out if c is not True]


def _implies(b: Any, a: Any, c: Any) -> Any:
    return b.or_(b.not_(a), c)

