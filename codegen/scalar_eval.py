"""Exact float32 evaluation of the IR's scalar arithmetic (semantics in codegen/ir.py).

Used by the folding pass at compile time; the CPU backend can use it at run time so both agree
bit for bit.
"""

from __future__ import annotations

import numpy as np

from codegen.ir import Op


def _max(a: np.float32, b: np.float32) -> np.float32:
    return a if (a > b or np.isnan(a)) else b


def _min(a: np.float32, b: np.float32) -> np.float32:
    return a if (a < b or np.isnan(a)) else b


_BINARY = {
    Op.SADD: lambda a, b: a + b,
    Op.SSUB: lambda a, b: a - b,
    Op.SMUL: lambda a, b: a * b,
    Op.SDIV: lambda a, b: a / b,
    Op.SMAX: _max,
    Op.SMIN: _min,
}
_UNARY = {
    Op.SNEG: lambda a: -a,
    Op.SRECIP: lambda a: np.float32(1.0) / a,
}


def eval_scalar(op: Op, *args: float) -> float:
    """Result of one arithmetic scalar op on float32 operands, as a float holding a float32."""
    xs = [np.float32(a) for a in args]
    with np.errstate(all="ignore"):
        if op in _BINARY and len(xs) == 2:
            return float(np.float32(_BINARY[op](*xs)))
        if op in _UNARY and len(xs) == 1:
            return float(np.float32(_UNARY[op](*xs)))
    raise ValueError(f"{op} is not an arithmetic scalar op with {len(xs)} operands")
