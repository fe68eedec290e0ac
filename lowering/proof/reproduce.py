"""Re-runs a solver's counterexample in the graph's own types before a reason shows it.

The solver's point is exact; the graph computes in float32 (or narrower). The point is rounded to
each input's type, the region evaluated as onnxruntime does (lowering.patterns.meaning.evaluate),
the contract as the kernel does (float32, one rounding to the output type), and the point is
shown only where the two still differ by more than the dtype's rounding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx

from contracts.fused_ops import OP_SPECS

from ..algebra import Algebra
from ..patterns.base import Match
from ..patterns.meaning.evaluate import Evaluator, Unsupported, np_type
from .structure import Structure

RTOL: dict[int, float] = {onnx.TensorProto.FLOAT: 2.0**-16, onnx.TensorProto.FLOAT16: 2.0**-8,
                          onnx.TensorProto.BFLOAT16: 2.0**-5}


def reproduce(alg: Algebra, match: Match, s: Structure, point: Mapping[str, float], counts: Sequence[float],
              roles: Sequence[tuple[str, tuple[str, int]]]) -> tuple[float, float, int] | None:
    """(graph value, fused-op value, dtype) at `point` when they differ in the graph's types."""
    index = alg.index
    leaf_role = {k: role for role, (kind, k) in roles if kind == "in"}
    leaves: dict[str, np.ndarray] = {}
    count_values = iter(counts)
    count_of: dict[int, float] = {}
    for name, (kind, k) in s.leaf_refs.items():
        t = np_type(index.elem_type(name)) or np.dtype(np.float32)
        with np.errstate(over="ignore"):
            if kind == "in":
                leaves[name] = np.asarray(point.get(leaf_role.get(k, ""), 0.0)).astype(t)
            elif kind == "c":
                leaves[name] = np.asarray(np.asarray(float(s.constants[k]) if not isinstance(s.constants[k], bool)
                                                     else s.constants[k])).astype(t)
            else:
                if k not in count_of:
                    count_of[k] = next(count_values, 4.0)
                static = index.numel(s.numels[k])
                leaves[name] = np.asarray(static if static is not None else count_of[k]).astype(t)
    nodes = [index.nodes[index.producer[n]] for n in s.names]
    try:
        got = np.asarray(Evaluator(index, wide=False).run(nodes, leaves)[match.output])
    except (Unsupported, KeyError):
        return None
    spec = OP_SPECS[match.op_type]
    given: dict[str, np.ndarray] = {}
    for (role, (kind, k)), value in zip(roles, match.inputs):
        if kind == "in":
            given[role] = np.asarray(float(leaves[s.leaves[k]].astype(np.float64)))
        elif isinstance(value, np.ndarray):
            given[role] = np.asarray(value, np.float64)
        else:
            given[role] = np.asarray(point.get(role, 0.0))
    attrs = dict(match.attrs)
    if attrs.get("reduction") == "mean":  # one element stands for the tensor: the norm is 1/numel
        first = match.inputs[0]
        static = index.numel(first) if isinstance(first, str) else None
        n = float(static) if static is not None else (counts[0] if counts else 4.0)
        attrs["reduction"], attrs["scale"] = "none", float(attrs["scale"]) / n  # type: ignore[arg-type]
    dtype = index.elem_type(match.output) or onnx.TensorProto.FLOAT
    with np.errstate(all="ignore"):
        want = spec.golden(given, attrs)[0].astype(np.float32).astype(np_type(dtype))
    g = float(np.asarray(got).astype(np.float64).reshape(-1)[0]) if got.dtype != ml_dtypes.bfloat16 \
        else float(got.astype(np.float32).reshape(-1)[0])
    f = float(np.asarray(want, np.float32).reshape(-1)[0])
    if _same(g, f, RTOL.get(dtype, 2.0**-16)):
        return None
    return g, f, dtype


def _same(a: float, b: float, rtol: float) -> bool:
    if np.isnan(a) or np.isnan(b):
        return bool(np.isnan(a) and np.isnan(b))
    if not (np.isfinite(a) and np.isfinite(b)):
        return a == b
    return abs(a - b) <= rtol * max(abs(a), abs(b))
