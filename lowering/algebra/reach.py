"""Cheap pre-checks: does a value's producer chain reach a given op within a few steps?"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..graph import GraphIndex, Node


@dataclass(frozen=True)
class Reach:
    """A cheap pre-check: an op in `targets` (a node `accept` takes, if given) within `depth`
    producers of a value, walking only through ops in `through`."""

    targets: frozenset[str]
    through: frozenset[str]
    depth: int
    accept: Callable[[GraphIndex, Node], bool] | None = None


class ReachTable:
    """The values each Reach holds for, computed once per run by a sweep of the index."""

    def __init__(self, index: GraphIndex) -> None:
        self._index = index
        self._distances: dict[tuple[Reach, ...], set[str] | dict[str, int]] = {}

    def reaches(self, value: str, reach: Reach) -> bool:
        """Most anchors fail this pre-check before a full view. The distances come from one forward
        sweep per Reach, which ignores fusions already made and so can only let through an anchor
        the full view then refuses."""
        return value in self.reached((reach,))

    def reached(self, reaches: tuple[Reach, ...]) -> set[str] | dict[str, int]:
        """The values any of `reaches` holds for, computed once per tuple."""
        table = self._distances.get(reaches)
        if table is None:
            if len(reaches) == 1:
                (r,) = reaches
                table = self._sweep(r.targets, r.through, r.depth, r.accept)
            else:
                table = set().union(*(self.reached((r,)) for r in reaches))
            self._distances[reaches] = table
        return table

    def _sweep(self, targets: frozenset[str], through: frozenset[str], depth: int,
               accept: Callable[[GraphIndex, Node], bool] | None) -> dict[str, int]:
        """Values whose producer chain reaches `targets` in fewer than `depth` steps: a breadth
        first walk down from the target nodes, so only their neighbourhood is visited."""
        index = self._index
        nodes, consumers = index.nodes, index.consumers
        frontier = [name for op in targets for i in index.by_op.get(op, ())
                    if accept is None or accept(index, nodes[i]) for name in nodes[i].output]
        dist = dict.fromkeys(frontier, 0)
        for d in range(1, depth):
            reached = []
            for value in frontier:
                for c in consumers.get(value, ()):
                    node = nodes[c]
                    if node.op_type in through:
                        for name in node.output:
                            if name not in dist:
                                dist[name] = d
                                reached.append(name)
            frontier = reached
        return dist
