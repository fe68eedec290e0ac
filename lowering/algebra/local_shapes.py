"""Uniform fills, and why a value's type is unknown, worked out from the few nodes behind a value.

uniform_fill answers the question shape arithmetic raises for a match: whether a value holds one
number everywhere (ones_like written as Expand(Reshape(Expand(1, []), [1, 1]), Max(Shape(.), dims))
by paddle2onnx), and which nodes compute it; its shape comes from the index's types (the model's,
or inferred from the producers by lowering.local_types). why_unknown names the producer that
leaves a value's type unknown (an op outside ONNX), for the near miss's reason.

Everything is a pure function of a GraphIndex; nothing changes the graph.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import GraphIndex, ValueType, attr
from ..local_types import SAME_AS_FIRST_INPUT

MAX_DEPTH = 24  # producers a reason is looked for through
_STANDARD = ("", "ai.onnx")


def shape_of(name: str, index: GraphIndex) -> tuple[int | str, ...] | None:
    """The shape of `name` (numbers or symbolic names), declared or derived; None when a dim or the
    rank is unknown."""
    vt = index.type_of(name)
    if vt is None or vt.shape is None or any(d is None for d in vt.shape):
        return None
    return tuple(d for d in vt.shape if d is not None)


# ops that move a uniform value without changing it (only its shape, or its type for Cast)
_UNIFORM_THROUGH = frozenset({"Expand", "Reshape", "Identity", "Unsqueeze", "Squeeze", "Flatten", "Tile", "Cast"})


def uniform_fill(name: str, index: GraphIndex, depth: int = 8) -> tuple[float, set[int], set[str]] | None:
    """(v, nodes, reads) when `name` holds the one number v in every element, through the ops that
    move a uniform value (Expand, Reshape, Unsqueeze, Squeeze, Flatten, Tile, Identity, Cast) from a
    uniform constant or a ConstantOfShape: `nodes` compute it (with their shape arithmetic), `reads`
    are the non-constant values those nodes read (the tensors whose shapes they take). None when
    it is not uniform or has no element."""
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
        found = uniform_fill(node.input[0], index, depth - 1)
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
            _shape_nodes(value, index, nodes, reads, depth)
    made = {out for k in nodes for out in index.nodes[k].output}
    return v, nodes, reads - made


def _shape_nodes(name: str, index: GraphIndex, nodes: set[int], reads: set[str], depth: int) -> None:
    """Adds the nodes computing a shape-carrying value to `nodes`, and the tensors they take a
    shape from (or any value they read that is not a constant) to `reads`."""
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


def why_unknown(name: str, index: GraphIndex, depth: int = MAX_DEPTH) -> str:
    """Why the index knows no element type for `name`: the first producer behind it whose output type
    neither the model nor the local rules give."""
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
