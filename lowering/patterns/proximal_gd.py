"""Proximal gradient descent:  out = sign(p) * max(|p| - t, 0) / k,  p = var - alpha * delta.

t is alpha*l1 and k is 1 + alpha*l2 (TensorFlow ApplyProximalGradientDescent). The shrink's forms
are the records in FORMS: a factor of the update that computes the shrink whole, a float mask times
the shifted value, or sign(p) times a magnitude; around any of them
  scaling   / k,  * (1/k) as a runtime reciprocal,  * constant,  or none (l2 = 0 folded away)
  update    var - alpha*delta,  var + delta*(-alpha),  Sub(var, Mul(delta, lr)) in any operand order
  scalars   constants (already folded into t and k), runtime alpha/l1/l2 visible as alpha*l1 and
            1 + alpha*l2 (the "raw" form), or runtime t and k computed elsewhere ("folded" forms).
A bare var - alpha*delta, or p / k without the shrink, is plain (or L2-only) SGD and is not matched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import onnx

from contracts.fused_ops import PROXIMAL_GD

from ..algebra import Algebra, Comparison, Monomial, Reach, clip_bounds
from ..graph import GraphIndex, Node, attr
from .base import (
    Input,
    Match,
    NoMatch,
    Pattern,
    absorb_casts,
    cap_of_nonnegative,
    close,
    float_dtype,
    is_single_element,
    refuse_float32_finish,
    refuse_rounded_abs,
    require,
    require_float,
    same_shape,
    same_threshold,
    shapes_differ,
    single_factor,
    zero_branch,
    zero_nodes,
)
from .forms import Form, first_found

FAMILY = "proximal_gd"
_SIGN_OPS, _WHERE_OPS = frozenset({"Sign"}), frozenset({"Where"})
# the scaling ops between the shrink and the anchor, and the Cast back from a float32 Sign
_TO_SHRINK = frozenset({"Mul", "Div", "Neg", "Reciprocal", "Cast"})
# a shrink that ends in an Add: tf2onnx's arithmetic select (from its Cast masks) or TorchScript's
# two-Where softshrink (from its Wheres with a 0 branch)
_SUM_SHRINK_OPS, _TO_SUM_SHRINK = frozenset({"Cast", "Where"}), _TO_SHRINK | {"Add"}
_BOUNDS_OPS = frozenset({"Clip", "Min", "Max"})  # clip(p, -t, t) as exporters write it (Algebra.clamp)


def match(alg: Algebra, anchor: int) -> Match | None:
    node = alg.index.nodes[anchor]
    out = node.output[0]
    if node.op_type == "Add":
        # an unscaled relu(p - t) + min(p + t, 0), tf2onnx's select of an unscaled softshrink
        # (l2 = 0), or TorchScript's two-Where softshrink (refused)
        if alg.reaches(out, _TWO_WHERE_SUM):
            _refuse_two_where_shrink(alg, out)
        if not alg.reaches(out, _SELECT_SUM) and not alg.reaches(out, _RELU_SUM):
            return None
    elif out not in alg.reached(_SHRINK_ENDS):
        return None
    mono = alg.monomial(out)
    shrink = _find_shrink(alg, mono)
    if shrink is None:
        return None
    scaling = mono  # what is left of the product once the shrink's factors are divided out
    for factor in shrink.factors:
        scaling = scaling.dividing_out(factor)
    update = _update(alg, shrink.p)
    if update is None:
        raise NoMatch("p is not var - alpha * delta with a scalar alpha")
    var, delta, alpha = update.var, update.delta, update.alpha
    index = alg.index
    dtype = require_float(index, var, "var")
    require(require_float(index, delta, "delta") == dtype, "var and delta have different dtypes")
    require(same_shape(index, var, delta), shapes_differ(index, var, delta, "var and delta"))
    scalars = _scalars(alg, alpha, shrink.t, scaling)
    for name, value in (("alpha", alpha), ("l1", scalars.l1), ("l2", scalars.l2)):
        if isinstance(value, str):
            require(is_single_element(index, value), f"{name} ({value}) is not known to hold one element")
            require(index.elem_type(value) in (onnx.TensorProto.FLOAT, dtype),
                    f"{name} ({value}) is neither float32 nor var's dtype")
    interior = shrink.nodes | update.nodes | mono.nodes
    boundary = set(scalars.nodes)
    wrapped = absorb_casts(alg, out, [var, delta])
    if wrapped is not None:
        out, (var, delta), out_cast, in_casts, dtype = wrapped
        interior |= out_cast
        boundary |= in_casts
    inputs: list[Input] = [var, alpha, scalars.l1, scalars.l2, delta]
    attrs: dict[str, object] = {"scalar_form": scalars.form}
    if shrink.clipped is not None:
        # Clip without max clamps at its dtype's largest finite value (ONNX spec), so inf maps there
        attrs["shrink_max"] = float(_finfo_max(index.elem_type(shrink.clipped)))
    return Match(f"{FAMILY}/{shrink.form}", PROXIMAL_GD, out, dtype, inputs, attrs,
                 interior=interior - boundary, boundary=boundary)


def _may_be_softshrink(index: GraphIndex, node: Node) -> bool:
    """A Where that selects on a comparison with |p| (or its float32 widening), or on a Not:
    where a softshrink can start (most Wheres of a graph select on something else)."""
    cond = index.node_of(node.input[0]) if len(node.input) == 3 else None
    if cond is None or cond.op_type == "Not":
        return cond is not None
    if cond.op_type not in ("Greater", "LessOrEqual", "Less", "GreaterOrEqual"):
        return False
    return any((side := index.node_of(v)) is not None and side.op_type in ("Abs", "Cast") for v in cond.input)


def _may_be_nested_softshrink(index: GraphIndex, node: Node) -> bool:
    """Where(p > t, ., Where(p < -t, ., .)): where two nested selects of a softshrink end."""
    if len(node.input) != 3:
        return False
    cond, inner = index.node_of(node.input[0]), index.node_of(node.input[2])
    inner_cond = None if inner is None or inner.op_type != "Where" else index.node_of(inner.input[0])
    compares = ("Greater", "Less", "GreaterOrEqual", "LessOrEqual")
    return (cond is not None and cond.op_type in compares and inner_cond is not None
            and inner_cond.op_type in compares and inner_cond.input[0] == cond.input[0])


def _may_be_sign(index: GraphIndex, node: Node) -> bool:
    """Where(c, 1, -1) or Where(c, -1, 1): a sign written as a select (_sign_as_where)."""
    return (len(node.input) == 3 and all(index.may_be_const(v) for v in node.input[1:])
            and {index.scalar(v) for v in node.input[1:]} == {1.0, -1.0})


def _select_part(index: GraphIndex, node: Node) -> bool:
    """A Cast of a boolean (an arithmetic select's mask) or a Where with a constant 0 branch."""
    if node.op_type == "Cast":
        return index.elem_type(node.input[0]) == onnx.TensorProto.BOOL
    return len(node.input) == 3 and index.scalar(node.input[2]) == 0.0


@dataclass(frozen=True)
class Shrink:
    """sign(p) * max(|p| - t, 0) found among the factors of a product: `factors` are the ones it
    takes (each of exponent 1), `form` the name the report gives it, and `clipped` the value whose
    dtype's largest finite value a Clip without max caps the shrink at (None when nothing caps it)."""

    p: str
    t: Input
    nodes: set[int]
    form: str
    factors: tuple[str, ...]
    clipped: str | None = None


@dataclass(frozen=True)
class SignOf:
    """A factor of a product that is sign(p): Sign itself, or a Where that is +-1 (not 0) at p = 0
    (not exact)."""

    factor: str
    p: str
    nodes: set[int]
    exact: bool


def _find_shrink(alg: Algebra, mono: Monomial) -> Shrink | None:
    """The shrink among mono's factors: one factor that computes it whole (WHOLE_FACTOR_FORMS), a
    float mask times the shifted value, or sign(p) times a magnitude (MAGNITUDE_FORMS)."""
    for name, exp in mono.factors.items():
        if exp != 1:
            continue
        _refuse_two_where_shrink(alg, name)
        found = (first_found(WHOLE_FACTOR_FORMS, alg, name) or MASKED_SOFTSHRINK.matcher(alg, mono, name)
                 or _sign_times_magnitude(alg, mono, name))
        if found is not None:
            return found
    return None


def _sign_times_magnitude(alg: Algebra, mono: Monomial, name: str) -> Shrink | None:
    """sign(p) * m, name the sign and m another factor of mono that one of MAGNITUDE_FORMS reads as
    max(|p| - t, 0)."""
    sign = _sign_of(alg, name)
    if sign is None:
        return None
    for other, exp in mono.factors.items():
        if exp != 1 or other == name:
            continue
        found = first_found(MAGNITUDE_FORMS, alg, sign, other)
        if found is not None:
            return found
    return None


def _sign_of(alg: Algebra, value: str) -> SignOf | None:
    """value = sign(p): Sign (also run in float32 for a float16/bfloat16 p), or _sign_as_where."""
    sign = alg.unary_narrowed(value, "Sign")
    if sign is not None:
        return SignOf(value, sign[0], sign[1], exact=True)
    written = _sign_as_where(alg, value)
    return None if written is None else SignOf(value, written[0], written[1], exact=False)


def _clamped_abs_minus_t(alg: Algebra, sign: SignOf, value: str) -> Shrink | None:
    """value = max(|p| - t, 0) in any of _clamp's spellings (the report names the form by the
    spelling). Beside a sign that is +-1 at p = 0 it is the shrink only for a constant t >= 0,
    where the clamp is 0 at p = 0."""
    clamp = _clamp(alg, value)
    split = None if clamp is None else _abs_minus_t(alg, clamp.d, sign.p)
    if clamp is None or split is None:
        return None
    t, nodes = split
    if not sign.exact:
        t_value = alg.scalar(t) if isinstance(t, str) else float(t)
        require(t_value is not None and t_value >= 0,
                "sign(p) written as a Where that is +-1 at p = 0 is the shrink only for a constant t >= 0")
    return Shrink(sign.p, t, nodes | sign.nodes | clamp.nodes, clamp.form, (sign.factor, value),
                  clamp.d if clamp.form == "clip" else None)


def _abs_minus_capped_abs(alg: Algebra, sign: SignOf, value: str) -> Shrink | None:
    """value = |p| - min(|p|, t), which is max(|p| - t, 0) with the same rounding for every p and t
    (0 where |p| <= t, |p| - t elsewhere; NaN stays NaN, inf stays inf), beside the exact Sign only
    (a sign written as a select is +-1 at p = 0)."""
    found = alg.producer(value, "Sub") if sign.exact else None
    if found is None or len(found[1].input) != 2:
        return None
    i, node = found
    absp = alg.unary(node.input[0], "Abs")
    capped = None if absp is None or absp[0] != sign.p else _capped_abs(alg, node.input[1], sign.p)
    if absp is None or capped is None:
        return None
    t, nodes = capped
    return Shrink(sign.p, t, nodes | {i, absp[1]} | sign.nodes, "abs-minus-min", (sign.factor, value))


def _sign_as_where(alg: Algebra, value: str) -> tuple[str, set[int]] | None:
    """(p, nodes) for Where(p >= 0, 1, -1) and its spellings (> 0, or < 0 / <= 0 with the branches
    swapped). Times max(|p| - t, 0) it is the shrink wherever that max is 0 (|p| <= t, so p = 0
    when t >= 0) and NaN stays NaN through the max, so only the sign at 0 differs from Sign."""
    found = alg.producer(value, "Where")
    if found is None or len(found[1].input) != 3:
        return None
    cmp = alg.compare(found[1].input[0])
    if cmp is None or alg.scalar(cmp.rhs) != 0.0:
        return None
    i, node = found
    up, down = (node.input[1], node.input[2]) if cmp.relation in (">", ">=") else (node.input[2], node.input[1])
    if alg.scalar(up) != 1.0 or alg.scalar(down) != -1.0:
        return None
    return cmp.lhs, {i} | cmp.nodes


def _finfo_max(elem_type: int | None) -> float:
    if elem_type == onnx.TensorProto.FLOAT16:
        return float(np.finfo(np.float16).max)
    if elem_type == onnx.TensorProto.BFLOAT16:
        import ml_dtypes

        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    return float(np.finfo(np.float32).max)


class Clamped(NamedTuple):
    """max(d, 0) or min(d, 0) as a pattern spells it; form is the report's name for the spelling."""

    d: str
    nodes: set[int]
    form: str


def _clamp(alg: Algebra, value: str) -> Clamped | None:
    """value = max(d, 0), or min(max(d, 0), the dtype's largest finite
    value) in any nesting (tf.clip_by_value(d, 0, dtype.max) through tf2onnx): that is Clip
    without max, form "clip", whose only difference from Max, inf -> largest finite, the fused
    node keeps as its shrink_max attribute."""
    found = alg.producer(value, "Max", "Relu", "Clip", "Where", "Min", "Cast")
    if found is None:
        return None
    i, node = found
    if node.op_type == "Cast":
        return _narrowed_clamp(alg, i, node)
    if node.op_type == "Relu":
        return Clamped(node.input[0], {i}, "relu")
    if node.op_type == "Where":
        return _where_clamp(alg, i, node)
    if node.op_type == "Min":
        inner = _clamp(alg, node.input[0]) if _caps_at_finite_max(alg, node) else None
        return None if inner is None or inner.form != "max" else Clamped(inner.d, inner.nodes | {i}, "clip")
    if node.op_type == "Max":
        if len(node.input) != 2:
            return None
        for d, z in (node.input, node.input[::-1]):
            zero = zero_nodes(alg, z, like=d)
            if zero is None:
                continue
            capped = alg.producer(d, "Min")
            if capped is not None and _caps_at_finite_max(alg, capped[1]):
                return Clamped(capped[1].input[0], {i, capped[0]} | zero, "clip")
            return Clamped(d, {i} | zero, "max")
        return None
    lo, hi = clip_bounds(node)
    if alg.bound_value(lo) != 0.0:
        return None
    if hi is not None and alg.bound_value(hi) == math.inf:  # torch.clamp(d, 0, inf): inf stays inf, as in Max
        return Clamped(node.input[0], {i}, "max")
    if hi is not None and alg.bound_value(hi) != _finfo_max(alg.index.elem_type(node.input[0])):
        return None
    return Clamped(node.input[0], {i}, "clip")


def _narrowed_clamp(alg: Algebra, i: int, cast: Node) -> Clamped | None:
    """Cast<T>(max(Cast<float32>(d: T), 0)): a float16/bfloat16 d clamped in float32 and cast back
    (F.threshold from the dynamo exporter), which is max(d, 0) exactly. So is the "clip" form
    there: the wider type's largest value, where it sends inf, rounds back to inf."""
    inner = _clamp(alg, cast.input[0])
    if inner is None:
        return None
    narrow = alg.narrowed(inner.d, attr(cast, "to"))
    if narrow is None:
        return None
    return Clamped(narrow[0], inner.nodes | {i} | narrow[1], "max" if inner.form == "clip" else inner.form)


def _caps_at_finite_max(alg: Algebra, node: Node) -> bool:
    """node is Min(y, M) with M its dtype's largest finite value (as a constant second operand,
    where normalization puts constants)."""
    return (len(node.input) == 2 and alg.index.const(node.input[1]) is not None
            and alg.scalar(node.input[1]) == _finfo_max(alg.index.elem_type(node.input[0])))


def _where_clamp(alg: Algebra, i: int, node: Node) -> Clamped | None:
    """Where(d <= 0, 0, d) or Where(d < 0, 0, d): F.threshold(d, 0, 0) as the dynamo exporter
    writes it. NaN fails the comparison and selects d, as in Max(d, 0); the mirrored
    Where(d > 0, d, 0) sends NaN to 0 instead, and is refused."""
    cmp = alg.compare(node.input[0])
    if cmp is None or zero_nodes(alg, cmp.rhs) is None:
        return None
    low = cmp.relation in ("<", "<=")
    zero, d = (node.input[1], node.input[2]) if low else (node.input[2], node.input[1])
    zeros = zero_nodes(alg, zero, like=d)
    if d != cmp.lhs or zeros is None:
        return None
    if not low:
        raise NoMatch(f"max(d, 0) written as Where(d {cmp.relation} 0, d, 0): NaN in d gives 0 there "
                      "and NaN in the fused op")
    return Clamped(d, {i} | cmp.nodes | zeros, "where")


def _abs_minus_t(alg: Algebra, d: str, p: str) -> tuple[str | np.ndarray, set[int]] | None:
    """(t, nodes) when d = |p| - t; t is a value name, or a constant array when written as + (-t)."""
    terms, nodes = alg.terms(d)
    if len(terms) != 2:
        return None
    for (s1, a), (s2, t) in (terms, terms[::-1]):
        found = alg.unary(a, "Abs")
        if s1 != 1 or found is None or found[0] != p:
            continue
        if s2 == -1:
            return t, nodes | {found[1]}
        neg = alg.unary(t, "Neg")
        if neg is not None:
            return neg[0], nodes | {found[1], neg[1]}
        c = alg.index.const(t)
        if c is not None and c.size == 1:
            return (-c.astype(np.float32)).reshape(()), nodes | {found[1]}
    return None


def _softshrink(alg: Algebra, value: str) -> Shrink | None:
    """value = Where(|p| > t, p - sign(p)*t, p*0)."""
    where = alg.producer(value, "Where")
    if where is not None:  # the condition decides before the branches are walked
        cmp = alg.compare(where[1].input[0])
        if cmp is None or cmp.relation not in (">", "<=") or alg.unary(alg.widened(cmp.lhs), "Abs") is None:
            if cmp is not None:
                refuse_rounded_abs(alg, cmp.lhs)
            return None
    sel = alg.select(value)
    if sel is None:
        return None
    cmp = alg.compare(sel.cond)
    if cmp is None or cmp.relation not in (">", "<="):
        return None
    outside, inside = (sel.when_true, sel.when_false) if cmp.relation == ">" else (sel.when_false, sel.when_true)
    absp = alg.unary(alg.widened(cmp.lhs), "Abs")  # float16 exports compare |p| widened to float32
    if absp is None:
        return None
    # a runtime t of p's dtype is compared widened as |p| is (the dynamo exporter's float16)
    p, t = absp[0], alg.widened(cmp.rhs)
    zeros: set[int] = set()
    if inside.coef != 0.0 or dict(inside.factors) != {p: 1}:
        # 0 instead of p*0 is exact unless NaN in p selects it: a comparison with NaN is false,
        # so a Where (its condition stripped of Nots) sends NaN to its false branch, which is the
        # 0 for |p| > t and the shrink for |p| <= t; tf2onnx's arithmetic select multiplies the
        # other branch by a 0 mask instead, which keeps NaN as the fused op does
        found_zeros = zero_branch(alg, inside)
        if found_zeros is None:
            return None
        zeros = found_zeros
        if not sel.arithmetic and cmp.relation == ">":
            raise NoMatch("softshrink with 0, not p*0, where |p| <= t: NaN in p gives 0 there and NaN in the fused op")
    moved = single_factor(outside)
    shifted = None if moved is None else _shifted_by_sign(alg, moved, p, t)
    if shifted is None:
        return None
    nodes = (sel.nodes | cmp.nodes | {absp[1]} | inside.nodes | outside.nodes | shifted[0]
             | alg.widening_casts(cmp.lhs) | alg.widening_casts(cmp.rhs) | zeros)
    return Shrink(p, shifted[1], nodes, "softshrink", (value,))


def _side_branch(alg: Algebra, cmp: Comparison, branch: Monomial) -> tuple[str, float, int] | None:
    """(p, t, side) when cmp is p > t (side 1) or p < -t (side -1), also with >= and <=, for a
    constant t, and branch is p - t or p + t, the shrink's value on that side; else None."""
    c = alg.scalar(cmp.rhs)
    if c is None:
        return None
    side = 1 if cmp.relation in (">", ">=") else -1
    moved = single_factor(branch)
    terms = None if moved is None else alg.terms(moved)[0]
    if terms is None or len(terms) != 2 or (1, cmp.lhs) not in terms:
        return None
    others = [(sg, v) for sg, v in terms if v != cmp.lhs]
    if len(others) != 1:  # p + p: no shift at all
        return None
    (sign, other), = others
    shift = alg.scalar(other)
    # p - t on the high side, p + t on the low one: the shifted value is p - side*t, t = side*c
    if shift is None or sign * shift != -c:
        return None
    return cmp.lhs, side * c, side


def _nested_softshrink(alg: Algebra, value: str) -> Shrink | None:
    """value = where(p > t, p - t, where(p < -t, p + t, p*0)) (either side first): soft
    thresholding as TensorFlow code writes it with two selects. It is the shrink for a constant
    t >= 0 (at p = +-t the shifted branch is 0 too): NaN fails both comparisons and ends in p*0,
    which is NaN. Under tf2onnx's arithmetic selects an inf p makes the branches not taken NaN
    (0 * inf): the report's caveat. A runtime t is refused: for t < 0 the sides overlap."""
    outer = alg.select(value)
    outer_cmp = None if outer is None else alg.compare(outer.cond)
    if outer is None or outer_cmp is None:
        return None
    inner_value = single_factor(outer.when_false)
    inner = None if inner_value is None or outer.when_false.coef != 1.0 else alg.select(inner_value)
    inner_cmp = None if inner is None else alg.compare(inner.cond)
    if inner is None or inner_cmp is None or inner_cmp.lhs != outer_cmp.lhs:
        return None
    sides = _side_branch(alg, outer_cmp, outer.when_true), _side_branch(alg, inner_cmp, inner.when_true)
    if None in sides:
        if alg.scalar(outer_cmp.rhs) is None and alg.scalar(inner_cmp.rhs) is None \
                and alg.producer(outer_cmp.lhs, "Sub", "Add"):
            raise NoMatch("where(p > t, p - t, where(p < -t, p + t, 0)) is the shrink only for t >= 0, "
                          "and t is a runtime value")
        return None
    high_side, low_side = sides
    high_moved, low_moved = single_factor(outer.when_true), single_factor(inner.when_true)
    if high_side is None or low_side is None or high_moved is None or low_moved is None:
        return None  # _side_branch found both
    (p, t_high, high), (_, t_low, low) = high_side, low_side
    if high == low or t_high != t_low:
        return None
    require(t_high >= 0, f"where(p > t, p - t, where(p < -t, p + t, 0)) with t = {t_high:g}: for t < 0 the "
                         "sides overlap, not the shrink")
    rest = inner.when_false
    zeros: set[int] = set()
    if rest.coef != 0.0 or dict(rest.factors) != {p: 1}:
        # a plain 0 there: a Where sends NaN to it, tf2onnx's select multiplies the other branch
        # (NaN) by its 0 mask and keeps it
        found_zeros = zero_branch(alg, rest)
        if found_zeros is None:
            return None
        zeros = found_zeros
        require(inner.arithmetic, "softshrink with 0, not p*0, between the thresholds: NaN in p gives 0 there "
                                  "and NaN in the fused op")
    nodes = (outer.nodes | inner.nodes | outer_cmp.nodes | inner_cmp.nodes | outer.when_true.nodes
             | inner.when_true.nodes | outer.when_false.nodes | rest.nodes | zeros
             | alg.terms(high_moved)[1] | alg.terms(low_moved)[1])
    return Shrink(p, np.array(t_high, np.float32), nodes, "nested-softshrink", (value,))


def _shifted_by_sign(alg: Algebra, moved: str, p: str, t: str, strict: bool = True
                     ) -> tuple[set[int], str | np.ndarray] | None:
    """(nodes, threshold) when moved = p - t'*sign(p) is the branch of a softshrink taken where
    |p| > t (strict) or |p| >= t; t' is t, or a constant the comparison with t cannot tell apart
    from it in p's dtype (base.same_threshold), which is then the threshold; else None."""
    terms, tnodes = alg.terms(moved)
    if sorted(s for s, _ in terms) != [-1, 1] or (1, p) not in terms:
        return None
    (_, shift), = [(s, v) for s, v in terms if s == -1]
    shift_mono = alg.monomial(shift, stop=frozenset({t}))
    sign = next((n for n, e in shift_mono.factors.items()
                 if e == 1 and (alg.unary(n, "Sign") or ("", -1))[0] == p), None)
    t_const = alg.scalar(t)
    expected = {sign: 1} if t_const is not None else {sign: 1, t: 1}
    sign_of = None if sign is None else alg.unary(sign, "Sign")
    if sign_of is None or dict(shift_mono.factors) != expected:
        return None
    nodes = tnodes | shift_mono.nodes | {sign_of[1]}
    if t_const is None:
        if shift_mono.coef != 1.0:
            raise NoMatch("softshrink shifts p by a constant times its threshold")
        return nodes, t
    threshold = _shift_threshold(alg, p, t, shift_mono.coef, strict)
    if threshold is None:
        # the shift and the compared threshold are different numbers with values of p's dtype
        # between them: the graph jumps there, and near |p| == t the fused op would not be within
        # the precision standard of it
        raise NoMatch(f"softshrink shifts p by {shift_mono.coef:.9g} but compares |p| with {t_const:.9g}")
    return nodes, threshold


def _shift_threshold(alg: Algebra, p: str, t: str, shift: str | float | np.ndarray, strict: bool
                     ) -> str | np.ndarray | None:
    """The threshold of a softshrink that compares |p| with t (|p| > t when strict, else >=) and
    shifts p by `shift`: t when the shift is t or its number, the shift when no value of p's dtype
    lies between the two (base.same_threshold), else None."""
    if isinstance(shift, str) and shift == t:
        return t
    t_const = alg.scalar(t)
    value = alg.scalar(shift) if isinstance(shift, str) else float(shift)
    if value is None or t_const is None:
        return None
    if value == t_const:
        return t
    if same_threshold(float_dtype(alg.index, p), t_const, strict, value):
        return np.array(value, np.float32)
    return None


def _masked_softshrink(alg: Algebra, mono: Monomial, mask: str) -> Shrink | None:
    """The shrink when mono has the factors mask = Cast(|p| > t) (or >=) and
    p - t*sign(p), or sign(p) and |p| - t: softshrink with a float mask. Equal to the shrink for
    every p and t: NaN in p fails the comparison and 0*NaN is NaN, inf passes it, and where the
    mask is 0 the other factors are finite; for t < 0 every p passes and p - t*sign(p) is
    sign(p)*(|p| - t) as well (the same rounding: |p| - t and p - sign(p)*t differ in sign only)."""
    cast = alg.producer(mask, "Cast")
    if cast is None or alg.index.elem_type(cast[1].input[0]) != onnx.TensorProto.BOOL:
        return None
    cmp = alg.compare(cast[1].input[0])
    if cmp is None or cmp.relation not in (">", ">="):
        return None
    absp = alg.unary(alg.widened(cmp.lhs), "Abs")
    if absp is None:
        return None
    p, t, strict = absp[0], alg.widened(cmp.rhs), cmp.relation == ">"
    found = {cast[0], absp[1]} | cmp.nodes | alg.widening_casts(cmp.lhs) | alg.widening_casts(cmp.rhs)
    split = _sign_times_abs_minus_t(alg, mono, mask, p, t, strict)
    if split is not None:
        return Shrink(p, split[2], found | split[1], "masked-softshrink", (mask, *split[0]))
    for other, exp in mono.factors.items():
        shifted = _shifted_by_sign(alg, other, p, t, strict) if exp == 1 and other != mask else None
        if shifted is not None:
            return Shrink(p, shifted[1], found | shifted[0], "masked-softshrink", (mask, other))
        widened = alg.widened(other) if exp == 1 else other
        if widened != other and _shifted_by_sign(alg, widened, p, alg.widened(t)) is not None:
            refuse_float32_finish(alg, p, "p - t*sign(p)")
    return None


def _sign_times_abs_minus_t(alg: Algebra, mono: Monomial, mask: str, p: str, t: str, strict: bool
                            ) -> tuple[list[str], set[int], str | np.ndarray] | None:
    """([sign factor, |p| - t' factor], nodes, threshold) when mono has both, t' the compared t
    or a constant the comparison cannot tell apart from it (base.same_threshold)."""
    sign = next((name for name, exp in mono.factors.items()
                 if exp == 1 and name != mask and (alg.unary(name, "Sign") or ("",))[0] == p), None)
    sign_of = None if sign is None else alg.unary(sign, "Sign")
    if sign is None or sign_of is None:
        return None
    nodes = {sign_of[1]}
    for other, exp in mono.factors.items():
        split = _abs_minus_t(alg, other, p) if exp == 1 and other not in (mask, sign) else None
        if split is None:
            continue
        threshold = _shift_threshold(alg, p, t, split[0], strict)
        if threshold is not None:
            return [sign, other], nodes | split[1], threshold
    return None


_SUB_SHRINK_OPS = frozenset({"Sub"})
_RELU_OPS = frozenset({"Relu", "Max", "Where"})  # relu(d) as _clamp reads it


def _may_end_sub_shrink(index: GraphIndex, node: Node) -> bool:
    """Sub(p, c) with c made by Clip/Min/Max or a product with a Min or Clip (sign(p)*min(|p|, t)), or
    Sub(relu(.), relu(.)): where a clamp residual, a min residual or a difference of ReLUs can end."""
    if len(node.input) != 2:
        return False
    ops = [index.nodes[i].op_type if (i := index.producer.get(v)) is not None else None for v in node.input]
    second = index.node_of(node.input[1])
    if second is not None and ops[1] == "Cast":  # a clamp run in float32 and cast back (Algebra.clamp)
        ops[1] = (index.node_of(second.input[0]) or second).op_type
    if second is not None and ops[1] == "Mul":
        factors = {f.op_type for v in second.input if (f := index.node_of(v)) is not None}
        return "Sign" in factors and bool(factors & {"Min", "Clip"})
    return ops[1] in _BOUNDS_OPS or (ops[0] in _RELU_OPS and ops[1] in _RELU_OPS)


def _may_end_relu_sum(index: GraphIndex, node: Node) -> bool:
    """Add(relu(.), min(., 0)) in either order: where relu(p - t) + min(p + t, 0) ends."""
    if len(node.input) != 2:
        return False
    ops = {index.nodes[i].op_type if (i := index.producer.get(v)) is not None else None for v in node.input}
    return bool(ops & {"Min", "Clip"}) and bool(ops & (_RELU_OPS | {"Clip"}))


def _clamp_residual(alg: Algebra, value: str) -> Shrink | None:
    """value = p - clip(p, -t, t): the soft threshold as the residual of a clamp, as ISTA
    code writes it. It is sign(p)*max(|p| - t, 0) for every p (NaN and inf included: the clamp is
    finite there, p is not) as long as t >= 0; with -t > t the clamp returns a bound instead, so t
    must be a constant that is known not to be negative."""
    found = alg.producer(value, "Sub")
    if found is None or len(found[1].input) != 2:
        return None
    i, node = found
    p, clamped = node.input
    bounds = alg.clamp(clamped)
    if bounds is None or bounds[0] != p:
        return None
    _, lo, hi, nodes = bounds
    lo_c, hi_c = alg.bound_value(lo), alg.bound_value(hi)
    if lo_c is None or hi_c is None:
        negated = alg.unary(lo, "Neg") if isinstance(lo, str) else None
        if negated is not None and negated[0] == hi:
            raise NoMatch("p - clip(p, -t, t) is the shrink only for t >= 0, and t is a runtime value")
        return None
    if lo_c != -hi_c:
        return None
    require(hi_c >= 0, f"p - clip(p, {lo_c:g}, {hi_c:g}): with a negative t the clamp returns a bound, not the shrink")
    return Shrink(p, hi if isinstance(hi, str) else np.array(hi, np.float32), nodes | {i}, "clamp-residual", (value,))


def _capped_abs(alg: Algebra, value: str, p: str) -> tuple[Input, set[int]] | None:
    """(t, nodes) when value = min(|p|, t) for a single-element t (in either operand order), also
    as Clip(|p|, max=t) (torch.clamp(|p|, max=t); its lower bound, left out or <= 0, never acts on
    |p|, and onnxruntime's Clip keeps NaN as its Min does)."""
    found = alg.producer(value, "Min", "Clip")
    if found is None:
        return None
    i, node = found
    if node.op_type == "Clip":
        hi = cap_of_nonnegative(alg, node)
        absp = alg.unary(node.input[0], "Abs")
        if hi is None or absp is None or absp[0] != p:
            return None
        if isinstance(hi, str):
            return (hi, {i, absp[1]}) if is_single_element(alg.index, hi) else None
        return np.array(hi, np.float32), {i, absp[1]}  # max as an attribute, before opset 11
    if len(node.input) != 2:
        return None
    for a, t in (node.input, node.input[::-1]):
        absp = alg.unary(a, "Abs")
        if absp is not None and absp[0] == p and is_single_element(alg.index, t):
            return t, {i, absp[1]}
    return None


def _min_residual(alg: Algebra, value: str) -> Shrink | None:
    """value = p - sign(p)*min(|p|, t): the shrink as the kernel itself computes it. It
    is sign(p)*max(|p| - t, 0) for every p and every t: where |p| <= t it is p - p = 0, elsewhere
    p - sign(p)*t = sign(p)*(|p| - t) with the same rounding, also for a negative t; NaN stays NaN
    through the Min and inf - t is inf."""
    found = alg.producer(value, "Sub")
    if found is None or len(found[1].input) != 2:
        return None
    i, node = found
    p, shift = node.input
    mono = alg.monomial(shift)
    if mono.coef != 1.0 or len(mono.factors) != 2 or set(mono.factors.values()) != {1}:
        return None
    for sign_name, capped_name in (list(mono.factors), list(mono.factors)[::-1]):
        sign = alg.unary_narrowed(sign_name, "Sign")
        capped = None if sign is None or sign[0] != p else _capped_abs(alg, capped_name, p)
        if sign is not None and capped is not None:
            t, nodes = capped
            return Shrink(p, t, nodes | sign[1] | mono.nodes | {i}, "min-residual", (value,))
    return None


def _relu_difference(alg: Algebra, value: str) -> Shrink | None:
    """value = relu(p - t) - relu(-p - t): soft thresholding as LISTA code writes
    it (relu also as max(., 0), F.threshold or Clip(., 0)), or relu(p - t) + min(p + t, 0) (the
    second clamp as Min(., 0) or Clip(., max=0)), which is the same since min(e, 0) = -relu(-e).
    It is sign(p)*max(|p| - t, 0) for every p (onnxruntime's Relu, Max and Min keep NaN, and inf
    passes one side) as long as t >= 0; for t < 0 both sides are nonzero near 0 and the result is
    2p, so t must be a constant known not to be negative. Clip with a bound left out clamps at the
    dtype's largest finite value (clipped), which both sides must then do, so that +-inf map to
    +-that value (the Shrink's clipped)."""
    terms, nodes = alg.terms(value)
    signs = sorted(s for s, _ in terms)
    if signs == [-1, 1]:
        (_, pos), (_, neg) = sorted(terms, reverse=True)
        high, low = _clamp(alg, pos), _clamp(alg, neg)
        if high is None or low is None:
            return None
        split_high, split_low = _signed_minus_t(alg, high.d), _signed_minus_t(alg, low.d)
    elif signs == [1, 1]:
        sides = None
        for (_, pos), (_, neg) in (terms, terms[::-1]):
            low_part = _negative_part(alg, neg)
            high_part = None if low_part is None else _clamp(alg, pos)
            if low_part is not None and high_part is not None:
                sides = high_part, low_part
                break
        if sides is None:
            return None
        high, low = sides
        split_high, split_low = _signed_minus_t(alg, high.d), _negated_plus_t(alg, low.d)
    else:
        return None
    if split_high is None or split_low is None or split_high.sign != 1 or split_low.sign != -1 \
            or split_high.p != split_low.p:
        return None
    clipped = high.form == "clip"
    if clipped != (low.form == "clip"):
        return None
    p, t, t2 = split_high.p, split_high.t, split_low.t
    t_const, t2_const = alg.scalar(t), alg.scalar(t2)
    if t != t2 and (t_const is None or t_const != t2_const):
        return None
    if t_const is None:
        raise NoMatch("relu(p - t) - relu(-p - t) is the shrink only for t >= 0, and t is a runtime value")
    require(t_const >= 0, f"relu(p - t) - relu(-p - t) with t = {t_const:g}: for t < 0 it is 2p near 0, not the shrink")
    return Shrink(p, t, nodes | high.nodes | low.nodes | split_high.nodes | split_low.nodes, "relu-difference",
                  (value,), p if clipped else None)


def _negative_part(alg: Algebra, value: str) -> Clamped | None:
    """value = min(e, 0): Min against zeros, or Clip(e, max=0) with its
    lower bound left out (form "clip": it clamps -inf at the dtype's lowest finite value)."""
    found = alg.producer(value, "Min", "Clip")
    if found is None:
        return None
    i, node = found
    if node.op_type == "Clip":
        lo, hi = clip_bounds(node)
        if lo is not None or hi is None or alg.bound_value(hi) != 0.0:
            return None
        return Clamped(node.input[0], {i}, "clip")
    if len(node.input) != 2:
        return None
    for e, z in (node.input, node.input[::-1]):
        zero = zero_nodes(alg, z, like=e)
        if zero is not None:
            return Clamped(e, {i} | zero, "min")
    return None


class SignedMinusT(NamedTuple):
    """sign*p - t with sign = +-1."""

    sign: int
    p: str
    t: str
    nodes: set[int]


def _negated_plus_t(alg: Algebra, e: str) -> SignedMinusT | None:
    """e = p + t, read as -e = -p - t."""
    terms, nodes = alg.terms(e)
    if sorted(s for s, _ in terms) != [1, 1]:
        return None
    (_, a), (_, t) = terms
    if alg.scalar(a) is not None:
        a, t = t, a
    return SignedMinusT(-1, a, t, nodes)


def _signed_minus_t(alg: Algebra, d: str) -> SignedMinusT | None:
    """d = s*p - t with s = +-1: p - t, -p - t as Neg(p) - t or -(p + t)."""
    neg = alg.unary(d, "Neg")  # -(p + t)
    if neg is not None:
        terms, nodes = alg.terms(neg[0])
        if sorted(s for s, _ in terms) != [1, 1]:
            return None
        (_, a), (_, t) = terms
        if alg.scalar(a) is not None:
            a, t = t, a
        return SignedMinusT(-1, a, t, nodes | {neg[1]})
    terms, nodes = alg.terms(d)
    if len(terms) != 2:
        return None
    for (s1, a), (s2, t) in (terms, terms[::-1]):
        if s2 != -1:
            continue
        negated = alg.unary(a, "Neg")
        if s1 == 1 and negated is not None:
            return SignedMinusT(-1, negated[0], t, nodes | {negated[1]})
        return SignedMinusT(s1, a, t, nodes)
    return None


def _refuse_two_where_shrink(alg: Algebra, value: str) -> None:
    if _two_where_shrink(alg, value):
        raise NoMatch("softshrink as a sum of two Wheres (TorchScript's symbolic): NaN in p gives 0 there "
                      "and NaN in the fused op")


def _two_where_shrink(alg: Algebra, value: str) -> bool:
    """Add(Where(p > t, p - t, 0), Where(p < -t, p + t, 0)), in either operand order."""
    found = alg.producer(value, "Add")
    if found is None or len(found[1].input) != 2:
        return False
    compared: dict[str, str] = {}  # relation -> the value compared
    for side in found[1].input:
        where = alg.producer(side, "Where")
        cmp = None if where is None else alg.compare(where[1].input[0])
        if where is None or cmp is None or cmp.relation not in (">", "<") \
                or zero_nodes(alg, where[1].input[2]) is None:
            return False
        if (1, cmp.lhs) not in alg.terms(where[1].input[1])[0]:
            return False
        compared[cmp.relation] = cmp.lhs
    return len(compared) == 2 and compared[">"] == compared["<"]


class Update(NamedTuple):
    """p = var - alpha*delta; alpha is a name or a constant array."""

    var: str
    delta: str
    alpha: Input
    nodes: set[int]


def _update(alg: Algebra, p: str) -> Update | None:
    """p = var - alpha*delta in the spellings of the module docstring."""
    index = alg.index
    terms, nodes = alg.terms(p)
    if len(terms) != 2:
        return None
    unequal = None  # (var, delta) of a split that failed only on their shapes
    for (sv, var), (sd, prod) in (terms, terms[::-1]):
        if sv != 1:
            continue
        if len(index.consumers.get(prod, ())) > 1 and alg.producer(prod, "Mul", "Div", "Neg") is not None:
            # alpha*delta also read elsewhere (two updates with one step): it stays, and is the
            # delta of an update with alpha 1
            mono = Monomial(1.0, {prod: 1}, set())
        else:
            mono = alg.monomial(prod)
        coef = -sd * mono.coef  # alpha's constant part: p = var - coef * (runtime factors)
        tensors = {v: e for v, e in mono.factors.items() if not is_single_element(index, v)}
        if not tensors and is_single_element(index, var):
            # a one-element parameter (a bias of shape [1]): its delta is the factor shaped like it
            tensors = next(({v: e} for v, e in mono.factors.items() if e == 1 and same_shape(index, v, var)), {})
        if len(tensors) == 1 and list(tensors.values()) == [1]:
            delta = next(iter(tensors))
        else:
            grouped = alg.regroup(mono, tensors)
            if grouped is None:
                continue
            delta = grouped[0]
            coef /= grouped[2]
            mono = Monomial(mono.coef / grouped[2],
                            {delta: 1, **{v: e for v, e in mono.factors.items() if v not in tensors}},
                            mono.nodes - grouped[1])
        if not same_shape(index, delta, var):
            unequal = (var, delta)
            continue
        others = {v: e for v, e in mono.factors.items() if v != delta}
        if not others:
            if float(np.float32(coef)) != coef:
                # a step no float32 holds (two constants multiplied): delta is the value the last
                # constant scales, so the fused node's alpha is a number the graph stores
                shallow = _stored_step(alg, prod, -sd, var)
                if shallow is not None:
                    return Update(var, shallow[0], shallow[1], nodes | shallow[2])
            return Update(var, delta, np.array(coef, np.float32), nodes | mono.nodes)
        if len(others) == 1 and list(others.values()) == [1] and coef == 1.0:
            return Update(var, delta, next(iter(others)), nodes | mono.nodes)
        # the runtime scalar scales the gradient, the constant is the step (clip_grad_norm's
        # coefficient times grad, then times lr): delta is the product the graph computes upstream
        scaled = alg.regroup(mono, {delta: 1, **others})
        if scaled is not None and same_shape(index, scaled[0], var):
            return Update(var, scaled[0], np.array(coef / scaled[2], np.float32), nodes | (mono.nodes - scaled[1]))
        raise NoMatch("alpha is a runtime value times a constant, and no value computed before the update is "
                      "delta times that runtime value")
    if unequal is not None:
        raise NoMatch(shapes_differ(index, *unequal, "var and delta"))
    return None


def _stored_step(alg: Algebra, prod: str, sign: float, var: str) -> tuple[str, np.ndarray, set[int]] | None:
    """(delta, alpha, nodes) when `prod` is Mul(delta, c) with a one-element constant c and a
    delta of var's shape: alpha is sign * c, exactly."""
    found = alg.producer(prod, "Mul")
    if found is None:
        return None
    i, node = found
    for t, c in (node.input, node.input[::-1]):
        const = alg.index.const(c)
        if const is not None and const.size == 1 and same_shape(alg.index, t, var):
            return t, np.array(sign * float(const.reshape(-1)[0]), np.float32), {i}
    return None


class Scalars(NamedTuple):
    """The fused node's l1 and l2 inputs and its scalar_form attribute; nodes is the scalar math
    the fusion keeps outside (it may be shared)."""

    form: str
    l1: Input
    l2: Input
    nodes: set[int]


def _scalars(alg: Algebra, alpha: Input, t: Input, rest: Monomial) -> Scalars:
    """The scalars from t and the update's scaling `rest`: a constant 1/k, a runtime factor 1/k, or
    a runtime k it divides by (raw where t and k read as alpha*l1 and 1 + alpha*l2)."""
    factors = dict(rest.factors)
    if not factors:
        require(rest.coef != 0 and np.isfinite(rest.coef), "the update is scaled by zero or a non-finite constant")
        # the fused node carries the number the graph stores: a divisor k as it is (the kernel
        # takes 1/k on the host), a multiplier as it is; never a rounded reciprocal of either
        divisor = 1.0 / rest.coef
        if float(np.float32(rest.coef)) != rest.coef and float(np.float32(divisor)) == divisor:
            return Scalars("folded", _const_or_value(alg, t), np.array(divisor, np.float32), set())
        require(float(np.float32(rest.coef)) == rest.coef,
                f"the update is scaled by {rest.coef:.9g}, a product of constants that no float32 input holds "
                "exactly (the fused node would scale by a rounded number)")
        return Scalars("folded_reciprocal", _const_or_value(alg, t), np.array(rest.coef, np.float32), set())
    require(len(factors) == 1 and rest.coef == 1.0, "the update is scaled by more than one value")
    (k, exp), = factors.items()
    require(exp in (1, -1), "the update is scaled by a power of a value")
    if exp == 1:
        return Scalars("folded_reciprocal", _const_or_value(alg, t), k, set())
    raw = _raw_scalars(alg, alpha, t, k)
    if raw is not None:
        return raw
    return Scalars("folded", _const_or_value(alg, t), k, set())


def _raw_scalars(alg: Algebra, alpha: Input, t: Input, k: str) -> Scalars | None:
    """The "raw" scalars when t = alpha*l1 and k = 1 + alpha*l2 with the update's own alpha."""
    if not isinstance(t, str):
        return None
    l1 = _times_alpha(alg, alpha, t)
    terms, knodes = alg.terms(k)
    if l1 is None or len(terms) != 2:
        return None
    for (s1, one), (s2, prod) in (terms, terms[::-1]):
        if s1 == 1 and s2 == 1 and alg.scalar(one) == 1.0:
            l2 = _times_alpha(alg, alpha, prod)
            if l2 is not None:
                return Scalars("raw", l1[0], l2[0], l1[1] | l2[1] | knodes)
    return None


def _times_alpha(alg: Algebra, alpha: Input, value: str) -> tuple[str, set[int]] | None:
    """(l, nodes) when value = alpha * l for a runtime l."""
    mono = alg.monomial(value)
    if isinstance(alpha, str):
        rest = mono.without(alpha)
        if rest is None or rest.coef != 1.0:
            return None
    else:
        rest = mono
        if not close(rest.coef, float(alpha), 1e-7):
            return None
    if len(rest.factors) != 1 or list(rest.factors.values()) != [1]:
        return None
    return next(iter(rest.factors)), mono.nodes


def _const_or_value(alg: Algebra, t: Input) -> Input:
    if isinstance(t, str):
        c = alg.index.const(t)
        if c is not None and c.dtype != np.float32 and c.size == 1:
            return np.asarray(c, np.float32).reshape(c.shape)
    return t


SOFTSHRINK = Form(
    FAMILY, "softshrink",
    formula="where(|p| > t, p - sign(p)*t, p*0)",
    spellings=(
        "`Where(|p| > t, p - sign(p)*t, p*0)`, also with `|p|` widened to float32 in a float16 graph, and with "
        "`0` for `p*0` under tf2onnx's arithmetic select, whose 0 mask keeps NaN in p",
        "`Where(|p| <= t, 0, p - sign(p)*t)` with a plain 0 (NaN fails the comparison and takes the shift there, "
        "as in the fused op)",
        "in float16 or bfloat16, comparing `|p|` with the float32 t but shifting by t rounded to its dtype "
        "(`F.softshrink` on a half tensor): the shrink at the rounded t when no value of the dtype lies between "
        "the two, fused with that threshold",
    ),
    seen_from=("dynamo", "dynamo-optimized", "tf2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_softshrink,
)
NESTED_SOFTSHRINK = Form(
    FAMILY, "nested-softshrink",
    formula="where(p > t, p - t, where(p < -t, p + t, p*0))",
    spellings=(
        "two nested selects, either side first, with a constant t >= 0 (NaN fails both comparisons and ends in "
        "`p*0`); refused for a runtime or negative t, where the sides overlap",
        "a plain 0 for `p*0` only where the inner select is tf2onnx's arithmetic select, whose 0 mask keeps NaN",
    ),
    seen_from=("dynamo-optimized", "torchscript", "tf2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_nested_softshrink,
)
CLAMP_RESIDUAL = Form(
    FAMILY, "clamp-residual",
    formula="p - clip(p, -t, t)",
    spellings=(
        "ISTA's soft threshold as a clamp residual, with a constant t >= 0: `Clip` with inputs or, before opset "
        "11, attributes, `Min(Max(p, -t), t)` or `Max(Min(p, t), -t)` as tf2onnx writes `tf.clip_by_value`; "
        "equal to the shrink on every p, NaN and inf included",
    ),
    seen_from=("dynamo-optimized", "torchscript", "tf2onnx", "jax2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_clamp_residual,
)
MIN_RESIDUAL = Form(
    FAMILY, "min-residual",
    formula="p - sign(p)*min(|p|, t)",
    spellings=(
        "the kernel's own formula, the min also as `Clip(|p|, max=t)` (`torch.clamp(|p|, max=t)`): equal to "
        "the shrink with the same rounding for every p and every t (a runtime or negative one too)",
    ),
    seen_from=("dynamo-optimized", "torchscript", "tf2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_min_residual,
)
RELU_DIFFERENCE = Form(
    FAMILY, "relu-difference",
    formula="relu(p - t) - relu(-p - t)",
    spellings=(
        "LISTA's soft threshold with a constant t >= 0 (for t < 0 it is 2p near 0); relu also as `max(., 0)`, "
        "`F.threshold` or `Clip(., 0)`, and `-p - t` also as `-(p + t)`",
        "`clamp(p - t, min=0) + clamp(p + t, max=0)`, since `min(e, 0) = -relu(-e)`; the second clamp as "
        "`Min(., 0)` or `Clip(., max=0)`",
        "both sides as `Clip` with a bound left out keep its largest finite cap as `shrink_max`; a `Clip` beside "
        "a `Max` is not fused",
    ),
    seen_from=("dynamo-optimized", "torchscript", "tf2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_relu_difference,
)
MASKED_SOFTSHRINK = Form(
    FAMILY, "masked-softshrink",
    formula="(p - t*sign(p)) * (|p| > t)",
    spellings=(
        "`(p - t*sign(p)) * Cast(|p| > t)` (or `>=`), a float mask: equal to the shrink for every p and t",
        "`sign(p) * (|p| - t) * Cast(|p| > t)`",
        "a shift by a constant that the comparison cannot tell apart from t in p's dtype is the threshold",
    ),
    seen_from=("dynamo-optimized", "torchscript", "tf2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_masked_softshrink,
)
ABS_MINUS_MIN = Form(
    FAMILY, "abs-minus-min",
    formula="sign(p) * (|p| - min(|p|, t))",
    spellings=(
        "the min also as `Clip(|p|, max=t)`: equal to the shrink with the same rounding for every p and every t; "
        "with `Sign` itself (a sign written as a select is +-1 at p = 0)",
    ),
    seen_from=("dynamo-optimized", "tf2onnx", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_abs_minus_capped_abs,
)
SIGN_TIMES_CLAMP = Form(
    FAMILY, "clamp",
    formula="sign(p) * max(|p| - t, 0)",
    spellings=(
        "`Max(|p| - t, 0)` (reported as `max`), also against a zeros tensor, `ConstantOfShape` or `Expand(0, "
        "Shape(p))` (zeros that would broadcast the update to a larger shape are refused), and `Clip(d, 0, inf)` "
        "(`torch.clamp(d, 0, inf)`: inf stays inf there, as in `Max`)",
        "`Relu(|p| - t)` (reported as `relu`)",
        "`Clip(|p| - t, min=0)` (reported as `clip`; the bound an attribute before opset 11, an input after) and "
        "the clamp capped at the dtype's largest value, `tf.clip_by_value(d, 0, float32.max)`: `Max(Min(d, M), "
        "0)` in either nesting or `Clip(d, 0, M)`; that is `Clip` without max, whose cap the fused node keeps "
        "as `shrink_max`",
        "`Where(d <= 0, 0, d)` or `Where(d < 0, 0, d)` (reported as `where`; `F.threshold(d, 0, 0)` from the "
        "dynamo exporter; NaN selects d there, as in `Max`)",
        "a float16/bfloat16 clamp run in float32 and cast back (reported as `max` for the capped one: the "
        "wider type's largest value rounds back to inf)",
        "`sign(p)` also as `where(p >= 0, 1, -1)` (or `> 0`, or `< 0` with the branches swapped) with a "
        "constant t >= 0, since it is +-1 at p = 0 where the clamp is 0 then",
    ),
    seen_from=("dynamo", "dynamo-optimized", "torchscript", "tf2onnx", "jax2onnx", "paddle2onnx",
               "onnxconverter-common float16", "hand-written"),
    fused_op=PROXIMAL_GD,
    matcher=_clamped_abs_minus_t,
    reported_as=("max", "relu", "clip", "where"),
)
# a factor of the update that computes the shrink whole, tried in this order before MASKED_SOFTSHRINK
WHOLE_FACTOR_FORMS = (SOFTSHRINK, NESTED_SOFTSHRINK, CLAMP_RESIDUAL, MIN_RESIDUAL, RELU_DIFFERENCE)
# a factor beside sign(p), tried in this order last
MAGNITUDE_FORMS = (ABS_MINUS_MIN, SIGN_TIMES_CLAMP)
FORMS = (*WHOLE_FACTOR_FORMS, MASKED_SOFTSHRINK, *MAGNITUDE_FORMS)

# where a shrink ends, a few scaling ops below an anchor (here: the accept tests come first)
_TWO_WHERE_SUM = Reach(_SUM_SHRINK_OPS, _TO_SUM_SHRINK, 2, _select_part)
_SELECT_SUM = Reach(_SUM_SHRINK_OPS, _TO_SUM_SHRINK, 3, _select_part)  # Add(Mul(Cast(c), a), Mul(b, Cast(Not(c))))
_RELU_SUM = Reach(frozenset({"Add"}), _TO_SHRINK, 4, _may_end_relu_sum)
_SHRINK_ENDS = (Reach(_SIGN_OPS, _TO_SHRINK, 4), Reach(_WHERE_OPS, _TO_SHRINK, 4, _may_be_softshrink),
                Reach(_WHERE_OPS, _TO_SHRINK, 4, _may_be_sign),
                Reach(_WHERE_OPS, _TO_SHRINK, 4, _may_be_nested_softshrink),
                Reach(_SUM_SHRINK_OPS, _TO_SUM_SHRINK, 4, _select_part),
                Reach(_SUB_SHRINK_OPS, _TO_SHRINK, 4, _may_end_sub_shrink), _RELU_SUM)
# Add for an unscaled relu(p - t) + min(p + t, 0) and so that TorchScript's two-Where softshrink
# without scaling (l2 = 0) is reported, Sub for an unscaled clamp residual or difference of ReLUs
PATTERN = Pattern(FAMILY, frozenset({"Mul", "Div", "Where", "Add", "Sub"}), match,
                  prefilter={"Add": (_SELECT_SUM, _RELU_SUM),
                             **dict.fromkeys(("Mul", "Div", "Where", "Sub"), _SHRINK_ENDS)},
                  forms=FORMS)
