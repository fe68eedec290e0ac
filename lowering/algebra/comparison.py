"""The comparison view: a boolean value as (lhs, relation, rhs), through any number of Nots."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .reader import GraphReader

RELATIONS = {"Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass
class Comparison:
    lhs: str
    relation: str  # "<", "<=", ">", ">="
    rhs: str
    nodes: set[int]


class Stripped(NamedTuple):
    """A condition with its Nots taken off: what is under them, the Not nodes, and whether an odd
    number of them negates it."""

    cond: str
    nodes: set[int]
    negated: bool


class ComparisonView:
    def __init__(self, reader: GraphReader) -> None:
        self._reader = reader

    def strip_not(self, cond: str) -> Stripped:
        nodes: set[int] = set()
        negated = False
        while (found := self._reader.producer(cond, "Not")) is not None:
            nodes.add(found[0])
            negated = not negated
            cond = found[1].input[0]
        return Stripped(cond, nodes, negated)

    def compare(self, cond: str) -> Comparison | None:
        inner = self.strip_not(cond)
        found = self._reader.producer(inner.cond, *RELATIONS)
        if found is None:
            return None
        i, node = found
        relation = RELATIONS[node.op_type]
        if inner.negated:
            relation = NEGATED[relation]
        return Comparison(node.input[0], relation, node.input[1], {i} | inner.nodes)

    def complementary(self, cond: str, other: str) -> int | None:
        """The node of `other` when it compares cond's operands with the negated relation."""
        reader = self._reader
        first, second = reader.producer(cond, *RELATIONS), reader.producer(other, *RELATIONS)
        if first is None or second is None or len(first[1].input) != 2 or len(second[1].input) != 2:
            return None
        if NEGATED[RELATIONS[first[1].op_type]] != RELATIONS[second[1].op_type]:
            return None
        same = all(u == v or (reader.scalar(u) is not None and reader.scalar(u) == reader.scalar(v))
                   for u, v in zip(first[1].input, second[1].input))
        return second[0] if same else None
