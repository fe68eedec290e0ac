"""The sum view: a value as signed addends, seen through Add, Sub and Sum."""

from __future__ import annotations

from .reader import MAX_SUM_TERMS, GraphReader


class TermsView:
    def __init__(self, reader: GraphReader) -> None:
        self._reader = reader

    def terms(self, value: str) -> tuple[list[tuple[int, str]], set[int]]:
        """The two signed addends of value = Add(a, b) or Sub(a, b). One level only: what feeds
        the addends (a var that is itself a sum or a negation) stays whole, which is what every
        pattern wants of an update or a threshold."""
        found = self._reader.producer(value, "Add", "Sub")
        if found is None or len(found[1].input) != 2:
            return [(1, value)], set()
        i, node = found
        a, b = node.input
        return [(1, a), (-1 if node.op_type == "Sub" else 1, b)], {i}

    def sum_leaves(self, root: int) -> tuple[list[str] | None, set[int]]:
        """The addends of the Add/Sum tree at root, through Adds and Sums only the tree reads; an
        addend a Sum repeats is listed each time (TensorFlow's gradient of x*x: Sum(a, b, a)).
        None when there are more than MAX_SUM_TERMS."""
        reader = self._reader
        index = reader.index
        leaves: list[str] = []
        nodes = {root}
        stack = list(reversed(index.nodes[root].input))
        while stack:
            v = stack.pop()
            found = reader.producer(v, "Add", "Sum")
            users = index.consumers.get(v)
            if (found is not None and len(found[1].input) >= 2 and v not in index.graph_outputs
                    and users and all(c in nodes for c in users)):
                nodes.add(found[0])
                stack.extend(reversed(found[1].input))
            else:
                leaves.append(v)
            if len(leaves) + len(stack) > MAX_SUM_TERMS:
                return None, nodes
        return leaves, nodes
