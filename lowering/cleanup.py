"""Dead code elimination on the pass's node list: a whole sweep before matching, and after the
rewrite only around what it removed."""

from __future__ import annotations

from collections.abc import Iterable

from .graph import GraphIndex, Node


def live_nodes(nodes: list[Node], outputs: Iterable[str]) -> list[Node]:
    """The nodes some graph output depends on, in their order (ONNX nodes have no side effects)."""
    live = set(outputs)
    keep: list[Node] = []
    for node in reversed(nodes):
        for name in node.output:
            if name in live:
                keep.append(node)
                live.update(node.input)
                live.update(node.captures)
                break
    keep.reverse()
    return keep


def dead_after_removal(index: GraphIndex, gone: set[int], reads: set[str]) -> set[int]:
    """Positions of the nodes that fed only the nodes at `gone` (removed by a rewrite whose new
    nodes read `reads`), transitively. Work is proportional to what the removed nodes read, not
    to the graph."""
    dead: set[int] = set()
    producer = index.producer

    def still_read(name: str) -> bool:
        return name in reads or name in index.graph_outputs or any(
            c not in gone and c not in dead for c in index.consumers.get(name, ()))

    stack = [producer[v] for i in gone for v in index.nodes[i].input if v in producer]
    while stack:
        i = stack.pop()
        if i in gone or i in dead:
            continue
        node = index.nodes[i]
        if any(still_read(name) for name in node.output if name):
            continue
        dead.add(i)
        stack.extend(producer[v] for v in node.input + node.captures if v in producer)
    return dead
