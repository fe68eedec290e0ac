"""The cast view: what a value is under exact widening Casts, and single-input ops seen through a
widen-compute-narrow sandwich."""

from __future__ import annotations

import onnx

from ..graph import EXACT_WIDENING, attr
from .reader import GraphReader


class CastsView:
    def __init__(self, reader: GraphReader) -> None:
        self._reader = reader

    def unary(self, value: str, op: str) -> tuple[str, int] | None:
        """(input, node) when value = op(input)."""
        found = self._reader.producer(value, op)
        if found is None or not found[1].input:
            return None
        return found[1].input[0], found[0]

    def unary_narrowed(self, value: str, op: str) -> tuple[str, set[int]] | None:
        """(x, nodes) when value = op(x), or Cast<T>(op(Cast<W>(x: T))) with an exact widening:
        the dynamo exporter computes Sign of a float16/bfloat16 tensor in float32 and casts back.
        Normalization narrows such sandwiches only for ops whose half-precision onnxruntime kernel
        agrees with the float32 one; Sign does not (its float16 kernel maps NaN to 0)."""
        found = self.unary(value, op)
        if found is not None:
            return found[0], {found[1]}
        cast = self._reader.producer(value, "Cast")
        inner = None if cast is None else self.unary(cast[1].input[0], op)
        if cast is None or inner is None:
            return None
        narrow = self.narrowed(inner[0], attr(cast[1], "to"))
        return None if narrow is None else (narrow[0], {cast[0], inner[1]} | narrow[1])

    def uncast(self, value: str) -> tuple[str, int, int] | None:
        """(source, cast node, source dtype) when value = Cast<float32>(source float16/bfloat16)."""
        found = self._reader.producer(value, "Cast")
        if found is None or attr(found[1], "to") != onnx.TensorProto.FLOAT:
            return None
        source = found[1].input[0]
        dtype = self._reader.index.elem_type(source)
        if dtype not in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
            return None
        return source, found[0], dtype

    def widened(self, value: str) -> str:
        """The narrower value behind exact widening Casts (float16 -> float32 and the like)."""
        while (found := self._reader.producer(value, "Cast")) is not None:
            source = found[1].input[0]
            if (self._reader.index.elem_type(source), attr(found[1], "to")) not in EXACT_WIDENING:
                break
            value = source
        return value

    def widening_casts(self, value: str) -> set[int]:
        """The exact widening Casts that widened(value) looks through."""
        nodes = set()
        while value != self.widened(value):
            found = self._reader.producer(value, "Cast")
            assert found is not None  # widened() walked through this Cast
            nodes.add(found[0])
            value = found[1].input[0]
        return nodes

    def narrowed(self, value: str, to: int | None) -> tuple[str, set[int]] | None:
        """(x, the widening Casts) when value exactly widens an x of dtype `to`, the type a Cast
        back narrows to; None otherwise."""
        x = self.widened(value)
        if x == value or self._reader.index.elem_type(x) != to:
            return None
        return x, self.widening_casts(value)
