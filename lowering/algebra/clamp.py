"""The clamp view: a value as clamp(y, lo, hi), from Clip or nested Min and Max."""

from __future__ import annotations

import numpy as np
import onnx

from ..graph import Node, attr
from .casts import CastsView
from .reader import GraphReader

Bound = str | float | None  # a clamp bound: a value name, an attribute's float, or left out
Clamp = tuple[str, Bound, Bound, set[int]]  # y, lo, hi, the nodes read


def clip_bounds(node: Node | onnx.NodeProto) -> tuple[Bound, Bound]:
    """Clip's (min, max): value names when they are inputs (opset 11 on), floats from the
    attributes before that, None for a bound left out."""
    lo = node.input[1] if len(node.input) > 1 and node.input[1] else attr(node, "min")
    hi = node.input[2] if len(node.input) > 2 and node.input[2] else attr(node, "max")
    return lo, hi


class ClampView:
    def __init__(self, reader: GraphReader, casts: CastsView) -> None:
        self._reader = reader
        self._casts = casts

    def clamp(self, value: str) -> Clamp | None:
        """(y, lo, hi, nodes) when value = clamp(y, lo, hi): Clip, Min(Max(y, lo), hi) (the dynamo
        exporter's torch.clamp before its optimizer makes it a Clip) or Max(Min(y, hi), lo)
        (tf.clip_by_value through tf2onnx). The nestings agree everywhere, NaN included
        (onnxruntime's Min and Max propagate it); bound_value() reads a bound as a number."""
        reader = self._reader
        found = reader.producer(value, "Clip", "Min", "Max", "Cast")
        if found is None:
            return None
        i, node = found
        if node.op_type == "Cast":
            return self._narrowed_clamp(i, node)
        if node.op_type == "Clip":
            return (node.input[0], *clip_bounds(node), {i})
        inner = reader.producer(node.input[0], "Max" if node.op_type == "Min" else "Min")
        if len(node.input) != 2 or inner is None or len(inner[1].input) != 2:
            return None
        outer_bound, inner_bound = node.input[1], inner[1].input[1]
        lo, hi = (inner_bound, outer_bound) if node.op_type == "Min" else (outer_bound, inner_bound)
        return inner[1].input[0], lo, hi, {i, inner[0]}

    def _narrowed_clamp(self, i: int, cast: Node) -> Clamp | None:
        """Cast<T>(clamp(Cast<W>(y: T), lo, hi)) as clamp(y, lo', hi'): onnxconverter-common runs
        Min and Max in float32 between Casts. Rounding to T is monotonic and leaves y as it is, so
        that is the clamp in T with the bounds rounded to T: a constant bound comes back as its
        rounded number, a runtime one must be widened from T (it is then the bound)."""
        inner = self._reader.producer(cast.input[0], "Clip", "Min", "Max")
        found = None if inner is None else self.clamp(cast.input[0])
        to = attr(cast, "to")
        narrow = None if found is None else self._casts.narrowed(found[0], to)
        if found is None or narrow is None:
            return None
        _, lo, hi, nodes = found
        nodes = nodes | narrow[1] | {i}
        bounds: list[Bound] = []
        for bound in (lo, hi):
            value = self.bound_value(bound)
            if value is not None:
                with np.errstate(over="ignore"):  # beyond T's range it rounds to inf, as Cast does
                    bound = float(onnx.helper.tensor_dtype_to_np_dtype(to).type(value))
            elif isinstance(bound, str):
                narrow_bound = self._casts.narrowed(bound, to)
                if narrow_bound is None:
                    return None
                bound, nodes = narrow_bound[0], nodes | narrow_bound[1]
            bounds.append(bound)
        return narrow[0], bounds[0], bounds[1], nodes

    def bound_value(self, bound: Bound) -> float | None:
        """A clamp bound as a number: an attribute's float as it is, a value through scalar()."""
        return self._reader.scalar(bound) if isinstance(bound, str) else bound
