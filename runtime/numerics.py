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
  * No flush-to-zero: subnormals are kept, as numpy float32 keeps them (flush-to-zero is not modelled).
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


_F16_MIN_NORMAL = np.float32(2.0**-14)
_F16_SUBNORMAL_STEPS = np.float32(2.0**24)  # float16 subnormals are k * 2^-24, k < 1024


def _float32_to_float16(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, round half to even, overflow to inf: what astype does, faster.

    numpy's conversion takes a slow path (~25x) for every result that is a float16 subnormal,
    which is the common case for a mean-reduced gradient over millions of elements. Those are
    integers k * 2^-24, so they are computed as rint(|x| * 2^24) (exact scaling, RNE in rint);
    everything else goes through astype.
    """
    flat = x.reshape(-1)
    ax = np.abs(flat)
    tiny = (ax < _F16_MIN_NORMAL) & (ax > 0)
    count = int(np.count_nonzero(tiny))
    if count == 0:
        return x.astype(np.float16)
    out = np.where(tiny, np.float32(0), flat).astype(np.float16).view(np.uint16)
    if count * 4 < flat.size:  # few: fix them up one by one
        idx = np.flatnonzero(tiny)
        out[idx] = _subnormal_bits(flat[idx], ax[idx])
    else:
        out = np.where(tiny, _subnormal_bits(flat, np.minimum(ax, _F16_MIN_NORMAL)), out)
    return out.view(np.float16).reshape(x.shape)


def _subnormal_bits(x: np.ndarray, ax: np.ndarray) -> np.ndarray:
    steps = np.rint(ax * _F16_SUBNORMAL_STEPS).astype(np.uint16)
    return steps | (np.signbit(x).view(np.uint8).astype(np.uint16) << 15)


# Every float16 bit pattern converted once (exactly) by numpy: a lookup beats numpy's scalar loop.
_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """Cast between float32 and float16/bfloat16: exact in, CAST_RINT (round half even) out."""
    target = NUMPY_DTYPES[dtype]
    if x.dtype == target:
        raise ValueError(f"same-dtype Cast {dtype}->{dtype} is not a copy on the hardware")
    with np.errstate(over="ignore", invalid="ignore"):
        if x.dtype == np.float32 and target == np.float16:
            return _float32_to_float16(x)
        if x.dtype == np.float16:
            return np.take(_F16_TO_F32, x.view(np.uint16))
        return x.astype(target)


def sign(x: np.ndarray) -> np.ndarray:
    """AscendC Sign: -1 / +1 by sign, +0 for +-0 and for NaN."""
    return (x > 0).astype(F32) - (x < 0).astype(F32)


def clamp_op(op: str, policy: NanPolicy) -> np.ufunc:
    """The ufunc for Maxs / Mins under a NaN policy (see the module docstring)."""
    if op not in ("Maxs", "Mins"):
        raise ValueError(f"{op} is not Maxs or Mins")
    if policy == "propagate":
        return np.maximum if op == "Maxs" else np.minimum
    return np.fmax if op == "Maxs" else np.fmin


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

