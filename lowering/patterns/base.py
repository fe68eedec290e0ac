"""What a pattern module returns, and the checks every family shares."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Union

import numpy as np
import onnx

from ..algebra import Algebra
from ..graph import FLOAT_TYPES, GraphIndex

Input = Union[str, np.ndarray]  # an existing value, or a new constant the fusion must create


@dataclass
class Match:
    pattern: str  # family/form, e.g. "smooth_l1_grad/where"
    op_type: str
    output: str  # the value the fused node produces (keeps its name, type and shape)
    dtype: int  # its element type (TensorProto enum)
    inputs: list[Input]  # in lowering.fused_ops.OP_SPECS order
    attrs: dict[str, object]
    interior: set[int]  # nodes replaced; their outputs must not be used outside the match
    boundary: set[int] = field(default_factory=set)  # input-side nodes (Casts, scalar math) that may be shared
    caveats: list[str] = field(default_factory=list)  # edge behaviour the user should know about
    duplicate: set[int] = field(default_factory=set)  # interior nodes re-emitted for outside users (CSE undone)


class NoMatch(Exception):
    """Raised inside a pattern when the core shape is there but a check fails; the pass records it as a report.Rejection."""


@dataclass(frozen=True)
class Pattern:
    name: str
    anchors: frozenset[str]  # op types a match may end at
    match: Callable[[Algebra, int], Union[Match, None]]


def require(condition: bool, reason: str) -> None:
    if not condition:
        raise NoMatch(reason)


def same_shape(index: GraphIndex, a: str, b: str) -> bool:
    """True when both shapes are fully known to be equal (numbers or the same symbolic names)."""
    ta, tb = index.type_of(a), index.type_of(b)
    if ta is None or tb is None or ta.shape is None or tb.shape is None:
        return False
    return len(ta.shape) == len(tb.shape) and all(x == y and x is not None for x, y in zip(ta.shape, tb.shape))


def shape_text(index: GraphIndex, value: str) -> str:
    """A value's shape for a rejection reason: [4, n] with symbolic names, ? for an unknown dim."""
    vt = index.type_of(value)
    if vt is None or vt.shape is None:
        return f"{value}: shape unknown"
    return f"{value}: [{', '.join('?' if d is None else str(d) for d in vt.shape)}]"


def shapes_differ(index: GraphIndex, a: str, b: str, what: str) -> str:
    """The reason for refusing two values whose shapes are not known to be equal."""
    return f"{what} shapes differ or are unknown ({shape_text(index, a)}, {shape_text(index, b)})"


def is_single_element(index: GraphIndex, value: str) -> bool:
    return index.numel(value) == 1


def float_dtype(index: GraphIndex, value: str) -> int | None:
    t = index.elem_type(value)
    return t if t in FLOAT_TYPES else None


def close(a: float, b: float, rel: float = 1e-5) -> bool:
    """numpy.isclose(a, b, rtol=rel, atol=0) for two floats, without numpy's per-call cost."""
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * abs(b))


def absorb_casts(alg: Algebra, output: str, tensors: list[str]) -> tuple[str, list[str], set[int], set[int], int] | None:
    """Absorbs a float16/bfloat16 -> float32 -> float16/bfloat16 Cast sandwich around a match.

    Returns (new output, new tensor inputs, interior output cast, boundary input casts, dtype)
    when the output's only consumer is a Cast back to T and every tensor input is a Cast from T.
    """
    index = alg.index
    consumers = index.consumers.get(output, [])
    if len(consumers) != 1 or output in index.graph_outputs:
        return None
    ci = consumers[0]
    if ci in alg.taken:
        return None
    cast = index.nodes[ci]
    if cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx"):
        return None
    target = onnx.helper.get_attribute_value(cast.attribute[0]) if cast.attribute else None
    sources: list[str] = []
    casts: set[int] = set()
    for t in tensors:
        found = alg.uncast(t)
        if found is None or found[2] != target:
            return None
        sources.append(found[0])
        casts.add(found[1])
    return cast.output[0], sources, {ci}, casts, target
