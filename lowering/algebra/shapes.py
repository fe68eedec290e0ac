"""The element-count view: the tensor whose numel a value computes at runtime."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..graph import attr
from .reader import GraphReader


@dataclass
class _DimProduct:
    """What one numel walk has seen: one tensor, which of its dimensions, a constant factor."""

    tensor: str | None = None
    dims: list[int] = field(default_factory=list)
    all_dims: bool = False
    const: int = 1
    nodes: set[int] = field(default_factory=set)

    def take(self, tensor: str, dims: list[int] | None) -> bool:
        if self.tensor is not None and self.tensor != tensor:
            return False
        self.tensor = tensor
        if dims is None:
            if self.all_dims:
                return False
            self.all_dims = True
        else:
            self.dims.extend(dims)
        return not (self.all_dims and self.dims)


class NumelView:
    def __init__(self, reader: GraphReader) -> None:
        self._reader = reader

    def numel_of(self, value: str) -> tuple[str, set[int]] | None:
        """(tensor, nodes) when value computes numel(tensor) at runtime, possibly cast to float.

        Accepts Size(t), ReduceProd(Shape(t)), and products of single dimensions
        (Squeeze/Gather of Shape(t) slices) with constants standing for t's static dimensions,
        which is how the dynamo exporter spells numel for a dynamic shape.
        """
        acc = _DimProduct()
        if not self._dims(value, acc) or acc.tensor is None:
            return None
        if acc.all_dims:
            return (acc.tensor, acc.nodes) if acc.const == 1 else None
        vt = self._reader.index.type_of(acc.tensor)
        if vt is None or vt.shape is None or len(set(acc.dims)) != len(acc.dims):
            return None
        rest = [d for i, d in enumerate(vt.shape) if i not in acc.dims]
        static = [d for d in rest if isinstance(d, int)]
        if len(static) != len(rest) or math.prod(static) != acc.const:
            return None
        return acc.tensor, acc.nodes

    def _dims(self, value: str, acc: _DimProduct) -> bool:
        index = self._reader.index
        c = index.const(value)
        if c is not None:
            if c.size != 1 or float(c.reshape(-1)[0]) != int(c.reshape(-1)[0]):
                return False
            acc.const *= int(c.reshape(-1)[0])
            return True
        found = self._reader.producer(value, "Cast", "Mul", "Size", "ReduceProd", "Squeeze", "Reshape", "Gather")
        if found is None:
            return False
        i, node = found
        acc.nodes.add(i)
        op = node.op_type
        if op == "Cast":
            return self._dims(node.input[0], acc)
        if op == "Mul":
            return len(node.input) == 2 and self._dims(node.input[0], acc) and self._dims(node.input[1], acc)
        if op == "Size":
            return acc.take(node.input[0], None)
        if op == "ReduceProd":
            if attr(node, "keepdims", 1) != 0 or (len(node.input) > 1 and node.input[1]) or attr(node, "axes"):
                return False
            shape = self._shape_slice(node.input[0], acc)
            return shape is not None and acc.take(shape[0], shape[1])
        if op == "Gather":
            idx = index.const(node.input[1]) if len(node.input) == 2 else None
            shape = self._shape_slice(node.input[0], acc)
            if idx is None or idx.size != 1 or shape is None or shape[1] is not None:
                return False
            return acc.take(shape[0], [int(idx.reshape(-1)[0])])
        shape = self._shape_slice(node.input[0], acc)  # Squeeze/Reshape of a one-dimension slice
        return shape is not None and shape[1] is not None and len(shape[1]) == 1 and acc.take(shape[0], shape[1])

    def _shape_slice(self, value: str, acc: _DimProduct) -> tuple[str, list[int] | None] | None:
        """(t, dims) for Shape(t, start, end); dims None means every dimension."""
        found = self._reader.producer(value, "Shape")
        if found is None:
            return None
        i, node = found
        acc.nodes.add(i)
        start, end = attr(node, "start"), attr(node, "end")
        if start is None and end is None:
            return node.input[0], None
        vt = self._reader.index.type_of(node.input[0])
        if vt is None or vt.shape is None:
            return None
        rank = len(vt.shape)
        lo = start or 0
        lo = lo + rank if lo < 0 else lo
        hi = rank if end is None else (end + rank if end < 0 else min(end, rank))
        return node.input[0], list(range(lo, hi))
