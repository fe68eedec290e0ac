"""Runs an elementwise region of the graph on numpy arrays, with onnxruntime's CPU semantics.

Two modes: `wide` computes every float in float64 (Casts between float types become no-ops), which
is the region's function as real arithmetic; otherwise each value takes the element type the graph
gives it, and float16/bfloat16 arithmetic is done in float32 and rounded, as onnxruntime's CPU
kernels do. Edge behaviour follows onnxruntime, not numpy: Clip without a max caps at the dtype's
largest finite value, float16 Sign maps NaN to 0, Shrink maps NaN to 0, Relu, Max, Min and Clip
keep NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
import onnx

from ...graph import FLOAT_TYPES, GraphIndex, Node, attr

_NP_TYPES: dict[int, np.dtype] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.BOOL: np.dtype(np.bool_),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.INT32: np.dtype(np.int32),
}
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


class Unsupported(Exception):
    """The region holds an op (or an op form) this evaluator does not run."""


def np_type(elem_type: int | None) -> np.dtype | None:
    return None if elem_type is None else _NP_TYPES.get(elem_type)


def _given(node: Node, args: Sequence[np.ndarray | None], i: int) -> np.ndarray:
    """Input `i`, which the op requires: an empty name there is not a graph the recogniser runs."""
    a = args[i] if i < len(args) else None
    if a is None:
        raise Unsupported(f"{node.op_type} without its input {i}")
    return a


def _wide(a: np.ndarray) -> np.ndarray:
    """float32 for half types, so numpy computes as onnxruntime's half kernels do."""
    return a.astype(np.float32) if a.dtype in _HALF else a


def _arith(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def run(*args: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(*(_wide(a) for a in args))
    return run


def _variadic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def run(*args: np.ndarray) -> np.ndarray:
        out = _wide(args[0])
        with np.errstate(all="ignore"):
            for a in args[1:]:
                out = fn(out, _wide(a))
        return out
    return run


_BINARY: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "Equal": np.equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}
_UNARY: dict[str, Callable[..., np.ndarray]] = {
    "Neg": np.negative, "Abs": np.abs, "Reciprocal": lambda a: np.divide(1.0, a).astype(a.dtype),
    "Identity": lambda a: a, "Not": np.logical_not, "Relu": lambda a: np.where(a < 0, a.dtype.type(0), a),
}
# wrapped once: a wrapper built per node evaluated costs more than the op on a probe's few elements
_RUN_BINARY = {op: _arith(fn) for op, fn in _BINARY.items()}
_RUN_UNARY = {op: _arith(fn) for op, fn in _UNARY.items()}
_RUN_SUM = _variadic(np.add)
_RUN_MAX = _variadic(np.maximum)
_RUN_MIN = _variadic(np.minimum)
ELEMENTWISE = frozenset(_BINARY) | frozenset(_UNARY) | {"Sum", "Max", "Min", "Sign", "Clip", "Where", "Cast",
                                                        "CastLike", "Shrink"}


class Evaluator:
    """Evaluates region nodes (in topological order) from values given for its leaves."""

    def __init__(self, index: GraphIndex, wide: bool) -> None:
        self.index = index
        self.wide = wide
        self._result_types: dict[str, np.dtype | None] = {}  # an evaluator runs one region on many probes

    def run(self, nodes: Sequence[Node], leaves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = dict(leaves)
        for node in nodes:
            args = [values[name] if name else None for name in node.input]
            values[node.output[0]] = self._node(node, args)
        return values

    def _result_type(self, name: str) -> np.dtype | None:
        """The dtype the graph gives a computed float value (float64 in wide mode)."""
        if name in self._result_types:
            return self._result_types[name]
        t = self.index.elem_type(name)
        found = None
        if t is not None and (t in FLOAT_TYPES or t == onnx.TensorProto.DOUBLE):
            found = np.dtype(np.float64) if self.wide else _NP_TYPES[t]
        self._result_types[name] = found
        return found

    def _node(self, node: Node, args: list[np.ndarray | None]) -> np.ndarray:
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or op not in ELEMENTWISE:
            raise Unsupported(f"{op} is not an elementwise op the recogniser runs")
        if op in _RUN_BINARY:
            out = _RUN_BINARY[op](*args)
        elif op in _RUN_UNARY:
            out = _RUN_UNARY[op](*args)
        elif op == "Sum":
            out = _RUN_SUM(*args)
        elif op in ("Max", "Min"):
            out = (_RUN_MAX if op == "Max" else _RUN_MIN)(*args)
        elif op == "Sign":
            out = self._sign(node, _given(node, args, 0))
        elif op == "Clip":
            out = self._clip(node, args)
        elif op == "Where":
            out = np.where(_given(node, args, 0), _wide(_given(node, args, 1)), _wide(_given(node, args, 2)))
        elif op == "Shrink":
            lambd, bias = float(attr(node, "lambd", 0.5)), float(attr(node, "bias", 0.0))
            x = _wide(_given(node, args, 0))
            with np.errstate(all="ignore"):
                out = np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)).astype(x.dtype)
        else:
            to = attr(node, "to") if op == "Cast" else self.index.elem_type(node.input[1])
            return self._cast(_given(node, args, 0), to)
        target = self._result_type(node.output[0])
        if target is not None and out.dtype != np.bool_:
            with np.errstate(over="ignore"):  # a value beyond the result type's range is its inf
                return out.astype(target)
        return out

    def _sign(self, node: Node, x: np.ndarray) -> np.ndarray:
        out = np.sign(_wide(x))
        if not self.wide and x.dtype == np.float16:
            out = np.where(np.isnan(out), 0, out)  # onnxruntime's float16 Sign maps NaN to 0
        return out

    def _clip(self, node: Node, args: list[np.ndarray | None]) -> np.ndarray:
        x = _wide(_given(node, args, 0))
        lo: object = args[1] if len(args) > 1 else attr(node, "min")
        hi: object = args[2] if len(args) > 2 else attr(node, "max")
        dtype = self.index.elem_type(node.output[0])
        finite = float(np.finfo(_NP_TYPES[dtype]).max) if dtype is not None and dtype in FLOAT_TYPES \
            else float(np.finfo(np.float32).max)
        lo = -finite if lo is None else _wide(np.asarray(lo))
        hi = finite if hi is None else _wide(np.asarray(hi))
        with np.errstate(all="ignore"):
            return np.minimum(np.maximum(x, lo), hi)

    def _cast(self, x: np.ndarray, to: int | None) -> np.ndarray:
        if to == onnx.TensorProto.BOOL:
            return x != 0
        if to is None:
            raise Unsupported(f"a Cast from {x.dtype} to type {to}")
        if to in FLOAT_TYPES or to == onnx.TensorProto.DOUBLE:
            with np.errstate(over="ignore"):
                return x.astype(np.float64 if self.wide else _NP_TYPES[to])
        if to in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and x.dtype.kind in "biu":
            return x.astype(_NP_TYPES[to])
        raise Unsupported(f"a Cast from {x.dtype} to type {to}")
