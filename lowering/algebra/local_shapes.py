"""The values of shape arithmetic, and uniform fills, worked out from the few nodes behind them.

value_of_shape_expr evaluates with numpy an integer tensor computed from shapes and constants
(Shape, Size, Gather, Slice, Concat, Unsqueeze, Squeeze, Cast, Reshape, Expand, ConstantOfShape
and integer arithmetic), on the types the index knows (the model's, or inferred from producers by
lowering.local_types). uniform_fill answers the question such arithmetic raises: whether a value
holds one number everywhere (ones_like written as Expand(Reshape(Expand(1, []), [1, 1]),
Max(Shape(.), dims)) by paddle2onnx), and which nodes compute it. why_unknown says which producer
leaves a value's type unknown.

Everything is a pure function of a GraphIndex and a memo the caller keeps per index; nothing
changes the graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import GraphIndex, Node, ValueType, attr
from ..local_types import SAME_AS_FIRST_INPUT

MAX_DEPTH = 24  # producers a shape-arithmetic value is evaluated through
MAX_SHAPE_VALUE = 64  # elements of a shape-arithmetic value evaluated (a shape has at most a few)
_STANDARD = ("", "ai.onnx")
_SHAPE_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
                          onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL})
_IN_PROGRESS = object()


@dataclass
class LocalShapes:
    """The memo of one GraphIndex: shape-arithmetic values by name."""

    index: GraphIndex
    opset: int

    def __post_init__(self) -> None:
        self.values: dict[str, object] = {}


def shape_of(name: str, memo: LocalShapes) -> tuple[int | str, ...] | None:
    """The shape of `name` (numbers or symbolic names), declared or derived; None when a dim or the
    rank is unknown."""
    vt = memo.index.type_of(name)
    if vt is None or vt.shape is None or any(d is None for d in vt.shape):
        return None
    return tuple(d for d in vt.shape if d is not None)


def value_of_shape_expr(name: str, memo: LocalShapes, depth: int = MAX_DEPTH) -> np.ndarray | None:
    """The value of an integer tensor of at most MAX_SHAPE_VALUE elements computed from shapes and
    constants (the shape arithmetic exporters write), else None."""
    index = memo.index
    known = index.type_of(name)
    if known is not None and known.elem_type and (known.elem_type not in _SHAPE_TYPES or known.numel is None
                                                  or known.numel > MAX_SHAPE_VALUE):
        return None  # not shape arithmetic (a weight is not read to find that out)
    const = index.const(name)
    if const is not None:
        return const if const.dtype.kind in "iub" and const.size <= MAX_SHAPE_VALUE else None
    if depth <= 0:
        return None
    if name in memo.values:
        found = memo.values[name]
        return found if isinstance(found, np.ndarray) else None
    memo.values[name] = _IN_PROGRESS
    value = _evaluate(name, memo, depth)
    if value is not None and (value.dtype.kind not in "iub" or value.size > MAX_SHAPE_VALUE):
        value = None
    memo.values[name] = value
    return value


def _evaluate(name: str, memo: LocalShapes, depth: int) -> np.ndarray | None:
    index = memo.index
    i = index.producer.get(name)
    if i is None:
        return None
    node = index.nodes[i]
    if (node.domain or "") not in _STANDARD or node.output[0] != name:
        return None
    op = node.op_type
    if op == "Shape":
        shape = shape_of(node.input[0], memo)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        dims = np.array(shape, np.int64)
        start, end = attr(node, "start", 0), attr(node, "end", None)
        return dims[start:end]
    if op == "Size":
        vt = index.type_of(node.input[0])
        return None if vt is None or vt.numel is None else np.array(vt.numel, np.int64)
    args: list[np.ndarray] = []
    for value in node.input:
        if not value:
            return None  # an optional input left out in the middle: not shape arithmetic exporters write
        known = value_of_shape_expr(value, memo)
        if known is None:
            return None
        args.append(known)
    try:
        return _run_shape_op(node, args)
    except (ValueError, IndexError, TypeError, ZeroDivisionError):
        return None


def _run_shape_op(node: Node, args: list[np.ndarray]) -> np.ndarray | None:
    op = node.op_type
    if op == "Identity":
        return args[0]
    if op == "Cast":
        to = onnx.helper.tensor_dtype_to_np_dtype(attr(node, "to"))
        return np.asarray(args[0]).astype(to)
    if op == "Concat":
        return np.concatenate([np.atleast_1d(a) for a in args], axis=attr(node, "axis", 0))
    if op == "Gather":
        return np.take(args[0], args[1], axis=attr(node, "axis", 0))
    if op in ("Unsqueeze", "Squeeze"):
        axes = attr(node, "axes") if len(args) < 2 else [int(a) for a in args[1].reshape(-1)]
        x = args[0]
        if op == "Squeeze":
            return np.squeeze(x, axis=None if axes is None else tuple(axes))
        for axis in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
            x = np.expand_dims(x, axis)
        return x
    if op == "Slice":
        return _slice(node, args)
    if op == "Reshape":
        return args[0].reshape(_reshape_dims(args[0].shape, args[1]))
    if op == "Expand":
        return np.broadcast_to(args[0], np.broadcast_shapes(args[0].shape, tuple(int(d) for d in args[1]))).copy()
    if op == "ConstantOfShape":
        tensor = attr(node, "value")
        fill = numpy_helper.to_array(tensor).reshape(-1)[0] if tensor is not None else np.float32(0)
        return np.full([int(d) for d in args[0].reshape(-1)], fill)
    if op in _INTEGER_MATH:
        return _INTEGER_MATH[op](*args)
    return None


def _slice(node: Node, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    if len(args) > 1:
        starts, ends = args[1], args[2]
        axes = args[3] if len(args) > 3 else np.arange(len(starts))
        steps = args[4] if len(args) > 4 else np.ones(len(starts), np.int64)
    else:  # opset < 10: attributes
        starts, ends = np.array(attr(node, "starts")), np.array(attr(node, "ends"))
        axes = np.array(attr(node, "axes", list(range(len(starts)))))
        steps = np.ones(len(starts), np.int64)
    index = [slice(None)] * x.ndim
    for s, e, a, k in zip(starts, ends, axes, steps):
        index[int(a)] = slice(int(s), int(e), int(k))
    return x[tuple(index)]


def _reshape_dims(shape: tuple[int, ...], target: np.ndarray) -> tuple[int, ...]:
    """Reshape's target with ONNX's 0 (copy the input's dim) and -1 (the rest) resolved."""
    dims = [int(d) for d in target.reshape(-1)]
    dims = [shape[k] if d == 0 and k < len(shape) else d for k, d in enumerate(dims)]
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(shape) // known if known else 0
    return tuple(dims)


def _integer_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a / b).astype(np.result_type(a, b))  # ONNX integer Div truncates
    return a / b


_INTEGER_MATH: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _integer_div,
    "Max": lambda *a: np.maximum.reduce(np.broadcast_arrays(*a)) if len(a) > 1 else a[0],
    "Min": lambda *a: np.minimum.reduce(np.broadcast_arrays(*a)) if len(a) > 1 else a[0],
    "Equal": np.equal, "Where": np.where, "Neg": np.negative, "Abs": np.abs,
    "ReduceProd": lambda x, *axes: np.prod(x, keepdims=False),
}


# ops that move a uniform value without changing it (only its shape, or its type for Cast)
_UNIFORM_THROUGH = frozenset({"Expand", "Reshape", "Identity", "Unsqueeze", "Squeeze", "Flatten", "Tile", "Cast"})


def uniform_fill(name: str, memo: LocalShapes, depth: int = 8) -> tuple[float, set[int], set[str]] | None:
    """(v, nodes, reads) when `name` holds the one number v in every element, through the ops that
    move a uniform value (Expand, Reshape, Unsqueeze, Squeeze, Flatten, Tile, Identity, Cast) from a
    uniform constant or a ConstantOfShape: `nodes` compute it (with their shape arithmetic), `reads`
    are the non-constant values those nodes read (the tensors whose shapes they take). None when
    it is not uniform or has no element."""
    index = memo.index
    const = index.const(name)
    if const is not None:
        flat = const.reshape(-1)
        if not flat.size or const.dtype.kind not in "fiu" or not (flat == flat[0]).all():
            return None
        return float(flat[0]), set(), set()
    i = index.producer.get(name)
    if i is None or depth <= 0:
        return None
    node = index.nodes[i]
    if (node.domain or "") not in _STANDARD or node.output[0] != name:
        return None
    if node.op_type == "ConstantOfShape":
        tensor = attr(node, "value")
        v = float(numpy_helper.to_array(tensor).reshape(-1)[0]) if tensor is not None else 0.0
        inner: tuple[float, set[int], set[str]] = (v, set(), set())
    elif node.op_type in _UNIFORM_THROUGH:
        found = uniform_fill(node.input[0], memo, depth - 1)
        if found is None:
            return None
        inner = found
        if node.op_type == "Cast":
            to = onnx.helper.tensor_dtype_to_np_dtype(attr(node, "to"))
            inner = (float(np.asarray(inner[0]).astype(to)), inner[1], inner[2])
    else:
        return None
    v, nodes, reads = inner[0], set(inner[1]) | {i}, set(inner[2])
    shape_inputs = node.input if node.op_type == "ConstantOfShape" else node.input[1:]
    for value in shape_inputs:
        if value:
            _shape_nodes(value, memo, nodes, reads, depth)
    made = {out for k in nodes for out in index.nodes[k].output}
    return v, nodes, reads - made


def _shape_nodes(name: str, memo: LocalShapes, nodes: set[int], reads: set[str], depth: int) -> None:
    """Adds the nodes computing a shape-carrying value to `nodes`, and the tensors they take a
    shape from (or any value they read that is not a constant) to `reads`."""
    index = memo.index
    stack = [(name, depth)]
    while stack:
        value, left = stack.pop()
        if index.const(value) is not None:
            continue
        i = index.producer.get(value)
        if i is None or left <= 0:
            reads.add(value)
            continue
        node = index.nodes[i]
        nodes.add(i)
        if node.op_type in ("Shape", "Size"):
            reads.add(node.input[0])
            continue
        stack.extend((v, left - 1) for v in node.input if v)


def why_unknown(name: str, memo: LocalShapes, depth: int = MAX_DEPTH) -> str:
    """Why the index knows no element type for `name`: the first producer behind it whose output type
    neither the model nor the local rules give."""
    index = memo.index
    for _ in range(depth):
        i = index.producer.get(name)
        if i is None:
            return f"{name} has no type in the model"
        node = index.nodes[i]
        if (node.domain or "") not in _STANDARD and (node.domain, node.op_type) not in SAME_AS_FIRST_INPUT:
            return (f"{name} is computed by {node.domain} {node.op_type}, an op outside ONNX whose output type "
                    "the model does not declare and the pass has no rule for")
        unknown = next((v for v in node.input if v and not _has_elem_type(index.type_of(v))), None)
        if unknown is None:
            return f"ONNX's inference of {node.op_type} gives no type for {name} from its inputs"
        name = unknown
    return f"the type of {name} is not known within {depth} producers"


def _has_elem_type(vt: ValueType | None) -> bool:
    return vt is not None and bool(vt.elem_type)
