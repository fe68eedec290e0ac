"""Proof by evaluation: a region is accepted when it equals the fused op's contract on a probe set.

Why agreement on the probes implies identity, for the regions the recogniser evaluates: every op
it runs (lowering.patterns.meaning.evaluate) is +, -, *, /, abs, sign, min, max, a comparison, a
select or a cast, so along one tensor input x (the others fixed) both the region and the contract
are piecewise rational functions of x whose pieces change only where a comparison flips, and the
degree of each piece is bounded by the region's node count. The probes hold, per run of the runtime
scalars: points on both sides of, and exactly at, every breakpoint of the contract (+-sigma,
+-threshold, +-0), at and around every constant the region holds (where a comparison of the region
may flip), several random points inside every piece of the contract, and the non-finite inputs the
contract defines (+-inf, NaN in each tensor input). Two rational functions of bounded degree that
agree on more random points of an interval than their degree are equal there; a breakpoint of the
region that is not a breakpoint of the contract either changes the value (and a random point in
the piece, or the constant it compares with, shows it) or does not matter; a tie (`<` against `<=`)
matters only at the breakpoint itself, which is probed exactly. Runtime scalars (dout, alpha, a
threshold computed upstream) are drawn several times, with both signs and zero, so the identity
holds as a function of them too. The comparison is exact up to the rounding of the graph's own
constants (a relative 4 eps of the graph's float type, far below the precision standard), done
once with every float computed in float64 (the function itself) and once in the graph's own types
(its rounding, float16 overflow, float16 Sign of NaN). Where the contract and the region differ
only because an input is +-inf and the region gives NaN (a mask that multiplies the branch not
taken), the fusion is accepted with a caveat, as the syntactic path does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import SupportsFloat

import ml_dtypes
import numpy as np
import onnx

from ...graph import GraphIndex, Node
from .evaluate import Evaluator, Unsupported, np_type
from .region import Region

# relative tolerance of the graph-dtype comparison, per output type: the region rounds each of
# its ops, the contract once
_DTYPE_RTOL: dict[int, float] = {onnx.TensorProto.FLOAT: 2.0**-16, onnx.TensorProto.FLOAT16: 2.0**-8,
                                  onnx.TensorProto.BFLOAT16: 2.0**-5}
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
    caveats: list[str] = field(default_factory=list)


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
    inf_caveat = False
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
            bad, relaxed = _differ(got64, want, wide_leaves, region.tensors, rtol)
            if not wide and bad.any() and not narrows_inside(index, region):
                bad &= ~_closer_to_exact(index, region, leaves, got64, want)
            inf_caveat |= relaxed
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                at = ", ".join(f"{roles.get(k, k)}={fmt(np.broadcast_to(v, got64.shape)[j] if v.ndim else v)}"
                               for k, v in sorted(wide_leaves.items(), key=lambda kv: roles.get(kv[0], kv[0]))
                               if k in roles)
                where = "" if wide else f" (in {onnx.TensorProto.DataType.Name(dtype).lower()})"
                return Verdict(False, f"differs from {described} at {at}{where}: the graph gives {fmt(got64[j])}, "
                                      f"the fused op {fmt(want[j])}", int(bad.sum()))
    caveats = ["where a tensor input is +-inf the graph computes NaN (a mask times the branch not taken), the "
               "kernel the selected branch's value"] if inf_caveat else []
    return Verdict(True, caveats=caveats)


def _drawing(source: Iterator[Probe], drawn: list[Probe]) -> Iterator[Probe]:
    for probe in source:
        drawn.append(probe)
        yield probe


def narrows_inside(index: GraphIndex, region: Region) -> bool:
    """Whether the region rounds a value to a narrower float type before its last node (a compare
    of |x| rounded to float16 in a float32 graph): that rounding is part of what it computes."""
    order: dict[int | None, int] = {onnx.TensorProto.BFLOAT16: 0, onnx.TensorProto.FLOAT16: 1,
                                    onnx.TensorProto.FLOAT: 2, onnx.TensorProto.DOUBLE: 3}
    for i in region.nodes:
        node = index.nodes[i]
        if node.op_type == "Cast" and node.output[0] != region.output:
            to, source = order.get(attr_to(node)), order.get(index.elem_type(node.input[0]))
            if to is not None and source is not None and to < source:
                return True
    return False


def attr_to(node: Node) -> int | None:
    for a in node.attribute:
        if a.name == "to":
            return a.i
    return None


def _closer_to_exact(index: GraphIndex, region: Region, leaves: dict[str, np.ndarray], got: np.ndarray,
                     want: np.ndarray) -> np.ndarray:
    """Elements where the fused op is at least as close as the graph's own rounding to the
    region's exact value on the same inputs: the graph loses digits there (x - (|x| - 1) for a
    large float32 x), and the kernel, computing the contract, loses fewer."""
    exact = _to64(run_region(index, region, leaves, wide=True))
    exact = np.broadcast_to(exact, got.shape)
    with np.errstate(all="ignore"):
        return np.isfinite(got) & np.isfinite(want) & (np.abs(want - exact) <= np.abs(got - exact))


def _differ(got: np.ndarray, want: np.ndarray, leaves: dict[str, np.ndarray], tensors: tuple[str, ...],
            rtol: float) -> tuple[np.ndarray, bool]:
    """Elements where the values differ (NaN equals NaN), and whether any difference was let
    through because a tensor input is infinite and the graph gives NaN there."""
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    with np.errstate(all="ignore"):
        # an infinite value equals only itself (inf <= rtol * inf would pass anything)
        close = (got == want) | (np.isfinite(got) & np.isfinite(want)
                                 & (np.abs(got - want) <= rtol * np.maximum(np.abs(got), np.abs(want))))
    same = (nan_g & nan_w) | (~nan_g & ~nan_w & close)
    infinite = np.zeros(got.shape, bool)
    for name in tensors:
        v = leaves.get(name)
        if v is not None:
            infinite |= np.isinf(v)  # broadcast by the in-place or, which refuses to grow `infinite`
    relaxed = ~same & infinite & nan_g & ~nan_w
    return ~same & ~relaxed, bool(relaxed.any())


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
