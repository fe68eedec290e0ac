"""AscendC vector numerics on numpy arrays, as codegen/ir.py defines them.

Every function takes tiles as float32 arrays of shape (rows, lanes): one row per tile, so a whole
batch of equally long tiles runs in one numpy call while each row keeps its own per-tile meaning
(a Compare mask is packed per row, exactly as one AscendC call would write it).

Assumptions where the hardware is undocumented, stated here and nowhere else:
  * Compare with a NaN operand: LT, GT, EQ, LE, GE give 0 and NE gives 1 (IEEE ordered compare;
    the AscendC Sign doc example behaves this way; codegen/ir.py assumes the same).
  * Maxs / Mins with a NaN lane: NAN_POLICY "propagate" (default) returns NaN, "scalar" returns the
    scalar operand. codegen/ir.py forbids a lowering from letting this decide an observable result,
    so the tests run the kernels under both policies and expect the same answer.
  * No flush-to-zero: subnormals are kept, as numpy float32 keeps them (DESIGN: not modelled).
  * float32 -> float16 / bfloat16 overflow follows ACL_RT_OVERFLOW_MODE_INFNAN (the A2/A3 default
    and the only mode on 950): out-of-range values become +-inf, NaN stays NaN.
Documented behaviour that is modelled as documented: Sign(NaN) = 0 and Sign(+-0) = +0;
|x| clears the sign bit; casts in (float16/bfloat16 -> float32) are exact; casts out use
round-half-to-even (numpy's float16 conversion, ml_dtypes' bfloat16 conversion).
"""

from __future__ import annotations

from typing import Literal

import ml_dtypes
import numpy as np

NanPolicy = Literal["propagate", "scalar"]
NAN_POLICIES: tuple[NanPolicy, ...] = ("propagate", "scalar")

NUMPY_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}

F32 = np.float32


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """Cast between float32 and float16/bfloat16: exact in, CAST_RINT (round half even) out."""
    target = NUMPY_DTYPES[dtype]
    if x.dtype == target:
        raise ValueError(f"same-dtype Cast {dtype}->{dtype} is not a copy on the hardware")
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(target)


def sign(x: np.ndarray) -> np.ndarray:
    """AscendC Sign: -1 / +1 by sign, +0 for +-0 and for NaN."""
    return (x > 0).astype(F32) - (x < 0).astype(F32)


def maxs(x: np.ndarray, s: np.float32, policy: NanPolicy) -> np.ndarray:
    if policy == "propagate":
        return np.maximum(x, s)
    return np.fmax(x, s)


def mins(x: np.ndarray, s: np.float32, policy: NanPolicy) -> np.ndarray:
    if policy == "propagate":
        return np.minimum(x, s)
    return np.fmin(x, s)


_COMPARE = {
    "LT": np.less,
    "GT": np.greater,
    "EQ": np.equal,
    "LE": np.less_equal,
    "GE": np.greater_equal,
    "NE": np.not_equal,
}


def compare(a: np.ndarray, b: np.ndarray | np.float32, mode: str) -> np.ndarray:
    """Compare / Compares: a bitmask per row, lane i in bit (i % 8) of byte (i // 8)."""
    lanes = a.shape[-1]
    if (lanes * 4) % 256:
        raise ValueError(f"Compare over {lanes} float32 lanes does not cover whole 256-byte repeats")
    return np.packbits(_COMPARE[mode](a, b), axis=-1, bitorder="little")


def select(mask: np.ndarray, src0: np.ndarray, src1: np.ndarray | np.float32) -> np.ndarray:
    """Select in the continuous-mask modes: bit 1 takes src0, bit 0 takes src1 (tile or scalar)."""
    lanes = src0.shape[-1]
    if mask.shape[-1] * 8 < lanes:
        raise ValueError(f"mask of {mask.shape[-1] * 8} bits is shorter than {lanes} lanes")
    bits = np.unpackbits(mask, axis=-1, count=lanes, bitorder="little").view(np.bool_)
    return np.where(bits, src0, src1)

