"""Dead code elimination on the pass's node list."""

from __future__ import annotations

from collections.abc import Iterable

from .graph import Node, may_have_subgraphs, subgraph_inputs


def live_nodes(nodes: list[Node], outputs: Iterable[str]) -> list[Node]:
    """The nodes some graph output depends on, in their order (ONNX nodes have no side effects)."""
    live = set(outputs)
    keep: list[Node] = []
    for node in reversed(nodes):
        for name in node.output:
            if name in live:
                keep.append(node)
                live.update(node.input)
                if may_have_subgraphs(node):
                    live.update(subgraph_inputs(node))
                break
    keep.reverse()
    return keep
