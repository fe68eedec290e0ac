"""Runs a match's structure on the semantics of one backend: its output as an extended real."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx

from ..graph import FLOAT_TYPES
from .semantics import Ext, Semantics
from .structure import OVERFLOWING, Structure, Unprovable, float_max, overflow_at

Value = Any  # an Ext for a number, a backend bool for a condition


def run(s: Structure, m: Semantics, leaves: Sequence[Value], constants: Sequence[Value], numels: Sequence[Value],
        opaque: Callable[[int, Value], Ext]) -> tuple[Ext, list[Value]]:
    """The structure's output and every op's value, given a value for each leaf, constant and
    element count; `opaque(k, x)` is what a narrowing Cast (op k) of x inside the region gives."""
    values: list[Value] = []

    def get(ref: tuple[str, int]) -> Value:
        kind, k = ref
        if kind == "v":
            return values[k]
        if kind == "in":
            return leaves[k]
        if kind == "c":
            return constants[k]
        if kind == "n":
            return numels[k]
        return None

    for k, (op, key, refs) in enumerate(s.ops):
        args = [get(r) for r in refs]
        if k in s.narrowing:
            values.append(opaque(k, args[0]))
            continue
        out = _op(m, op, key, args, s.dtypes[k])
        if m.saturate and op in OVERFLOWING and isinstance(out, Ext):
            out = m.limit(out, overflow_at(s.dtypes[k]))
        values.append(out)
    return get(s.output), values


def liveness(s: Structure, b: Any, values: Sequence[Value]) -> list[Any]:
    """Per op, where the output depends on its value: everywhere for an operand of arithmetic, a
    comparison or a max, only where it is chosen for a branch of Where. An overflow of a value
    no output depends on (the branch Where does not take) changes nothing."""
    live: list[Any] = [False] * len(s.ops)
    if s.output[0] == "v":
        live[s.output[1]] = True
    for k in reversed(range(len(s.ops))):
        if live[k] is False:
            continue
        op, _, refs = s.ops[k]
        for i, (kind, j) in enumerate(refs):
            if kind != "v":
                continue
            edge = live[k]
            if op == "Where" and i > 0:
                cond = values[refs[0][1]] if refs[0][0] == "v" else None
                if cond is not None and not isinstance(cond, Ext):
                    edge = b.and_(edge, cond if i == 1 else b.not_(cond))
            live[j] = b.or_(live[j], edge)
    return live


def _op(m: Semantics, op: str, key: tuple, a: list[Value], dtype: int | None) -> Value:
    b = m.b
    if op == "Add":
        return m.add(a[0], a[1])
    if op == "Sub":
        return m.sub(a[0], a[1])
    if op == "Mul":
        return m.mul(a[0], a[1])
    if op == "Div":
        return m.div(a[0], a[1])
    if op == "Sum":
        out = a[0]
        for x in a[1:]:
            out = m.add(out, x)
        return out
    if op == "Neg":
        return m.neg(a[0])
    if op == "Abs":
        return m.abs(a[0])
    if op == "Sign":
        return m.sign(a[0])
    if op == "Reciprocal":
        return m.div(m.const(1), a[0])
    if op == "Relu":
        return m.max(a[0], m.const(0))
    if op == "Max" or op == "Min":
        out = a[0]
        for x in a[1:]:
            out = m.max(out, x) if op == "Max" else m.min(out, x)
        return out
    if op == "Where":
        return m.where(a[0], a[1], a[2])
    if op == "Shrink":
        return m.shrink(a[0], a[1], a[2])
    if op == "Clip":
        return _clip(m, key, a, dtype)
    if op == "Less":
        return m.lt(a[0], a[1])
    if op == "Greater":
        return m.lt(a[1], a[0])
    if op == "LessOrEqual":
        return m.le(a[0], a[1])
    if op == "GreaterOrEqual":
        return m.le(a[1], a[0])
    if op == "Equal":
        if isinstance(a[0], Ext):
            return m.eq(a[0], a[1])
        return b.not_(b.or_(b.and_(a[0], b.not_(a[1])), b.and_(a[1], b.not_(a[0]))))
    if op == "Not":
        return b.not_(a[0])
    if op == "And":
        return b.and_(a[0], a[1])
    if op == "Or":
        return b.or_(a[0], a[1])
    if op == "Xor":
        return b.or_(b.and_(a[0], b.not_(a[1])), b.and_(a[1], b.not_(a[0])))
    if op in ("Identity", "Expand"):
        return a[0]
    if op in ("Cast", "CastLike"):
        return _cast(m, a[0], dtype)
    raise Unprovable(f"holds {op}, which the proof does not translate")


def _clip(m: Semantics, key: tuple, a: list[Value], dtype: int | None) -> Value:
    """Clip(x, lo, hi) = min(max(x, lo), hi), NaN kept; a bound left out is the dtype's largest
    finite value (onnxruntime's CPU kernel), not infinity."""
    x = a[0]
    if key:  # bounds as attributes (opset < 11): the constants after x, min first
        has_lo, has_hi = key
        rest = a[1:]
        lo = rest.pop(0) if has_lo else None
        hi = rest.pop(0) if has_hi else None
    else:
        lo = a[1] if len(a) > 1 else None
        hi = a[2] if len(a) > 2 else None
    top = float_max(dtype if dtype in FLOAT_TYPES else onnx.TensorProto.FLOAT)
    assert top is not None
    lo = m.const(-top) if lo is None else lo
    hi = m.const(top) if hi is None else hi
    return m.min(m.max(x, lo), hi)


def _cast(m: Semantics, x: Value, to: int | None) -> Value:
    if to == onnx.TensorProto.BOOL:
        return m.nonzero(x) if isinstance(x, Ext) else x
    if to in FLOAT_TYPES or to == onnx.TensorProto.DOUBLE:
        return x if isinstance(x, Ext) else m.truth(x)
    raise Unprovable(f"holds a Cast to type {to}, which the proof does not translate")
