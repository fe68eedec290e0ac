"""Read access to a normalized graph for the algebraic views, and the state of one fusion run.

The views never change the GraphIndex they read. What changes while the pass runs lives here and
is owned by the caller: `taken`, the nodes earlier fusions took (opaque leaves to every view),
and `seen`, the nodes the views looked at since the caller last reset it (a refusal's reason
covers them).
"""

from __future__ import annotations

import onnx

from ..graph import GraphIndex, Node

MAX_WALK = 24  # nodes one view may walk: patterns are small, this bounds the work per anchor
MAX_SUM_TERMS = 4  # addends of a sum of selects (autograd of a hand-written loss makes 2 or 3)
PRODUCT_OPS = ("Mul", "Div", "Neg", "Reciprocal")
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


class GraphReader:
    """The one read-only GraphIndex every view reads, with the run's taken and seen nodes."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self.taken: set[int] = set()
        self.seen: set[int] = set()

    def producer(self, value: str, *ops: str) -> tuple[int, Node] | None:
        """(node id, node) of value's producer when it is a standard op among `ops` (any op when
        none is given) that no earlier fusion took."""
        i = self.index.producer.get(value)
        if i is None or i in self.taken:
            return None
        self.seen.add(i)
        node = self.index.nodes[i]
        if node.domain not in ("", "ai.onnx") or (ops and node.op_type not in ops):
            return None
        return i, node

    def scalar(self, value: str) -> float | None:
        return self.index.scalar(value)

    def is_product(self, value: str) -> bool:
        i = self.index.producer.get(value)
        return i is not None and self.index.nodes[i].op_type in PRODUCT_OPS

    def owned(self, value: str, nodes: set[int], region: frozenset[int]) -> bool:
        """Every reader of value lies in `nodes` or `region`, and value is no graph output."""
        if value in self.index.graph_outputs:
            return False
        return all(c in nodes or c in region for c in self.index.consumers.get(value, ()))

    def is_zero_constant(self, value: str) -> bool:
        c = self.index.const(value)
        return c is not None and c.size > 0 and not c.any()
