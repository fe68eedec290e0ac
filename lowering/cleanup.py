"""Graph hygiene after rewriting: dead code, unused initializers and value_info, topological order."""

from __future__ import annotations

import heapq

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


def is_topologically_sorted(graph: onnx.GraphProto) -> bool:
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer} | {""}
    produced_later = {o for n in graph.node for o in n.output}
    for node in graph.node:
        uses = list(node.input) + (sorted(subgraph_inputs(node)) if may_have_subgraphs(node) else [])
        for name in uses:
            if name not in defined and name in produced_later:
                return False
        defined.update(node.output)
    return True


def topological_sort(graph: onnx.GraphProto) -> None:
    """Stable topological order (original positions break ties), so untouched graphs keep theirs."""
    if is_topologically_sorted(graph):
        return
    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        uses = list(n.input) + (sorted(subgraph_inputs(n)) if may_have_subgraphs(n) else [])
        d = {producer[x] for x in uses if x in producer and producer[x] != i}
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
