"""What the rewrite must not break, checked in linear time on the way out.

The input passed the ONNX checker when it was loaded, and the pass changes only names read by
nodes, operand order, dropped nodes and the fused nodes with their function bodies. So instead of
re-running the checker over the whole model (it costs as much as the rest of the pass on big
graphs), the output is checked for what those changes could break: every value read is defined
before it is read, graph outputs are still computed, new nodes define only their own or fresh
names (lowering.rewrite), and every function body is closed over its formal inputs and defines each
value once. The test suite runs the full checker on every fused model it makes.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

import onnx

from contracts.errors import LoweringError

from .graph import Node


def _check_order(defined: set[str], nodes: Iterable[Node | onnx.NodeProto], prefix: str = "") -> None:
    """Every value is defined once, before it is read; `prefix` leads each message."""
    for node in nodes:
        for name in node.input:
            if name and name not in defined:
                raise LoweringError(f"{prefix}{_label(node)} reads {name} before it is defined")
        for name in node.output:
            if name in defined:
                raise LoweringError(f"{prefix}{name} is defined twice (again by {_label(node)})")
            if name:  # an optional output left out
                defined.add(name)


def check_input_order(nodes: list[Node], defined_outside: Iterable[str]) -> None:
    """What the pass relies on to terminate, for a model the checker has not accepted yet (it
    runs in the background, lowering.loading.BackgroundCheck): every value is defined once,
    before it is read, so every walk over producers ends. Raises LoweringError otherwise."""
    _check_order(set(defined_outside), nodes)


def _label(node: Node | onnx.NodeProto) -> str:
    return f"{node.op_type} node {node.name!r}" if node.name else f"a {node.op_type} node"


def check_graph(nodes: list[Node], positions: list[int], producer: dict[str, int], replaced: dict[int, Node],
                gone: Container[int], fresh: dict[str, int], available: Callable[[str], bool],
                graph_outputs: Iterable[str]) -> None:
    """Checks the rewritten node order. Every node keeps the index position of the node it keeps
    or replaces; a value is produced at its producer's position unless that node is `gone`
    (dropped, and not `replaced` by a node that defines the value), or at the position `fresh`
    gives for a new name. Every value read must be `available` from the start (graph input,
    initializer) or produced at an earlier position. Costs lookups in the index's tables only."""

    def position(name: str) -> int | None:
        p = fresh.get(name)
        if p is not None:
            return p
        p = producer.get(name)
        if p is None:
            return None
        if p in replaced:
            return p if name in replaced[p].output else None
        return None if p in gone else p

    def check(node: Node, i: int, name: str) -> None:
        if name and not available(name):
            p = position(name)
            if p is None or p >= i:
                where = "is not computed any more" if p is None else "is computed only later"
                raise LoweringError(f"internal error: in the fused graph, {_label(node)} reads {name}, which {where}")

    get = producer.get
    for node, i in zip(nodes, positions):
        for name in node.input:
            p = get(name)
            if p is None or p >= i or p in gone or p in replaced:  # the common case stays inline
                check(node, i, name)
        for name in node.captures:
            check(node, i, name)
    for name in graph_outputs:
        if not available(name) and position(name) is None:
            raise LoweringError(f"internal error: graph output {name} is no longer computed")


def check_replacements(replacement: dict[int, Node], producer: dict[str, int], fresh: Container[str]) -> None:
    """A node put at position i defines only what the node it replaces defined, or fresh names,
    so no value is defined twice."""
    for i, node in replacement.items():
        for name in node.output:
            if name and name not in fresh and producer.get(name) != i:
                raise LoweringError(f"internal error: the fused graph defines {name} twice (again by {_label(node)})")


def check_function(function: onnx.FunctionProto) -> None:
    where = f"function {function.domain}::{function.name} ({function.overload})"
    _check_order(set(function.input), function.node, f"internal error: in {where}, ")
    missing = [name for name in function.output if name not in {o for n in function.node for o in n.output}]
    if missing:
        raise LoweringError(f"internal error: {where} does not compute {missing[0]}")
