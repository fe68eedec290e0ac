"""What a pattern module returns, and the checks every family shares."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from ..algebra import Algebra, Bound, Monomial, Reach, clip_bounds, is_zero
from ..algebra.local_shapes import why_unknown
from ..graph import DTYPE_NAMES, FLOAT_TYPES, GraphIndex, Node, attr, dtype_name, tensor_value
from .forms import Form

Input = str | np.ndarray  # an existing value, or a new constant the fusion must create


@dataclass
class Match:
    pattern: str  # family/form, e.g. "smooth_l1_grad/where"
    op_type: str
    output: str  # the value the fused node produces (keeps its name, type and shape)
    dtype: int  # its element type (TensorProto enum)
    inputs: list[Input]  # in contracts.fused_ops.OP_SPECS order
    attrs: dict[str, object]
    interior: set[int]  # nodes replaced; their outputs must not be used outside the match
    boundary: set[int] = field(default_factory=set)  # input-side nodes (Casts, scalar math) that may be shared
    caveats: list[str] = field(default_factory=list)  # edge behaviour the user should know about
    duplicate: set[int] = field(default_factory=set)  # interior nodes re-emitted for outside users (CSE undone)
    # interior values only Shape/Size nodes outside read -> an input of the match of the same shape they read instead
    shape_reads: dict[str, str] = field(default_factory=dict)
    # input index -> index of the input whose shape it is broadcast to by an Expand the rewrite
    # puts before the fused node (a label that broadcasts to predict's shape)
    expand: dict[int, int] = field(default_factory=dict)
    # fused only because assume_finite waived a difference at +-inf or NaN inputs
    waived: bool = False


class NoMatch(Exception):
    """Raised inside a pattern when the core shape is there but a check fails; the pass records
    it as a report.Rejection."""


@dataclass(frozen=True)
class Pattern:
    name: str
    anchors: frozenset[str]  # op types a match may end at
    match: Callable[[Algebra, int], Match | None]
    # per anchor op, the pre-check its match starts with: the pass offers an anchor only when one
    # of them holds, which spares a call per anchor for the many that fail it
    prefilter: Mapping[str, tuple[Reach, ...]] = field(default_factory=dict, hash=False, compare=False)
    # the records of the forms the match tries (lowering/patterns/forms.py), for the documentation
    forms: tuple[Form[Any], ...] = field(default=(), hash=False, compare=False)


def refuse_float32_finish(alg: Algebra, x: str, what: str) -> None:
    """Raises NoMatch for a float16/bfloat16 x whose result the graph finishes in float32 (a float32
    mask, `(|x| < beta).float()`, times x's dtype values widened): the result is float32 but x was
    rounded to its own dtype first, which no fused op computes."""
    dtype = alg.index.elem_type(x)
    if dtype in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
        raise NoMatch(f"the result is float32 while {what} is {DTYPE_NAMES[dtype]} (a float32 mask times "
                      "widened values): no fused op computes that")


def refuse_rounded_abs(alg: Algebra, compared: str) -> None:
    """Raises NoMatch when a comparison reads |x| of a float32 x rounded to float16/bfloat16 and
    widened back: onnxruntime's CPU optimizer saves float16 graphs that way (its
    InsertedPrecisionFreeCast nodes compute in float32 and round only what the model compared).
    The rounding moves the threshold to a midpoint between two float16 values, away from the
    beta or t the branches use, and float32 values of x lie between the two."""
    narrow = alg.widened(compared)
    cast = None if narrow == compared else alg.producer(narrow, "Cast")
    if cast is not None and alg.index.elem_type(cast[1].input[0]) == onnx.TensorProto.FLOAT \
            and alg.unary(cast[1].input[0], "Abs") is not None:
        raise NoMatch(f"the comparison reads |x| rounded to {dtype_name(alg.index.elem_type(narrow))} and back "
                      "while x is float32 (onnxruntime's CPU optimizer writes this): it compares at another "
                      "threshold than its branches use")


def cap_of_nonnegative(alg: Algebra, clip: Node) -> Bound:
    """The max of Clip(y, lo, max) when its lower bound is left out or a constant <= 0, so that it
    only caps a y that is never below 0 (|x|, |x|/beta); None otherwise or without a max."""
    lo, hi = clip_bounds(clip)
    floor = None if lo is None else alg.bound_value(lo)
    return None if lo is not None and (floor is None or not floor <= 0) else hi


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


def broadcasts_to(index: GraphIndex, small: str, full: str) -> bool:
    """True when `small`'s shape broadcasts to `full`'s without changing it: both ranks known, and
    every dim of small, aligned right, is 1 or known to equal full's (a number or the same name)."""
    ts, tf = index.type_of(small), index.type_of(full)
    if ts is None or tf is None or ts.shape is None or tf.shape is None or len(ts.shape) > len(tf.shape):
        return False
    return all(d == 1 or (d is not None and d == e) for d, e in zip(reversed(ts.shape), reversed(tf.shape)))


def named_apart(index: GraphIndex, a: str, b: str) -> bool:
    """Whether a and b have one known rank and no two dims known to differ: an exporter named
    their dynamic dims apart (tf2onnx's unk__6 and unk__7), so nothing says they agree. An Expand
    of each to the other's shape gives both the shape the graph's own broadcast of the two gives
    (Expand broadcasts both ways) and fails where that broadcast fails, so a fused node reading
    the two expanded computes what the graph computes, with one shape for the kernel."""
    ta, tb = index.type_of(a), index.type_of(b)
    sa = None if ta is None else ta.shape
    sb = None if tb is None else tb.shape
    return sa is not None and sb is not None and len(sa) == len(sb) and all(
        x == y or not (isinstance(x, int) and isinstance(y, int)) for x, y in zip(sa, sb))


def named_apart_caveat(index: GraphIndex, a: str, b: str) -> str:
    """What the report says of two inputs the rewrite expands to each other's shape (named_apart)."""
    return (f"{shape_text(index, a)} and {shape_text(index, b)} are each expanded to the other's shape before "
            "the fused node (dims named apart: the kernel reads both at the shape of their broadcast)")


def shapes_differ(index: GraphIndex, a: str, b: str, what: str) -> str:
    """The reason for refusing two values whose shapes are not known to be equal. Where they differ
    only in dims with different symbolic names (tf2onnx names every unknown dim on its own), the
    reason says how to give those dims one size."""
    reason = f"{what} shapes differ or are unknown ({shape_text(index, a)}, {shape_text(index, b)})"
    ta, tb = index.type_of(a), index.type_of(b)
    if ta is None or tb is None or ta.shape is None or tb.shape is None or len(ta.shape) != len(tb.shape):
        return reason
    pairs = [(x, y) for x, y in zip(ta.shape, tb.shape) if x != y]
    if not pairs or not all(isinstance(x, str) and isinstance(y, str) for x, y in pairs):
        return reason
    names = sorted({name for pair in pairs for name in pair if isinstance(name, str)})
    return (f"{reason}; if {', '.join(names)} are one size at runtime, fix them, e.g. python -m "
            f"onnxruntime.tools.make_dynamic_shape_fixed --dim_param {names[0]} --dim_value N IN OUT, once per dim")


def is_single_element(index: GraphIndex, value: str) -> bool:
    return index.numel(value) == 1


def float_dtype(index: GraphIndex, value: str) -> int | None:
    t = index.elem_type(value)
    return t if t in FLOAT_TYPES else None


def require_float(index: GraphIndex, value: str, role: str) -> int:
    """The float16/bfloat16/float32 element type of `value`; NoMatch naming `role` otherwise,
    saying whether its type is another one or not known at all (a contrib op without value_info)."""
    t = index.elem_type(value)
    if t in FLOAT_TYPES:
        return t
    if t is None:
        why = f": {why_unknown(value, index)}"
        raise NoMatch(f"{role} ({value}) has no known element type{why}")
    raise NoMatch(f"{role} ({value}) is {DTYPE_NAMES.get(t, t)}, not float16/bfloat16/float32")


_HALF_SCALARS: dict[int, type] = {onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.BFLOAT16: ml_dtypes.bfloat16}


def same_threshold(dtype: int | None, compared: float, strict: bool, shift: float) -> bool:
    """Whether taking the shifted branch p - sign(p)*shift where |p| > compared (strict) or
    |p| >= compared is the shrink at threshold shift for every |p| of dtype: the shrink takes it
    where |p| > shift, and at |p| == shift both give 0. A float16/bfloat16 graph may compare its
    |p|, widened exactly, with the float32 threshold and shift by that threshold rounded to its
    dtype (torch's softshrink on a half tensor); the two agree when no value of the dtype lies
    between them."""
    if compared == shift:
        return True
    half = _HALF_SCALARS.get(dtype) if dtype is not None else None
    if half is None or not (math.isfinite(compared) and math.isfinite(shift)) or shift < 0:
        return False
    s, c, up = half(shift), half(compared), half(np.inf)
    if float(s) != shift:
        return False
    reached = float(c) > compared if strict else float(c) >= compared
    first = c if reached else np.nextafter(c, up)  # the least value of the dtype taking that branch
    return float(first) in (shift, float(np.nextafter(s, up)))


def close(a: float, b: float, rel: float = 1e-5) -> bool:
    """numpy.isclose(a, b, rtol=rel, atol=0) for two floats, without numpy's per-call cost."""
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * abs(b))


def absorb_casts(alg: Algebra, output: str,
                 tensors: list[str]) -> tuple[str, list[str], set[int], set[int], int] | None:
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
    target: int | None = onnx.helper.get_attribute_value(cast.attribute[0]) if cast.attribute else None
    if target is None:
        return None
    sources: list[str] = []
    casts: set[int] = set()
    for t in tensors:
        found = alg.uncast(t)
        if found is None or found[2] != target:
            return None
        sources.append(found[0])
        casts.add(found[1])
    return cast.output[0], sources, {ci}, casts, target


def single_factor(mono: Monomial) -> str | None:
    """The one runtime value of a monomial that is exactly that value, else None."""
    if mono.coef != 1.0 or len(mono.factors) != 1:
        return None
    (name, exp), = mono.factors.items()
    return name if exp == 1 else None


def fill(alg: Algebra, value: str, like: str | None = None) -> tuple[float, set[int]] | None:
    """(v, nodes) when value holds one number v everywhere: a constant (no nodes), or
    ConstantOfShape(shape) or Expand(v, shape) for torch.zeros_like/ones_like, shape = Shape(s) or
    its folded constant. None otherwise or, given `like`, when it could broadcast `like` to a
    larger shape."""
    index = alg.index
    const = index.const(value)
    nodes: set[int] = set()
    shape_of: tuple[int, ...] | str | None = None  # what the fill's shape is known to be
    if const is not None:
        shape_of = const.shape
    else:
        found = alg.producer(value, "ConstantOfShape", "Expand")
        if found is None:
            return None
        i, node = found
        const = fill_value(index, node)
        if const is None:
            return None
        nodes.add(i)
        dims = index.const(node.input[-1])
        if dims is not None:
            shape_of = tuple(int(d) for d in dims.reshape(-1))
        elif (shape := alg.producer(node.input[-1], "Shape")) is not None:
            nodes.add(shape[0])
            if not attr(shape[1], "start") and attr(shape[1], "end") is None:
                shape_of = shape[1].input[0]
    if const.size == 0:
        return None
    flat = const.reshape(-1)
    if not (flat == flat[0]).all():
        return None
    if like is not None and not within_shape(index, shape_of, like):
        return None
    return float(flat[0]), nodes


def fill_value(index: GraphIndex, node: Node) -> np.ndarray | None:
    """What an Expand(v, shape) or a ConstantOfShape(shape) node repeats: a constant 0-D v, or
    ConstantOfShape's value (0 when it has none); None for an Expand of anything else."""
    if node.op_type == "Expand":
        value = index.const(node.input[0]) if len(node.input) == 2 else None
        return value if value is not None and not value.ndim else None
    given = attr(node, "value")
    return np.zeros(1) if given is None else tensor_value(given)


def zero_nodes(alg: Algebra, value: str, like: str | None = None) -> set[int] | None:
    """fill's nodes when value is all zeros (-0.0 included)."""
    found = fill(alg, value, like)
    return found[1] if found is not None and found[0] == 0.0 else None


def within_shape(index: GraphIndex, shape_of: tuple[int, ...] | str | None, like: str) -> bool:
    """Whether a constant (zeros, a uniform value) of shape `shape_of` (dims, or the shape of a
    named value) leaves `like`'s shape as it is when broadcast against it."""
    if isinstance(shape_of, str):
        return shape_of == like or same_shape(index, shape_of, like)
    if shape_of is None:
        return False
    if not shape_of:
        return True
    vt = index.type_of(like)
    if vt is None or vt.shape is None:
        return False
    dims = tuple(d for d in vt.shape if isinstance(d, int))
    if len(dims) != len(vt.shape):
        return False
    try:
        return np.broadcast_shapes(shape_of, dims) == dims
    except ValueError:
        return False


def zero_branch(alg: Algebra, mono: Monomial) -> set[int] | None:
    """The nodes computing a select branch that is all zeros (a 0 folded into the coefficient,
    or a zeros tensor), else None."""
    if is_zero(mono):
        return set(mono.nodes)
    zero = single_factor(mono)
    return None if zero is None else zero_nodes(alg, zero)
