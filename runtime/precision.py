"""CANN precision standard: compare an actual tensor with a golden one.

Relative error per element is |actual - golden| / (|golden| + 1e-7); MERE is its mean and MARE its
maximum over the elements where both sides are finite. A comparison passes when MERE < T and
MARE < 10 T (T per dtype below), NaN sits at the same positions on both sides, and every infinity
on one side is the same infinity on the other. Integer and boolean tensors must match exactly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np
import onnx

# T per dtype name. float64 has no entry in the standard; it is held to the float32 bar.
THRESHOLDS: dict[str, float] = {
    "float32": 2.0**-13,
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float64": 2.0**-13,
}

_EPS = 1e-7

# the narrow float types by ONNX element type: a value computed in one carries its rounding
HALF_TYPES: dict[int, str] = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}


def half_dtype(name: str) -> np.dtype:
    """numpy's dtype for a HALF_TYPES name."""
    return np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else np.float16)


def rounded_to(values: np.ndarray, name: str) -> np.ndarray:
    """values rounded to the HALF_TYPES dtype `name` (to nearest even), kept in their own dtype."""
    values = np.asarray(values)
    with np.errstate(over="ignore"):
        return values.astype(half_dtype(name)).astype(values.dtype)


def dtype_name(dtype: np.dtype | type) -> str:
    """Canonical name of a numpy (or ml_dtypes) dtype: 'float32', 'bfloat16', 'int64', ..."""
    dt = np.dtype(dtype)
    if dt == np.dtype(ml_dtypes.bfloat16):
        return "bfloat16"
    return dt.name


def is_float_name(name: str) -> bool:
    return name in THRESHOLDS


@dataclass
class Comparison:
    """One row of a diff report: how an actual tensor compares with its golden."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs_err: float
    mere: float
    mare: float
    threshold: float
    nan_mismatch: int
    inf_mismatch: int
    passed: bool
    note: str = ""
    skipped: int = 0  # positions left out under assume-finite

    def to_json(self) -> dict[str, object]:
        """Plain JSON data; a metric that could not be computed (NaN) becomes null."""
        d = asdict(self)
        for key in ("max_abs_err", "mere", "mare"):
            if not math.isfinite(d[key]):
                d[key] = None
        d["shape"] = list(self.shape)
        d["status"] = "PASS" if self.passed else "FAIL"
        return d


def _as_f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def subnormal_steps(dtype: np.dtype, actual: np.ndarray, golden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where the golden is subnormal in `dtype`, |actual - golden| in that dtype's subnormal steps).

    A float16 step is 2^-24, which the standard's relative error puts at up to 60%: two
    computations that round the same value, computed in a different order, to either side of a
    tie land one step apart there (a float16 mean over a million elements does)."""
    info = ml_dtypes.finfo(dtype)
    g = _as_f64(golden)
    tiny = np.isfinite(g) & (np.abs(g) < float(info.tiny))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf away from the subnormals
        return tiny, np.abs(_as_f64(actual) - g) / float(info.smallest_subnormal)


def compare(name: str, actual: np.ndarray, golden: np.ndarray, through: str | None = None,
            skip: np.ndarray | None = None) -> Comparison:
    """Compare `actual` with `golden` under the precision standard of actual's dtype, or of
    `through`, a narrower float dtype the value was computed by way of, when its bar is looser.
    Positions where `skip` holds are left out (assume-finite: an input or the reference is
    +-inf or NaN there), and the note says how many."""
    actual = np.asarray(actual)
    golden = np.asarray(golden)
    if skip is not None and actual.shape == golden.shape and np.any(skip):
        mask = np.broadcast_to(skip, actual.shape)
        kept = compare(name, np.where(mask, 0, actual).astype(actual.dtype),
                       np.where(mask, 0, golden).astype(golden.dtype), through)
        kept.skipped = int(np.count_nonzero(mask))
        return kept
    dname = dtype_name(actual.dtype)
    shape = tuple(int(d) for d in actual.shape)
    if actual.shape != golden.shape:
        return Comparison(name, dname, shape, float("nan"), float("nan"), float("nan"),
                          THRESHOLDS.get(dname, 0.0), 0, 0, False,
                          f"shape {list(actual.shape)} != golden shape {list(golden.shape)}")
    if not is_float_name(dname):
        # Integer and boolean outputs must be equal: MERE is the share of differing elements,
        # MARE 1 if any differs, and the threshold 0.
        same = actual == golden
        bad = int(same.size - np.count_nonzero(same))
        note = f"{bad} elements differ (exact match required)" if bad else ""
        diff = np.abs(actual.astype(np.float64) - golden.astype(np.float64)) if actual.size else np.zeros(0)
        return Comparison(name, dname, shape, float(diff.max(initial=0.0)), bad / max(same.size, 1),
                          float(bad > 0), 0.0, 0, 0, bad == 0, note)

    a = _as_f64(actual)
    g = _as_f64(golden)
    t = THRESHOLDS[dname]
    widened = through is not None and THRESHOLDS.get(through, 0.0) > t
    if through is not None and widened:
        t = THRESHOLDS[through]
    a_nan, g_nan = np.isnan(a), np.isnan(g)
    nan_mismatch = int(np.count_nonzero(a_nan != g_nan))
    a_inf, g_inf = np.isinf(a), np.isinf(g)
    either_inf = (a_inf | g_inf) & ~a_nan & ~g_nan
    inf_mismatch = int(np.count_nonzero(either_inf & (a != g)))
    finite = np.isfinite(a) & np.isfinite(g)
    af, gf = a[finite], g[finite]
    abs_err = np.abs(af - gf)
    rel = abs_err / (np.abs(gf) + _EPS)
    max_abs, mere, mare = (float(abs_err.max()), float(rel.mean()), float(rel.max())) if rel.size else (0.0, 0.0, 0.0)
    passed = mere < t and mare < 10 * t and nan_mismatch == 0 and inf_mismatch == 0
    notes = ([f"held to {through}'s threshold: the unfused graph computes it by way of {through} values"]
             if widened else [])
    if nan_mismatch:
        notes.append(f"NaN position mismatch at {nan_mismatch} elements")
    if inf_mismatch:
        notes.append(f"Inf position mismatch at {inf_mismatch} elements")
    if mere >= t:
        notes.append("MERE over threshold")
    if mare >= 10 * t:
        notes.append("MARE over 10x threshold")
        # the verdict stays the standard's; the note says when it is only rounding ties
        over = rel >= 10 * t
        steps_of = half_dtype(through) if through is not None and widened else actual.dtype
        tiny, steps = subnormal_steps(steps_of, af[over], gf[over])
        if np.all(tiny & (steps <= 1)):
            notes.append(f"all {int(over.sum())} elements over it have a subnormal golden and are one step "
                         f"({float(ml_dtypes.finfo(steps_of).smallest_subnormal):.3g}) from it: "
                         "a rounding tie, not a wrong formula")
    return Comparison(name, dname, shape, max_abs, mere, mare, t, nan_mismatch, inf_mismatch,
                      passed, "; ".join(notes))
