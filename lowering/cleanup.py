"""Graph hygiene after rewriting: dead code, unused initializers and value_info."""

from __future__ import annotations

import onnx

from .graph import may_have_subgraphs, subgraph_inputs


def eliminate_dead_code(graph: onnx.GraphProto) -> int:
    """Removes nodes and initializers nothing uses; returns how many nodes went."""
    live = {vi.name for vi in graph.output}
    nodes = list(graph.node)
    keep = [False] * len(nodes)
    for i in range(len(nodes) - 1, -1, -1):
        node = nodes[i]
        if any(o in live for o in node.output):
            keep[i] = True
            live.update(node.input)
            if may_have_subgraphs(node):
                live.update(subgraph_inputs(node))
    removed = keep.count(False)
    if removed:
        del graph.node[:]
        graph.node.extend(n for n, k in zip(nodes, keep) if k)
        gone = {o for n, k in zip(nodes, keep) if not k for o in n.output}
        vis = [vi for vi in graph.value_info if vi.name not in gone]
        del graph.value_info[:]
        graph.value_info.extend(vis)
    inputs = {vi.name for vi in graph.input}
    if any(t.name not in live and t.name not in inputs for t in graph.initializer):
        inits = [t for t in graph.initializer if t.name in live or t.name in inputs]
        del graph.initializer[:]
        graph.initializer.extend(inits)
    return removed
