"""What the rewrite must not break, checked in linear time on the way out.

The input passed the ONNX checker when it was loaded, and the pass changes only names read by
nodes, operand order, dropped nodes and the fused nodes with their function bodies. So instead of
re-running the checker over the whole model (it costs as much as the rest of the pass on big
graphs), the output is checked for what those changes could break: every value read is defined
before it is read, every value is defined once, graph outputs exist, and every function body is
closed over its formal inputs in the same way. The test suite runs the full checker on every
fused model it makes.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from .errors import LoweringError
from .graph import Node


def _check_order(where: str, defined: set[str], nodes: Iterable[Node | onnx.NodeProto]) -> None:
    for node in nodes:
        for name in node.input + node.captures if isinstance(node, Node) else node.input:
            if name and name not in defined:
                raise LoweringError(f"internal error: in {where}, {_label(node)} reads {name} before it is defined")
        for name in node.output:
            if name in defined:
                raise LoweringError(f"internal error: in {where}, {name} is defined twice (again by {_label(node)})")
            if name:
                defined.add(name)


def _label(node: Node | onnx.NodeProto) -> str:
    return f"{node.op_type} node {node.name!r}" if node.name else f"a {node.op_type} node"


def check_graph(nodes: list[Node], available: set[str], graph_outputs: Iterable[str]) -> set[str]:
    """Checks the node order against the values `available` from the start (graph inputs,
    initializers); returns every value the nodes read."""
    defined = set(available)
    _check_order("the fused graph", defined, nodes)
    missing = [name for name in graph_outputs if name not in defined]
    if missing:
        raise LoweringError(f"internal error: graph output {missing[0]} is no longer computed")
    reads: set[str] = set()
    for node in nodes:
        reads.update(node.input)
    return reads


def check_function(function: onnx.FunctionProto) -> None:
    where = f"function {function.domain}::{function.name} ({function.overload})"
    _check_order(where, set(function.input), function.node)
    missing = [name for name in function.output if name not in {o for n in function.node for o in n.output}]
    if missing:
        raise LoweringError(f"internal error: {where} does not compute {missing[0]}")
