"""Graph hygiene after rewriting: dead code, unused initializers and value_info, topological order."""

from __future__ import annotations

import heapq

import onnx

from .graph import GraphIndex, subgraph_inputs


def eliminate_dead_code(graph: onnx.GraphProto) -> int:
    """Removes nodes and initializers nothing uses; returns how many nodes went."""
    index = GraphIndex(graph)
    live = set(index.graph_outputs) | index.subgraph_uses
    kept: list[onnx.NodeProto] = []
    for node in reversed(index.nodes):
        if any(o in live for o in node.output if o):
            kept.append(node)
            live.update(n for n in node.input if n)
            live.update(subgraph_inputs(node))
    removed = len(index.nodes) - len(kept)
    if removed:
        kept.reverse()
        del graph.node[:]
        graph.node.extend(kept)
    inputs = {vi.name for vi in graph.input}
    unused = [t for t in graph.initializer if t.name not in live and t.name not in inputs]
    if unused:
        keep = [t for t in graph.initializer if t.name in live or t.name in inputs]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    produced = {o for n in graph.node for o in n.output}
    vis = [vi for vi in graph.value_info if vi.name in produced]
    if len(vis) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(vis)
    return removed


def topological_sort(graph: onnx.GraphProto) -> None:
    """Stable topological order (original positions break ties), so untouched graphs keep theirs."""
    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        d = {producer[x] for x in list(n.input) + sorted(subgraph_inputs(n)) if x in producer and producer[x] != i}
        deps.append(d)
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]
    ready = [i for i, c in enumerate(pending) if c == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise ValueError("the graph has a cycle")
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)
