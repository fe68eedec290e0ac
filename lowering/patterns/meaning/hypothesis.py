"""What a hypothesis is (a fused op, its inputs bound to region leaves, its attributes inferred),
and the helpers both families use to infer attributes and build probe points."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx

from ...graph import DTYPE_NAMES, FLOAT_TYPES, GraphIndex, dtype_name
from ..base import Input, NoMatch, require_float
from .proof import Contract, Probe, run_region
from .region import Region


class Counterexample(NoMatch):
    """No attributes can make the fused op match: the message gives the input and the graph's value."""


@dataclass
class Proposal:
    op_type: str
    attrs: dict[str, object]
    inputs: list[Input]  # in contracts.fused_ops.OP_SPECS order
    roles: dict[str, str]  # leaf -> the name counterexamples give it (predict, dout, alpha, ...)
    contract: Contract
    probes: Iterable[Probe]  # drawn lazily: a wrong hypothesis usually fails on the first
    dtype: int  # the fused node's tensor type
    expand: dict[int, int] = field(default_factory=dict)
    caveats: list[str] = field(default_factory=list)

    def described(self) -> str:
        attrs = ", ".join(f"{k}={v:.9g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op_type}({attrs})"


def evaluate(index: GraphIndex, region: Region, leaves: dict[str, np.ndarray]) -> np.ndarray:
    """The region in float64 on the given leaves (constants filled in)."""
    return run_region(index, region, {**constant_leaves(region), **leaves}, wide=True).astype(np.float64)


def constant_leaves(region: Region) -> dict[str, np.ndarray]:
    return dict(region.constants)


def numel_leaves(index: GraphIndex, region: Region, n: int) -> dict[str, np.ndarray]:
    """Each numel leaf as the element count n of the probe tensors, in the leaf's own type."""
    out = {}
    for name in region.numels:
        t = index.elem_type(name)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t) if t is not None and t != onnx.TensorProto.BFLOAT16 \
            else np.float32
        out[name] = np.asarray(n, dtype)
    return out


def tensor_type(index: GraphIndex, region: Region, names: list[str], what: str) -> int:
    """The one float type of the named tensor leaves and of the region's output; NoMatch otherwise
    (no fused op takes tensors of one type and gives another)."""
    dtype = require_float(index, names[0], what.split(" and ")[0])
    for name in names[1:]:
        other = require_float(index, name, name)
        if other != dtype:
            raise NoMatch(f"{what} have different types ({name} is {DTYPE_NAMES[other]})")
    out = index.elem_type(region.output)
    if out != dtype:
        raise NoMatch(f"the result is {dtype_name(out)} while the inputs are {DTYPE_NAMES[dtype]}: "
                      "no fused op computes that")
    return dtype


def narrowest(index: GraphIndex, region: Region, dtype: int) -> int:
    """The least precise float type among the region's constants and its tensor type: the
    rounding the region's own numbers carry."""
    order = [onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT]
    types = {dtype} | {index.elem_type(c) for c in region.constants}
    return next(t for t in order if t in types)


def magnitudes(region: Region) -> list[float]:
    """The distinct finite nonzero magnitudes of the region's constants: where its comparisons may flip."""
    out = set()
    for value in region.constants.values():
        v = float(np.asarray(value, np.float64).reshape(-1)[0])
        if np.isfinite(v) and v != 0:
            out.add(abs(v))
    return sorted(out)


def points(rng: np.random.Generator, breaks: list[float], constants: list[float], extra: int = 0) -> np.ndarray:
    """Probe points along one input: +-0, each breakpoint exactly and its float32/float64
    neighbours, random points inside every piece (between consecutive breakpoints, and beyond the
    last one up to very large values), the constants and their neighbours, +-inf and NaN."""
    b = sorted({abs(x) for x in breaks if np.isfinite(x)} - {0.0})
    edges = [0.0] + b
    pts: list[float] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    for x in b:
        x32 = np.float32(x)
        pts += [x, np.nextafter(x, 0), np.nextafter(x, np.inf), float(x32),
                float(np.nextafter(x32, np.float32(0))), float(np.nextafter(x32, np.float32(np.inf)))]
    for lo, hi in zip(edges, edges[1:] + [max(edges[-1], 1.0) * 8]):
        pts += list(rng.uniform(lo, hi, 6))
    top = max(edges[-1], 1.0)
    pts += list(top * 10.0 ** rng.uniform(1, 6, 4))
    for c in constants:
        pts += [c, c * (1 + 2.0**-10), c * (1 - 2.0**-10), c / 2, c * 2]
    pts += list(rng.uniform(0, 2 * top, extra))
    arr = np.asarray(pts, np.float64)
    return np.concatenate([arr[:5], arr[5:], -arr[5:]])  # the first five (+-0, +-inf, NaN) come signed


def is_float_scalar(index: GraphIndex, name: str, dtype: int) -> bool:
    return index.elem_type(name) in (onnx.TensorProto.FLOAT, dtype) and index.elem_type(name) in FLOAT_TYPES


def nudges(breaks: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(at, by): pairs that put a difference a - b within a hair of each breakpoint from both
    sides, a on the breakpoint and b a tiny power of two. In a float16 graph the inputs lie on the
    float16 grid, but their difference (computed in float32) falls between grid points: where a
    graph compares a value rounded to float16, only such points show it."""
    tiny = np.array([2.0**-k for k in (8, 11, 14, 17, 20, 24)])
    at, by = [], []
    for x in sorted({abs(b) for b in breaks if np.isfinite(b) and b != 0}):
        for sign in (1.0, -1.0):
            at += [sign * x] * (2 * len(tiny))
            by += list(tiny) + list(-tiny)
    return np.asarray(at, np.float64), np.asarray(by, np.float64)
