"""A match as a formula: its nodes in canonical form, with the leaves it reads named by role.

The structure of a match is what a proof depends on: the ops, their attributes (Cast's target,
Shrink's and old Clip's numbers count as constants) and how they are wired, with every leaf
abstracted: a fused-node input by its role (predict, alpha, ...), a constant by its position among
the match's constants, an element count by the tensor it counts. Two matches of one structure
whose constants stand in the same relations (lowering.proof.relations) are proved by one proof;
`key` is what the proof cache compares. Building it reads the nodes once, so it is cheap beside
a solver call.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from ..algebra import Algebra
from ..graph import FLOAT_TYPES, Node, attr
from ..patterns.base import Match, fill, same_shape

# ops a proof translates; others make a match unprovable (its reason names the op)
ARITH = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sign", "Reciprocal", "Sum"})
SELECT = frozenset({"Where", "Max", "Min", "Relu", "Clip", "Shrink"})
LOGIC = frozenset({"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal", "Not", "And", "Or", "Xor"})
PASS = frozenset({"Identity", "Cast", "CastLike", "Expand"})
# shape ops that keep each element's value where they move one element or none (checked per node)
RESHAPE = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
PROVABLE = ARITH | SELECT | LOGIC | PASS
# ops whose result is computed by a rounding addition or product, which may overflow: arithmetic
# and Shrink (x - bias or x + bias)
OVERFLOWING = ARITH | {"Shrink"}

_PRECISION: dict[int, int] = {onnx.TensorProto.BFLOAT16: 8, onnx.TensorProto.FLOAT16: 11, onnx.TensorProto.FLOAT: 24,
              onnx.TensorProto.DOUBLE: 53}
_RANGE: dict[int, int] = {onnx.TensorProto.BFLOAT16: 0, onnx.TensorProto.FLOAT16: -1, onnx.TensorProto.FLOAT: 0,
          onnx.TensorProto.DOUBLE: 1}


class Unprovable(Exception):
    """The match holds something the proof does not translate; the message says what."""


Ref = tuple[str, int]  # ("v", node), ("in", leaf), ("c", constant), ("n", element count)


@dataclass
class Structure:
    ops: list[tuple[str, tuple, tuple[Ref, ...]]]  # (op, attribute key, input refs), topological
    output: Ref
    leaves: list[str]  # graph values read as fused-node inputs, in order of first use
    constants: list[Fraction | float | bool]  # exact value of each constant leaf
    numels: list[str]  # tensor whose element count each count leaf holds
    dtypes: list[int | None]  # output element type of each op
    names: list[str] = field(default_factory=list)  # output value of each op (for reasons)
    # ops whose Cast narrows a float inside the region (rounding there is part of the function)
    narrowing: set[int] = field(default_factory=set)
    leaf_refs: dict[str, Ref] = field(default_factory=dict)  # every graph value read as a leaf -> its ref

    @functools.cached_property
    def key(self) -> tuple:
        return (tuple(self.ops), self.output, len(self.leaves), tuple(self.numels_key), tuple(self.dtypes),
                tuple(sorted(self.narrowing)))

    @property
    def numels_key(self) -> list[int]:
        return [self.leaves.index(t) if t in self.leaves else -1 for t in self.numels]


@functools.cache
def float_max(dtype: int | None) -> Fraction | None:
    if dtype not in FLOAT_TYPES and dtype != onnx.TensorProto.DOUBLE:
        return None
    assert dtype is not None
    return Fraction(float(ml_dtypes.finfo(_np_float(dtype)).max))


_EMAX: dict[int, int] = {onnx.TensorProto.BFLOAT16: 127, onnx.TensorProto.FLOAT16: 15, onnx.TensorProto.FLOAT: 127,
         onnx.TensorProto.DOUBLE: 1023}


@functools.cache
def overflow_at(dtype: int | None) -> Fraction | None:
    """The least magnitude that rounds to infinity in a float type: its largest finite value
    plus half an ulp, (2 - 2^-p) * 2^emax."""
    if dtype is None or dtype not in _PRECISION:
        return None
    return (2 - Fraction(1, 2 ** _PRECISION[dtype])) * Fraction(2) ** _EMAX[dtype]


def narrows(source: int | None, target: int | None) -> bool:
    """Whether a Cast from `source` to `target` float type can round (fewer digits or less range)."""
    if source not in _PRECISION or target not in _PRECISION:
        return False  # from bool or an integer: exact, or not a float rounding at all
    return _PRECISION[target] < _PRECISION[source] or _RANGE[target] < _RANGE[source]


def exact_value(value: np.ndarray) -> Fraction | float | bool:
    """A uniform constant's one value: a Fraction for finite numbers (taken from the bits, never
    from a printed decimal), the float for +-inf and NaN, a bool for bool."""
    array = np.asarray(value)
    v = array.reshape(-1)[0]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if array.dtype.kind != "f" and array.dtype != ml_dtypes.bfloat16:
        return Fraction(int(v))
    f = float(v)  # every float type's value is a double exactly
    return f if math.isinf(f) or math.isnan(f) else Fraction(f)


def build(alg: Algebra, match: Match) -> Structure:
    """The structure of `match`: what its output computes from its inputs (Unprovable when a
    value it reads is none of a fused-node input, a constant, an element count or a member)."""
    index = alg.index
    members = match.interior | match.boundary
    inputs = {v for v in match.inputs if isinstance(v, str)}
    leaves: list[str] = []
    constants: list[Fraction | float | bool] = []
    const_of: dict[str, int] = {}
    numels: list[str] = []
    numel_of: dict[str, int] = {}
    refs: dict[str, Ref] = {}
    order: list[int] = []
    needed: set[int] = set()

    def constant(name: str, value: Fraction | float | bool) -> Ref:
        if name not in const_of:
            const_of[name] = len(constants)
            constants.append(value)
        return ("c", const_of[name])

    stack = [match.output]
    seen: set[str] = set()
    while stack:
        value = stack.pop()
        if value in seen or not value:
            continue
        seen.add(value)
        const = index.const(value)
        if value in inputs and const is None:
            refs[value] = ("in", len(leaves))
            leaves.append(value)
            continue
        if const is not None:
            if const.size == 0 or const.size > 1 and not (const.reshape(-1) == const.reshape(-1)[0]).all() \
                    and not np.isnan(const.astype(np.float64)).all():
                raise Unprovable(f"reads the constant {value} of {const.size} different elements")
            refs[value] = constant(value, exact_value(const))
            continue
        i = index.producer.get(value)
        if value != match.output and i is not None and index.nodes[i].op_type not in PROVABLE:
            counted = alg.numel_of(value)
            if counted is not None:
                if counted[0] not in numel_of:
                    numel_of[counted[0]] = len(numels)
                    numels.append(counted[0])
                refs[value] = ("n", numel_of[counted[0]])
                continue
        if i is not None and index.nodes[i].op_type in ("ConstantOfShape", "Expand"):
            filled = fill(alg, value)
            if filled is not None:
                refs[value] = constant(value, exact_value(np.asarray(filled[0])))
                continue
        if i is None or i not in members:
            raise Unprovable(f"reads {value}, which is neither an input of the fused node nor computed by it")
        node = index.nodes[i]
        if node.op_type in RESHAPE and (index.numel(node.input[0]) == 1 or same_shape(index, node.input[0], value)):
            needed.add(i)
            stack.append(node.input[0])
            continue
        if node.op_type not in PROVABLE or node.domain not in ("", "ai.onnx"):
            raise Unprovable(f"holds {node.op_type}, which the proof does not translate")
        needed.add(i)
        stack.extend(node.input[:1] if node.op_type == "Expand" else node.input)
    order = sorted(needed)
    ops: list[tuple[str, tuple, tuple[Ref, ...]]] = []
    dtypes: list[int | None] = []
    names: list[str] = []
    narrowing: set[int] = set()
    leaf_types = [index.elem_type(v) for v in leaves]
    for i in order:
        node = index.nodes[i]
        key, extra = _attributes(node)
        single = node.op_type == "Expand" or node.op_type in RESHAPE
        ins = tuple(refs[v] if v else ("none", 0) for v in (node.input[:1] if single else node.input))
        ins = ins + tuple(constant(f"{node.output[0]}#{k}", v) for k, v in extra)
        out_type = index.elem_type(node.output[0])
        if node.op_type == "Cast" and ins[0][0] == "c" and out_type in _PRECISION:
            # a constant rounded to another float type is that type's constant
            refs[node.output[0]] = constant(node.output[0], _rounded(constants[ins[0][1]], out_type))
            continue
        op_type = node.op_type
        if op_type in _ORDER:
            op_type, ins = _on_grid(op_type, ins, ops, dtypes, constants, leaf_types, index.elem_type(node.input[0]),
                                    lambda v, name=node.output[0]: constant(f"{name}#grid", v))
        narrowed = node.op_type in ("Cast", "CastLike") and node.output[0] != match.output \
            and narrows(index.elem_type(node.input[0]), out_type) and out_type in _PRECISION \
            and not _fits(ops, dtypes, constants, leaf_types, ins[0], out_type)
        if narrowed:
            clamp = _clamp_on_grid(ins[0], out_type, ops, dtypes, constants, leaf_types,
                                   lambda v, name=node.output[0]: constant(f"{name}#grid{len(constants)}", v))
            if clamp is not None:
                for op in clamp:
                    ops.append(op)
                    dtypes.append(out_type)
                    names.append(node.output[0])
                refs[node.output[0]] = ("v", len(ops) - 1)
                continue
        if op_type == "Sum" and len(ins) > 2:
            # onnxruntime adds a Sum's inputs left to right: each running sum is a value that
            # may overflow, though the total does not ((x + 3.4e38) - 3.4e38)
            for i in range(1, len(ins) - 1):
                ops.append(("Add", (), (ins[0] if i == 1 else ("v", len(ops) - 1), ins[i])))
                dtypes.append(out_type)
                names.append(node.output[0])
            op_type, ins = "Add", (("v", len(ops) - 1), ins[-1])
        k = len(ops)
        refs[node.output[0]] = ("v", k)
        if narrowed:
            narrowing.add(k)
        ops.append(("Identity" if node.op_type in RESHAPE else op_type, key, ins))
        dtypes.append(out_type)
        names.append(node.output[0])
    if match.output not in refs:
        raise Unprovable("the fused output is not computed by the match")
    leaf_refs = {v: r for v, r in refs.items() if r[0] != "v" and "#" not in v}
    return Structure(ops, refs[match.output], leaves, constants, numels, dtypes, names, narrowing, leaf_refs)


def _np_float(dtype: int) -> Any:
    types: dict[int, Any] = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
            onnx.TensorProto.BFLOAT16: ml_dtypes.bfloat16, onnx.TensorProto.DOUBLE: np.float64}
    return types[dtype]


def _rounded(value: Fraction | float | bool, dtype: int) -> Fraction | float | bool:
    f = float(value)
    with np.errstate(over="ignore"):
        return exact_value(np.asarray(np.asarray(f).astype(_np_float(dtype)), np.float64))


# ops whose result is one of their inputs (or -1, 0, 1): a value every input of which a type holds
# exactly, the type holds exactly too
_PICKS = frozenset({"Abs", "Neg", "Min", "Max", "Relu", "Where", "Clip", "Identity", "Expand", "Sign", "Cast",
                    "CastLike"})


def _fits(ops: list[tuple[str, tuple, tuple[Ref, ...]]], dtypes: list[int | None],
          constants: list[Fraction | float | bool], leaf_types: list[int | None], ref: Ref, target: int) -> bool:
    """Whether the value `ref` is always exactly a `target` float (so a Cast to target keeps it):
    a value of that type or a narrower one, a constant it holds, or a pick among such values (a
    float16 clamped in float32 and cast back)."""
    kind, k = ref
    if kind == "in":
        return leaf_types[k] in _PRECISION and not narrows(leaf_types[k], target)
    if kind == "c":
        v = constants[k]
        if isinstance(v, bool):
            return True
        f = float(v)
        with np.errstate(over="ignore"):  # a constant beyond the target's range becomes inf: not kept
            return not np.isfinite(f) or float(np.asarray(f).astype(_np_float(target)).astype(np.float64)) == f
    if kind != "v":
        return False
    if dtypes[k] in _PRECISION and not narrows(dtypes[k], target):
        return True
    op, key, refs = ops[k]
    if op not in _PICKS:
        return False
    if op == "Clip" and _clip_bound_missing(key, refs):
        # a bound left out is the largest finite value of the Clip's own type (onnxruntime maps
        # +-inf to +-3.4e38 in float32), which the narrower type does not hold
        return False
    picked = refs[1:] if op == "Where" else refs
    return all(_fits(ops, dtypes, constants, leaf_types, r, target) for r in picked if r[0] != "none")


def _clip_bound_missing(key: tuple, refs: tuple[Ref, ...]) -> bool:
    """Whether a Clip leaves a bound out (an input not given, or an opset < 11 attribute not set)."""
    if key:
        return not all(key)
    return len(refs) < 3 or any(r[0] == "none" for r in refs[1:])


_ORDER = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
MIRROR = {"Less": "Greater", "Greater": "Less", "LessOrEqual": "GreaterOrEqual", "GreaterOrEqual": "LessOrEqual"}


def _on_grid(op: str, ins: tuple[Ref, ...], ops: list[tuple[str, tuple, tuple[Ref, ...]]], dtypes: list[int | None],
             constants: list[Fraction | float | bool], leaf_types: list[int | None], compared: int | None,
             constant: Any) -> tuple[str, tuple[Ref, ...]]:
    """A comparison of a value that is always a narrower float (a float16 widened to float32)
    with a constant that float holds not: the same comparison, on every value the graph can
    hold, with the constant's nearest value of the narrower float, as `v <= r` or `v < r` as r
    lies below or above the constant (no value of the narrower float lies between them). A graph
    that compares a widened float16 with 0.05 and shifts by 0.05 rounded to float16 then has one
    breakpoint, as it has on every input it can get."""
    if len(ins) != 2 or (ins[0][0] == "c") == (ins[1][0] == "c"):
        return op, ins
    flipped = ins[0][0] == "c"
    value, const = (ins[1], ins[0]) if flipped else ins
    c = constants[const[1]]
    if not isinstance(c, Fraction):
        return op, ins
    relation = MIRROR[op] if flipped else op  # as `value relation c`
    for grid in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
        top = float_max(grid)
        if not narrows(compared, grid) or top is None or abs(c) >= top \
                or not _fits(ops, dtypes, constants, leaf_types, value, grid):
            continue
        r = _rounded(c, grid)
        if not isinstance(r, Fraction) or r == c:
            return op, ins
        less = relation in ("Less", "LessOrEqual")
        if r < c:  # the nearest below: v < c is v <= r, v > c is v > r
            relation = "LessOrEqual" if less else "Greater"
        else:  # the nearest above: v < c is v < r, v > c is v >= r
            relation = "Less" if less else "GreaterOrEqual"
        return relation, (value, constant(r))
    return op, ins


def _clamp_on_grid(ref: Ref, grid: int | None, ops: list[tuple[str, tuple, tuple[Ref, ...]]],
                   dtypes: list[int | None], constants: list[Fraction | float | bool], leaf_types: list[int | None],
                   constant: Any) -> list[tuple[str, tuple, tuple[Ref, ...]]] | None:
    """A narrowing Cast of a clamp (Min, Max, Clip with constant bounds, nested) of a value that is
    always of the narrower type: the same clamp at the bounds rounded to that type, which is what
    the Cast gives on every such value (a value at or beyond a bound is past the bound's nearest
    value of the type too). The ops that compute it after `ops`, the last one the result; None
    when `ref` is no such clamp. A float16 graph that clamps its widened value at 0.003 in float32
    then clamps at 0.003 rounded to float16, one breakpoint instead of an unknown rounding."""
    assert grid is not None
    top = float_max(grid)
    chain: list[tuple[str, tuple, list[Ref | Fraction]]] = []
    while ref[0] == "v":
        op, key, ins = ops[ref[1]]
        if op not in ("Min", "Max", "Clip") or key or op != "Clip" and len(ins) != 2:
            break
        bounds = [r for r in ins[1:] if r[0] != "none"] if op == "Clip" else [r for r in ins if r[0] == "c"]
        inner = ins[0] if op == "Clip" else next((r for r in ins if r[0] != "c"), None)
        values = [constants[r[1]] for r in bounds if r[0] == "c"]
        if inner is None or len(values) != len(bounds) or not bounds \
                or not all(isinstance(v, Fraction) and top is not None and abs(v) < top for v in values):
            return None
        rounded = [r for r in (_rounded(v, grid) for v in values) if isinstance(r, Fraction)]
        if len(rounded) != len(values):
            return None
        if op == "Clip" and _clip_bound_missing(key, ins):
            # the bound left out is the largest float32 (onnxruntime's Clip maps inf to it), which
            # the Cast rounds to inf: the clamp at the bound given alone, inf kept
            lo, hi = ins[1] if len(ins) > 1 else ("none", 0), ins[2] if len(ins) > 2 else ("none", 0)
            if lo[0] != "none":
                chain.append(("Max", (), [inner, rounded[0]]))
            elif hi[0] != "none":
                chain.append(("Min", (), [inner, rounded[0]]))
            ref = inner
            continue
        if op == "Clip":
            args: list[Ref | Fraction] = [ins[0], *[r if r[0] == "none" else rounded.pop(0) for r in ins[1:]]]
        else:
            args = [inner, rounded[0]]
        chain.append((op, key, args))
        ref = inner
    if not chain or not _fits(ops, dtypes, constants, leaf_types, ref, grid):
        return None
    out: list[tuple[str, tuple, tuple[Ref, ...]]] = []
    for op, key, args in reversed(chain):
        base: Ref = ref if not out else ("v", len(ops) + len(out) - 1)
        refs_: list[Ref] = [base]
        for a in args[1:]:
            refs_.append(constant(a) if isinstance(a, Fraction) else a)
        out.append((op, key, tuple(refs_)))
    return out


def _attributes(node: Node) -> tuple[tuple, list[tuple[str, Fraction | float]]]:
    """(the attributes a proof depends on, as a hashable key; numbers that become constant leaves)."""
    op = node.op_type
    if op == "Cast":
        return (int(attr(node, "to")),), []
    if op == "Shrink":
        return (), [("lambd", Fraction(float(np.float32(attr(node, "lambd", 0.5))))),
                    ("bias", Fraction(float(np.float32(attr(node, "bias", 0.0)))))]
    if op == "Clip" and (attr(node, "min") is not None or attr(node, "max") is not None):
        lo, hi = attr(node, "min"), attr(node, "max")
        return (lo is not None, hi is not None), [(n, Fraction(float(np.float32(v)))) for n, v in
                                                  (("min", lo), ("max", hi)) if v is not None]
    return (), []
