"""Evaluation of a hypothesis on probes: a quick refusal, and the rounding check.

A region is accepted only when lowering.proof proves it equal to the contract over the extended
reals (every finite input, +-inf and NaN, overflow). Evaluation does two things around that:
  * before the proof, the probes (every piece of the contract, its breakpoints exactly, the
    region's own constants, runtime scalars of both signs and zero) find most wrong hypotheses at
    once, and a point where the region and the contract differ in float64 is a counterexample
    the refusal can show; agreeing on the probes proves nothing;
  * after it, the graph's own types: the region computed as onnxruntime computes it (float16
    arithmetic rounded per op, constants as stored) against the kernel's float32 and one
    rounding, within the graph dtype's rounding. A region that loses all significance there
    (adding 2^24 and taking it away) is refused, however exact it is over the reals.
Only finite probe positions are compared: the proof decides what +-inf and NaN inputs give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import SupportsFloat

import ml_dtypes
import numpy as np
import onnx

from ...graph import GraphIndex
from .evaluate import Evaluator, Unsupported, np_type
from .region import Region

# relative tolerance of the graph-dtype comparison, per output type: the CANN precision standard's
# bound on one element's relative error (its MARE, 10 times the dtype's threshold 2^-13, 2^-10,
# 2^-7): the region rounds each of its ops, the kernel once, and no more than that may separate them
_DTYPE_RTOL: dict[int, float] = {onnx.TensorProto.FLOAT: 10 * 2.0**-13, onnx.TensorProto.FLOAT16: 10 * 2.0**-10,
                                  onnx.TensorProto.BFLOAT16: 10 * 2.0**-7}
_EPS: dict[int, float] = {onnx.TensorProto.FLOAT: 2.0**-23, onnx.TensorProto.FLOAT16: 2.0**-10,
                          onnx.TensorProto.BFLOAT16: 2.0**-7}


@dataclass
class Probe:
    """One draw: a value for every leaf of the region (tensors as 1-D arrays of one length)."""
    leaves: dict[str, np.ndarray]


@dataclass
class Verdict:
    holds: bool
    reason: str = ""  # when it does not: the counterexample, in one line
    mismatches: int = 0  # how many probe elements differ (to rank rejected hypotheses)


# (leaf values in float64, whether to compute as the kernel does, in float32) -> the fused op's output
Contract = Callable[[dict[str, np.ndarray], bool], np.ndarray]


def fmt(v: SupportsFloat) -> str:
    return f"{float(v):.9g}"


def run_region(index: GraphIndex, region: Region, leaves: dict[str, np.ndarray], wide: bool) -> np.ndarray:
    nodes = [index.nodes[i] for i in region.nodes]
    return np.asarray(Evaluator(index, wide).run(nodes, leaves)[region.output])


def check(index: GraphIndex, region: Region, probes: Iterable[Probe], contract: Contract, described: str,
          roles: dict[str, str], dtype: int, rtol_dtype: int) -> Verdict:
    """Compares region and contract on every probe, in float64 and in the graph's types."""
    source = iter(probes)
    drawn: list[Probe] = []  # drawn as needed: most wrong hypotheses fail on the first
    nodes = [index.nodes[i] for i in region.nodes]
    for wide in (True, False):
        evaluator = Evaluator(index, wide)
        for probe in (_drawing(source, drawn) if wide else drawn):
            leaves = probe.leaves if wide else _in_graph_types(index, probe.leaves)
            try:
                values = evaluator.run(nodes, leaves)
            except Unsupported as exc:
                return Verdict(False, f"the region holds {exc}")
            got = np.asarray(values[region.output])
            # the contract reads what the region computed for a leaf it also computes (a threshold
            # lr * l1 rounded as the graph rounds it)
            wide_leaves = {k: _to64(values[k]) for k in leaves}
            want = contract(wide_leaves, not wide)
            if not wide:
                with np.errstate(over="ignore"):
                    want = _to64(want.astype(np.float32).astype(np_type(dtype)))  # float32 compute, one rounding
            got64 = _to64(got)
            got64, want = np.broadcast_arrays(got64, want)
            rtol = 4 * _EPS[rtol_dtype] if wide else _DTYPE_RTOL[dtype]
            # near the float range the proof's overflow question decides, with its excuses
            limit = None if wide else float(np.finfo(np.float32).max if dtype == onnx.TensorProto.BFLOAT16
                                            else np.finfo(np_type(dtype)).max) / 2.0**20
            bad = _differ(got64, want, wide_leaves, region.tensors, rtol, limit)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                at = ", ".join(f"{roles.get(k, k)}={fmt(np.broadcast_to(v, got64.shape)[j] if v.ndim else v)}"
                               for k, v in sorted(wide_leaves.items(), key=lambda kv: roles.get(kv[0], kv[0]))
                               if k in roles)
                where = "" if wide else f" (in {onnx.TensorProto.DataType.Name(dtype).lower()})"
                return Verdict(False, f"differs from {described} at {at}{where}: the graph gives {fmt(got64[j])}, "
                                      f"the fused op {fmt(want[j])}", int(bad.sum()))
    return Verdict(True)


def _drawing(source: Iterator[Probe], drawn: list[Probe]) -> Iterator[Probe]:
    for probe in source:
        drawn.append(probe)
        yield probe


def _differ(got: np.ndarray, want: np.ndarray, leaves: dict[str, np.ndarray], tensors: tuple[str, ...],
            rtol: float, limit: float | None = None) -> np.ndarray:
    """Elements where the values differ (NaN equals NaN), among those whose tensor inputs are all
    finite and, given a `limit`, no larger than it (lowering.proof decides the others)."""
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    with np.errstate(all="ignore"):
        # an infinite value equals only itself (inf <= rtol * inf would pass anything)
        close = (got == want) | (np.isfinite(got) & np.isfinite(want)
                                 & (np.abs(got - want) <= rtol * np.maximum(np.abs(got), np.abs(want))))
    same = (nan_g & nan_w) | (~nan_g & ~nan_w & close)
    nonfinite = np.zeros(got.shape, bool)
    for name in tensors:
        v = leaves.get(name)
        if v is not None:
            with np.errstate(invalid="ignore"):
                out_of_range = ~np.isfinite(v) | (np.abs(v) > limit if limit is not None else False)
            nonfinite |= out_of_range  # broadcast by the in-place or, which refuses to grow the mask
    return ~same & ~nonfinite


def _to64(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        a = a.astype(np.float32)
    return a.astype(np.float64) if a.dtype.kind in "fiub" else a


def _in_graph_types(index: GraphIndex, leaves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name, value in leaves.items():
        t = np_type(index.elem_type(name))
        with np.errstate(over="ignore"):  # a probe beyond float16's range becomes inf, as in the graph
            out[name] = value.astype(t) if t is not None and value.dtype != t else value
    return out
