"""Dead code elimination on the pass's index: everything dead before matching, and after the
rewrite only what fed the nodes it removed."""

from __future__ import annotations

from .graph import GraphIndex, Node


def drop_dead(index: GraphIndex) -> set[int]:
    """Finds the nodes no graph output depends on (ONNX nodes have no side effects), records them
    in index.dead and takes them out of the consumer lists, so a dead use (an unused forward loss)
    never blocks a fusion. Works on the index's own tables, without a sweep of its own."""
    nodes, consumers, producer, outputs = index.nodes, index.consumers, index.producer, index.graph_outputs

    def unused(node: Node) -> bool:
        return not any(name in outputs or consumers.get(name) for name in node.output if name)

    dead = index.dead
    stack = []
    for i, node in enumerate(nodes):  # inline: this first scan visits every node
        for name in node.output:
            if name and (name in outputs or consumers.get(name)):
                break
        else:
            stack.append(i)
    while stack:
        i = stack.pop()
        if i in dead or not unused(nodes[i]):
            continue
        dead.add(i)
        node = nodes[i]
        for name in node.input + node.captures:
            users = consumers.get(name)
            while users and i in users:
                users.remove(i)
            j = producer.get(name)
            if j is not None and j not in dead:
                stack.append(j)
    return dead


def dead_after_removal(index: GraphIndex, gone: set[int], reads: set[str]) -> set[int]:
    """Positions of the nodes that fed only the nodes at `gone` (removed by a rewrite whose new
    nodes read `reads`), transitively. Work is proportional to what the removed nodes read, not
    to the graph."""
    dead: set[int] = set()
    producer = index.producer

    def still_read(name: str) -> bool:
        return name in reads or name in index.graph_outputs or any(
            c not in gone and c not in dead for c in index.consumers.get(name, ()))

    # most of what removed nodes read is made by other removed nodes (their own match)
    stack = [j for i in gone for v in index.nodes[i].input if (j := producer.get(v)) is not None and j not in gone]
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
