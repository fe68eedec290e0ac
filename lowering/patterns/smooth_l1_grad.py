"""SmoothL1-loss backward:  grad = K * dout * (x/beta if |x| < beta else sign(x)),  x = predict - label.

K is norm * scale: 1/numel(predict) for mean (a constant equal to it, or Size/ReduceProd(Shape)
computed at runtime), 1 for sum/none, and Huber's delta where the graph is a Huber gradient. A
missing Div (beta = 1) or Mul (K = 1) is simply a coefficient of 1; operand order, grouping and
Cast wrappers come for free from the algebraic views. The forms are the records in FORMS, tried in
that order: the select forms at a Where or a sum, the product forms at a Mul or Div.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx

from contracts.fused_ops import SMOOTH_L1_GRAD

from ..algebra import MAX_WALK, Algebra, Comparison, Monomial, Reach, Select, clip_bounds, product, sum_like
from ..graph import GraphIndex, Node, attr
from .base import (
    Match,
    NoMatch,
    Pattern,
    absorb_casts,
    broadcasts_to,
    cap_of_nonnegative,
    close,
    fill,
    fill_value,
    float_dtype,
    is_single_element,
    named_apart,
    named_apart_caveat,
    refuse_float32_finish,
    refuse_rounded_abs,
    require,
    require_float,
    same_shape,
    shape_text,
    shapes_differ,
    single_factor,
    zero_branch,
)
from .forms import Form, first_found

FAMILY = "smooth_l1_grad"
# what a fusion's report can note, where the unfused graph and the kernel differ on purpose
HALF_SIGN_CAVEAT = "native float16: onnxruntime's float16 Sign maps NaN to 0, the kernel keeps NaN"
BROADCAST_CAVEAT = "{role} ({shape}) broadcasts to predict's shape in the kernel (the fused node reads it as it is)"
# relative rounding of a constant stored in each compute dtype
_EPS: dict[int, float] = {onnx.TensorProto.FLOAT: 2.0**-23, onnx.TensorProto.FLOAT16: 2.0**-10,
                          onnx.TensorProto.BFLOAT16: 2.0**-7}


_PRODUCT_OPS = frozenset({"Mul", "Div", "Neg", "Reciprocal"})
_CLAMP_OPS = frozenset({"Clip", "Min", "Max"})  # the outer op of clamp(y, -c, c) as exporters write it
_BOUND_SIGN = {"Min": 1.0, "Max": -1.0}  # clamp(y, -c, c) = Min(y, c) and Max(y, -c), c > 0
# an arithmetic select: a Cast mask, up to five products and sums below the result (a Keras loss's
# gradient masks each branch's upstream gradient before it scales the branch; a mask written by
# hand scales a branch that is then divided by beta, or is taken as 1 - mask)
_MASK_OPS, _TO_MASK = frozenset({"Cast"}), frozenset({"Add", "Mul", "Sum", "Div", "Sub"})
# autograd of a loss with a torch.where: Wheres against 0 and the sums and products below them
_WHERE_OPS = frozenset({"Where"})
# tf.compat.v1.losses.huber_loss: Min(|x|, delta) and the sums and products down to its gradient
_MIN_OPS, _TO_MIN = frozenset({"Min"}), frozenset({"Add", "Sum", "Mul", "Div", "Neg"})


def match(alg: Algebra, anchor: int) -> Match | None:
    node = alg.index.nodes[anchor]
    out = node.output[0]
    if node.op_type in ("Mul", "Div"):
        return first_found(PRODUCT_FORMS, alg, out)
    if node.op_type == "Where" and not _compares_x_or_abs_x(alg, node.input[0]):
        return None
    if node.op_type in ("Add", "Sum") and out not in alg.reached(_SELECT_SUM_ENDS):
        return None
    sel = alg.select(out)
    cmp = None if sel is None else alg.compare(sel.cond)
    if sel is None or cmp is None:
        return None
    return first_found(SELECT_FORMS, alg, out, sel, cmp)


def _compares_x_or_abs_x(alg: Algebra, cond: str) -> bool:
    """Whether cond compares |x| or a difference x (every select form does); NoMatch for |x|
    rounded to float16 and back (base.refuse_rounded_abs)."""
    cmp = alg.compare(cond)
    lhs = None if cmp is None else alg.widened(cmp.lhs)
    if lhs is None or (alg.unary(lhs, "Abs") is None and alg.producer(lhs, "Sub") is None):
        if cmp is not None:
            refuse_rounded_abs(alg, cmp.lhs)
        return False
    return True


def _select_on_abs_x(alg: Algebra, out: str, sel: Select, cmp: Comparison) -> Match | None:
    """select(|x| < beta, K/beta * x * dout, K * sign(x) * dout), grown over the products that
    scale it afterwards where the select itself lacks sign(x) or dout."""
    if alg.unary(alg.widened(cmp.lhs), "Abs") is None:
        return None
    found = _match_abs_select(alg, out, sel, cmp)
    if found is None:  # the sign(x) (or dout) may come in by the products that follow
        return _with_outer_scaling(alg, out, sel, cmp)
    if found.output == out and not isinstance(found.inputs[2], str):
        try:
            return _with_outer_scaling(alg, out, sel, cmp) or found
        except NoMatch:  # the products that follow do not join it: the select alone is fused
            return found
    return found


def _with_outer_scaling(alg: Algebra, out: str, sel: Select, cmp: Comparison) -> Match | None:
    """The match grown over the products that scale a select without dout afterwards
    (tf.where(|x| < beta, x/beta, sign(x)) * dout / n): they follow the select, one consumer
    after the other, and join both branches. None when there are none or they do not scale the
    select; NoMatch when the grown form is refused (its reason is the near-match's)."""
    index = alg.index
    top = out
    for _ in range(MAX_WALK):  # the product view walks no further either
        users = index.consumers.get(top, ())
        if top in index.graph_outputs or len(users) != 1 or users[0] in alg.taken:
            break
        node = index.nodes[users[0]]
        if node.op_type not in ("Mul", "Div") or node.domain not in ("", "ai.onnx"):
            break
        top = node.output[0]
    if top == out:
        return None
    mono = alg.monomial(top)
    scale = mono.without(out)
    if scale is None:
        return None
    scaled = Select(sel.cond, product(scale, sel.when_true), product(scale, sel.when_false),
                    sel.nodes | mono.nodes, sel.arithmetic)
    return _match_abs_select(alg, top, scaled, cmp)


def _abs_times_sign(alg: Algebra, mono: Monomial, x: str) -> Monomial:
    """mono with |x| * sign(x) read as x, which it is for every x, NaN and inf included: the
    chain rule through |x| (autograd of 0.5*|x|**2/beta) leaves that product."""
    sign = _sign_factor(alg, mono, x)
    magnitude = next((f for f, e in mono.factors.items() if e == 1 and (alg.unary(f, "Abs") or ("",))[0] == x), None)
    if sign is None or magnitude is None:
        return mono
    rest = mono.dividing_out(sign[0]).dividing_out(magnitude)  # both of exponent 1
    rest.factors[x] = rest.factors.get(x, 0) + 1
    rest.nodes |= sign[1]
    return rest


def _sign_factor(alg: Algebra, mono: Monomial, x: str) -> tuple[str, set[int]] | None:
    for name, exp in mono.factors.items():
        found = alg.unary_narrowed(name, "Sign") if exp == 1 else None
        if found is not None and found[0] == x:
            return name, found[1]
    return None


def _match_abs_select(alg: Algebra, out: str, sel: Select, cmp: Comparison) -> Match | None:
    """sel = select(|x| < beta, inside, outside) with inside = K/beta * x * dout and outside =
    K * sign(x) * dout, the comparison in any direction."""
    absx = alg.unary(alg.widened(cmp.lhs), "Abs")
    if absx is None:  # the caller compares |x|
        return None
    x, abs_node = absx
    below = cmp.relation in ("<", "<=")
    inside, outside = (sel.when_true, sel.when_false) if below else (sel.when_false, sel.when_true)
    alg.expand_shared([inside, outside], sel.nodes | cmp.nodes, stop=frozenset({x}))
    inside = _abs_times_sign(alg, inside, x)
    sign = _sign_factor(alg, outside, x)
    if sign is None:
        # a float32 tail on a float16 x: the branch holds Cast<float32>(sign(x)), not sign(x)
        for f in outside.factors:
            widened = alg.widened(f)
            if widened != f and (found := alg.unary_narrowed(widened, "Sign")) is not None and found[0] == x:
                refuse_float32_finish(alg, x, "x = predict - label")
        return None
    form = "arithmetic-select" if sel.arithmetic else "where"
    beta = _threshold(alg, cmp, sel.arithmetic)
    rest = outside.dividing_out(sign[0])  # a factor of exponent 1 (_sign_factor)
    within = inside.without(x)
    if within is None:
        raise NoMatch("the |x| < beta branch is not proportional to x")
    if within.factors != rest.factors:  # tf-faster-rcnn: each branch scaled by its own full constant
        within, rest = _fold_uniform(alg, within, x), _fold_uniform(alg, rest, x)
    require(within.factors == rest.factors, "the two branches scale by different values (" + ", ".join(
        " * ".join(sorted(m.factors)) or "constant" for m in (within, rest)) + ")")
    if beta > 0:
        require(_same_scale(alg, x, within.coef, rest.coef / beta),
                f"the |x| < beta branch scales x by {within.coef:g}, not by K/beta = {rest.coef / beta:g}")
    nodes = sel.nodes | cmp.nodes | {abs_node} | sign[1] | inside.nodes | outside.nodes | alg.widening_casts(cmp.lhs)
    return _finish(alg, f"{FAMILY}/{form}", out, x, rest, beta, nodes)


def _threshold(alg: Algebra, cmp: Comparison, arithmetic: bool) -> float:
    """The beta |x| is compared with: a constant >= 0 (NoMatch otherwise). beta = 0 is refused
    where the select would give NaN at x = 0 or for an inf x: the x/beta branch taken at |x| ==
    beta divides 0 by 0, and an arithmetic select multiplies the inf branch by its 0 mask."""
    beta = alg.scalar(cmp.rhs)
    if beta is None:
        overridable = alg.index.is_overridable_initializer(cmp.rhs)
        raise NoMatch("beta is an initializer that is also a graph input (the user may override it)"
                      if overridable else "beta (the threshold |x| is compared with) is not a constant")
    require(beta >= 0, f"beta = {beta:g} is negative")
    inclusive = cmp.relation in ("<=", ">")  # the x/beta branch is taken at |x| == beta
    if beta == 0:
        require(not inclusive, "with beta = 0 the graph divides 0 by 0 at x == 0 (NaN), unlike sign(x)")
        require(not arithmetic, "with beta = 0 the arithmetic select multiplies the inf branch by 0 (NaN)")
    return beta


def _same_scale(alg: Algebra, x: str, branch: float, expected: float) -> bool:
    """The x branch's scale equals K/beta up to one rounding in x's dtype: a graph computing in
    float16 or bfloat16 divides by beta rounded to that dtype while it compares with the float32
    beta (seen: Less(Cast<float32>(|x|), 0.3) beside Div(x, 0.30005) in float16), a difference
    below the precision standard's threshold for that dtype."""
    dtype = float_dtype(alg.index, x)
    eps = 0.0 if dtype is None else _EPS.get(dtype, 0.0)
    return close(branch, expected, max(1e-5, eps / 2))


def _side(alg: Algebra, cmp: Comparison) -> tuple[str, float] | None:
    """('low', b) for x < -b and ('high', b) for x > b, with b a constant."""
    b = alg.scalar(cmp.rhs)
    if b is None:
        return None
    return ("low", -b) if cmp.relation in ("<", "<=") else ("high", b)


def _nested_select_on_x(alg: Algebra, out: str, sel: Select, cmp: Comparison) -> Match | None:
    """select(x < -beta, -K*dout, select(x > beta, K*dout, K/beta * x * dout)), either side
    outermost: the Huber gradient as two selects on x itself."""
    x = alg.widened(cmp.lhs)
    if alg.unary(x, "Abs") is not None:  # a select on |x|: _select_on_abs_x
        return None
    outer = _side(alg, cmp)
    inner_value = single_factor(sel.when_false)
    if outer is None or inner_value is None:
        return None
    inner_sel = alg.select(inner_value)
    inner_cmp = None if inner_sel is None else alg.compare(inner_sel.cond)
    if inner_sel is None or inner_cmp is None or alg.widened(inner_cmp.lhs) != x or alg.producer(x, "Sub") is None:
        return None
    inner = _side(alg, inner_cmp)
    if inner is None or inner[0] == outer[0]:
        return None
    form = f"{FAMILY}/nested-{'arithmetic-select' if sel.arithmetic or inner_sel.arithmetic else 'where'}"
    beta = outer[1]
    require(close(beta, inner[1]) and beta > 0,
            f"the two thresholds {outer[1]:g} and {inner[1]:g} are not +-beta with beta > 0")
    low, high = (sel.when_true, inner_sel.when_true) if outer[0] == "low" else (inner_sel.when_true, sel.when_true)
    alg.expand_shared([low, high, inner_sel.when_false], sel.nodes | inner_sel.nodes | cmp.nodes | inner_cmp.nodes,
                      stop=frozenset({x}))
    middle = inner_sel.when_false.without(x)
    if middle is None:
        raise NoMatch("the middle branch is not proportional to x")
    low, high = _uniform_as(alg, low, middle, x), _uniform_as(alg, high, middle, x)
    require(low.factors == high.factors == middle.factors,
            "the three branches scale by different values (" + ", ".join(
                " * ".join(sorted(m.factors)) or "constant" for m in (low, middle, high)) + ")")
    require(close(low.coef, -high.coef), "the x < -beta branch is not the negated x > beta branch")
    require(_same_scale(alg, x, middle.coef, high.coef / beta),
            f"the middle branch scales x by {middle.coef:g}, not by K/beta = {high.coef / beta:g}")
    nodes = (sel.nodes | inner_sel.nodes | cmp.nodes | inner_cmp.nodes | low.nodes | high.nodes
             | inner_sel.when_false.nodes | alg.widening_casts(cmp.lhs) | alg.widening_casts(inner_cmp.lhs))
    rest = Monomial(high.coef, high.factors, high.nodes)
    return _finish(alg, form, out, x, rest, beta, nodes)


def _uniform_as(alg: Algebra, mono: Monomial, ref: Monomial, x: str) -> Monomial:
    """mono written in ref's factor when both are one constant tensor of one shape and type, each
    holding one number everywhere: the dynamo optimizer folds delta * ones_like(x) of a Huber
    gradient into full tensors of +-delta beside the ones its middle branch multiplies by. When
    ref has no factor at all (onnxsim and onnxoptimizer drop that x * ones), mono's one number
    joins its coefficient, as long as the tensor does not broadcast x to a larger shape."""
    if mono.factors == ref.factors or len(mono.factors) != 1:
        return mono
    (name, exp), = mono.factors.items()
    if not ref.factors:
        value = _uniform_value(alg, name, x) if exp == 1 else None
        return mono if value is None else Monomial(mono.coef * value, {}, set(mono.nodes))
    if len(ref.factors) != 1:
        return mono
    (ref_name, ref_exp), = ref.factors.items()
    c, r = alg.index.const(name), alg.index.const(ref_name)
    if (exp != 1 or ref_exp != 1 or c is None or r is None or c.shape != r.shape or c.dtype != r.dtype
            or not c.size or not (c == c.flat[0]).all() or not (r == r.flat[0]).all() or r.flat[0] == 0):
        return mono
    return Monomial(mono.coef * float(c.flat[0]) / float(r.flat[0]), {ref_name: 1}, set(mono.nodes))


def _may_end_symmetric_clamp(index: GraphIndex, node: Node) -> bool:
    """Clip, Min with a positive constant or Max with a negative one: where clamp(y, -c, c) can end
    (most Max nodes of a training graph are ReLU-like clamps at 0, which the pre-check need not
    follow)."""
    if node.op_type == "Clip":
        return True
    if len(node.input) != 2:
        return False
    # ones_like(x) from the dynamo exporter: a full tensor of ones, or Expand(1, Shape(x)) unoptimized
    value, fill_node = _uniform_constant(index, node.input[1]), index.node_of(node.input[1])
    if fill_node is not None and fill_node.op_type in ("Expand", "ConstantOfShape"):
        repeated = fill_value(index, fill_node)
        value = None if repeated is None else float(repeated.reshape(-1)[0])
    return value is not None and value * _BOUND_SIGN[node.op_type] > 0


def _symmetric_clamp(alg: Algebra, value: str) -> tuple[str, float, set[int]] | None:
    """(y, c, nodes) when value = clamp(y, -c, c) with a constant c > 0 (Algebra.clamp)."""
    found = alg.clamp(value)
    if found is None:
        return None
    y, lo, hi, nodes = found
    lo, hi = alg.bound_value(lo), alg.bound_value(hi)
    return (y, hi, nodes) if hi is not None and hi > 0 and lo == -hi else None


def _clamped_ratio(alg: Algebra, out: str) -> Match | None:
    """out = K * dout * clamp(s*x, -c, c), which is K*c * dout * clamp(x/beta, -1, 1) with beta =
    c/s: the SmoothL1 gradient as clamp(x/beta, -1, 1), and the Huber gradient as clamp(x, -delta,
    delta)."""
    if not alg.reaches(out, _CLAMP_END):
        return None
    mono = alg.monomial(out)
    for name, exp in mono.factors.items():
        found = _symmetric_clamp(alg, name) if exp == 1 else None
        if found is None:
            continue
        clamped, bound, clamp_nodes = found
        inner = alg.monomial(clamped)
        xs = [v for v, e in inner.factors.items() if e == 1 and alg.producer(v, "Sub") is not None]
        if len(inner.factors) != 1 or not xs:
            continue
        x = xs[0]
        require(inner.coef > 0, "Clip's argument is x times a non-positive constant")
        beta = bound / inner.coef
        rest = mono.dividing_out(name)  # a factor of exponent 1
        rest.coef *= bound
        return _finish(alg, f"{FAMILY}/clip", out, x, rest, beta, mono.nodes | inner.nodes | clamp_nodes)
    return None


def _sign_times_capped_ratio(alg: Algebra, out: str) -> Match | None:
    """out = K * dout * sign(x) * min(|x|/beta, 1): the gradient's magnitude capped at 1. It is
    x/beta inside (|x|/beta*sign(x) is x/beta exactly) and sign(x) outside, inf and NaN included
    (Min keeps NaN); beta must be a constant > 0, since with beta = 0 it is 0/0 = NaN at x = 0."""
    if not alg.reaches(out, _CLAMP_END):
        return None
    mono = alg.monomial(out)
    for name, exp in mono.factors.items():
        found = alg.producer(name, "Min", "Clip", "Cast") if exp == 1 else None
        cast = None
        if found is not None and found[1].op_type == "Cast":  # min in float32, cast back (the 1 is exact)
            cast, found = found, alg.producer(found[1].input[0], "Min", "Clip")
        one = None if found is None else _capped_at_one(alg, found[1])
        if found is None or one is None:
            continue
        capped, casts = found[1].input[0], set()
        if cast is not None:
            narrow = alg.narrowed(capped, attr(cast[1], "to"))
            if narrow is None:
                continue
            capped, casts = narrow[0], narrow[1] | {cast[0]}
        ratio = alg.monomial(capped)
        abs_x = alg.unary(next(iter(ratio.factors)), "Abs") if list(ratio.factors.values()) == [1] else None
        if abs_x is None:
            continue
        rest = mono.dividing_out(name)  # a factor of exponent 1
        sign = _sign_factor(alg, rest, abs_x[0])
        if sign is None:
            continue
        require(ratio.coef > 0 and np.isfinite(ratio.coef),
                f"min(|x| * {ratio.coef:g}, 1) caps x at a non-positive beta")
        nodes = mono.nodes | ratio.nodes | sign[1] | one[1] | casts | {found[0], abs_x[1]}
        return _finish(alg, f"{FAMILY}/capped-ratio", out, abs_x[0], rest.dividing_out(sign[0]), 1.0 / ratio.coef,
                       nodes)
    return None


def _capped_at_one(alg: Algebra, node: Node) -> tuple[float, set[int]] | None:
    """(1.0, nodes of the 1) when node is Min(r, 1) (the 1 possibly a full tensor of ones) or
    Clip(r, lo, 1) (torch.clamp(r, max=1)) with lo left out or a constant <= 0: r = |x|/beta is
    never below 0, and onnxruntime's Clip keeps NaN as its Min does."""
    if node.op_type == "Min":
        one = fill(alg, node.input[1], like=node.input[0]) if len(node.input) == 2 else None
        return one if one is not None and one[0] == 1.0 else None
    hi = cap_of_nonnegative(alg, node)
    return (1.0, set()) if hi is not None and alg.bound_value(hi) == 1.0 else None


def _floors_abs(index: GraphIndex, node: Node) -> bool:
    """Max(|x|, c) or Clip(|x|, min=c) with a constant c: where x / max(|x|, beta) can start."""
    producer = index.node_of(node.input[0]) if node.input else None
    if producer is None or producer.op_type != "Abs":
        return False
    bound = node.input[1] if len(node.input) > 1 else None
    return bound is not None and index.scalar(bound) is not None


def _x_over_floored_abs(alg: Algebra, out: str) -> Match | None:
    """out = K * dout * x / max(|x|, beta): x/beta where |x| < beta and x/|x| = sign(x) elsewhere,
    exactly, for a constant beta > 0 (torch.clamp(|x|, min=beta) as Clip too). NaN stays NaN; an
    inf x gives inf/inf = NaN in the graph where the kernel gives +-1 (the report's caveat)."""
    if not alg.reaches(out, _FLOORED_ABS):
        return None
    mono = alg.monomial(out)
    for name, exp in mono.factors.items():
        found = alg.producer(name, "Max", "Clip") if exp == -1 else None
        if found is None or len(found[1].input) < 2:
            continue
        i, node = found
        if node.op_type == "Clip":
            lo, hi = clip_bounds(node)
            if hi is not None:
                continue
            beta = alg.bound_value(lo)
        elif len(node.input) == 2:
            beta = alg.scalar(node.input[1])
        else:
            continue
        absx = alg.unary(node.input[0], "Abs")
        if absx is None or beta is None or mono.factors.get(absx[0]) != 1:
            continue
        x = absx[0]
        require(beta > 0, f"x / max(|x|, {beta:g}) with beta <= 0 is 0/0 = NaN at x = 0, unlike the gradient")
        rest = mono.dividing_out(name).dividing_out(x)  # exponents -1 and 1
        return _finish(alg, f"{FAMILY}/over-floored-abs", out, x, rest, beta, mono.nodes | {i, absx[1]})
    return None


def _selects_against_zero(index: GraphIndex, node: Node) -> bool:
    """Where(c, A, 0) or Where(c, 0, B): one branch of a loss's gradient (Algebra._select_sum)."""
    return len(node.input) == 3 and any(index.may_be_const(v) and index.scalar(v) == 0.0 for v in node.input[1:])


def _caps_abs(index: GraphIndex, node: Node) -> bool:
    """Min(|x|, constant): where tf.compat.v1.losses.huber_loss's gradient starts."""
    producer = index.node_of(node.input[0]) if len(node.input) == 2 else None
    return producer is not None and producer.op_type == "Abs" and index.scalar(node.input[1]) is not None


def _huber_loss_v1_gradient(alg: Algebra, out: str) -> Match | None:
    """The gradient of tf.compat.v1.losses.huber_loss, 0.5*q^2 + delta*(|x| - q), q = min(|x|, delta):
        sign(x) * (w + select(|x| <= delta, n*c*min(|x|, delta) - w, 0))
    which is w*sign(x) outside and n*c*|x|*sign(x) = n*c*x inside, a SmoothL1 gradient with beta =
    delta when n*c = w/delta. Exact everywhere: the Min keeps the branch not taken finite, and NaN
    in x gives NaN through the select's 0 mask."""
    if not alg.reaches(out, _HUBER_MIN):
        return None
    mono = alg.monomial(out)
    for name, exp in mono.factors.items():
        sign = alg.unary_narrowed(name, "Sign") if exp == 1 else None
        if sign is None:
            continue
        rest = mono.dividing_out(name)  # a factor of exponent 1
        if len(rest.factors) != 1 or list(rest.factors.values()) != [1]:
            continue
        x = sign[0]
        total = next(iter(rest.factors))
        shifted = _constant_plus(alg, total, x)  # w + select(...)
        if shifted is None or len(shifted.addends) != 1:
            _refuse_huber_v1_lookalike(alg, total, x)
            continue
        w = shifted.constant
        inside = _capped_inside(alg, shifted.addends[0], x)
        if inside is None:
            continue
        require(inside.delta > 0, f"huber_loss with delta = {inside.delta:g}")
        require(close(inside.constant, -w), "the gradient's constant terms do not cancel inside |x| <= delta")
        require(_same_scale(alg, x, inside.scale, w / inside.delta),
                f"the |x| <= delta branch scales x by {inside.scale:g}, not by w/delta = {w / inside.delta:g}")
        nodes = mono.nodes | sign[1] | shifted.nodes | inside.nodes
        return _finish(alg, f"{FAMILY}/capped", out, x, Monomial(rest.coef * w, {}, set()), inside.delta, nodes)
    return None


class CappedInside(NamedTuple):
    """select(|x| <= delta, scale*min(|x|, delta) + constant, 0): the inside of huber_loss's gradient."""

    delta: float
    scale: float
    constant: float
    nodes: set[int]


def _capped_inside(alg: Algebra, value: str, x: str) -> CappedInside | None:
    """value = select(|x| <= delta, n*c*min(|x|, delta) - w, 0) with a constant delta, the min also
    floored at 0 (tf.clip_by_value(|x|, 0, delta)) and guarded by its select on min >= 0."""
    sel = alg.select(value)
    if sel is None or zero_branch(alg, sel.when_false) is None or sel.when_true.coef != 1.0 \
            or len(sel.when_true.factors) != 1:
        return None
    branch, guard_nodes = _unguarded(alg, next(iter(sel.when_true.factors)), x)
    inner = _constant_plus(alg, branch, x)  # cap - w
    cap = None if inner is None else _like_terms_sum(alg, inner.addends, x)  # n * c * Min(|x|, delta)
    cmp = alg.compare(sel.cond)
    if inner is None or cap is None or cmp is None or cmp.relation not in ("<", "<="):
        return None
    floored = _floored_at_zero(alg, next(iter(cap.factors))) if len(cap.factors) == 1 else None
    if floored is not None:  # tf.clip_by_value(|x|, 0, delta): Max(Min(|x|, delta), 0)
        cap = Monomial(cap.coef, {floored[0]: 1}, cap.nodes | floored[1])
    capped = alg.producer(next(iter(cap.factors)), "Min") if len(cap.factors) == 1 else None
    abs_x = None if capped is None else alg.unary(capped[1].input[0], "Abs")
    if capped is None or abs_x is None or abs_x[0] != x:
        return None
    delta = alg.scalar(capped[1].input[1])
    if delta is None or cmp.lhs != capped[1].input[0] or alg.scalar(cmp.rhs) != delta:
        return None
    nodes = (sel.nodes | sel.when_true.nodes | inner.nodes | guard_nodes | cap.nodes | cmp.nodes
             | {capped[0], abs_x[1]})
    return CappedInside(delta, cap.coef, inner.constant, nodes)


def _refuse_huber_v1_lookalike(alg: Algebra, total: str, x: str) -> None:
    """NoMatch for sign(x) * (a + b) where a or b is a select but the sum is not w + select with
    a constant w: a weighted huber_loss, or two selects that overlap at |x| == delta."""
    added = alg.producer(total, "Add", "Sum")
    selects = [] if added is None or len(added[1].input) != 2 else [alg.select(v) for v in added[1].input]
    found = [sel for sel in selects if sel is not None]
    if len(found) == 1:
        raise NoMatch("sign(x) * (w + select(|x| <= delta, ...)) with w not a constant: the gradient of "
                      "tf.compat.v1.losses.huber_loss is read with a constant weight only (a runtime "
                      "weights tensor or output_gradients scales it here)")
    if len(found) == 2:
        _refuse_overlapping_sides(alg, found, x)


def _abs_threshold(alg: Algebra, cond: str, x: str) -> tuple[str, float] | None:
    """(relation, c) when cond compares |x| with a constant c, also as |x| - c against 0."""
    cmp = alg.compare(cond)
    if cmp is None:
        return None
    c = alg.scalar(cmp.rhs)
    absx = alg.unary(cmp.lhs, "Abs")
    if absx is not None and absx[0] == x and c is not None:
        return cmp.relation, c
    terms = alg.terms(cmp.lhs)[0] if c == 0.0 else []
    if len(terms) == 2 and terms[0][0] == 1 and terms[1][0] == -1:
        absx, shift = alg.unary(terms[0][1], "Abs"), alg.scalar(terms[1][1])
        if absx is not None and absx[0] == x and shift is not None:
            return cmp.relation, shift
    return None


def _refuse_overlapping_sides(alg: Algebra, selects: list[Select], x: str) -> None:
    """NoMatch for sign(x) * (select(|x| >= c, A, 0) + select(|x| <= c, B, 0)): the gradient of
    0.5*min(|x|, c)**2/c + max(|x| - c, 0) as TensorFlow differentiates it. Both masks hold at
    |x| == c, where the gradient is A + B, twice the SmoothL1 gradient there."""
    found = [_abs_threshold(alg, sel.cond, x) for sel in selects]
    sides = [side for side in found if side is not None]
    if len(sides) != len(found) or len({c for _, c in sides}) != 1 or {rel for rel, _ in sides} != {">=", "<="}:
        return
    raise NoMatch(f"two selects, on |x| >= {sides[0][1]:g} and on |x| <= {sides[0][1]:g}, both hold at |x| == "
                  f"{sides[0][1]:g}, where the gradient adds both branches: not a SmoothL1 gradient there")


def _floored_at_zero(alg: Algebra, value: str) -> tuple[str, set[int]] | None:
    """(v, nodes) when value = max(v, 0) with v = min(|x|, c), never below 0: the lower clamp of
    tf.clip_by_value(|x|, 0, c), which changes nothing (NaN stays NaN in onnxruntime's Max)."""
    found = alg.producer(value, "Max")
    if found is None or len(found[1].input) != 2:
        return None
    v, zero = found[1].input
    inner = alg.producer(v, "Min")
    if inner is None or alg.scalar(zero) != 0.0 or alg.unary(inner[1].input[0], "Abs") is None:
        return None
    return v, {found[0]}


def _unguarded(alg: Algebra, value: str, x: str) -> tuple[str, set[int]]:
    """(v, nodes) when value = select(m >= 0, v, 0) with m = max(min(|x|, c), 0) or min(|x|, c):
    the gradient of tf.clip_by_value's lower bound, which holds for every x but NaN (and for a NaN x
    the gradient is NaN through sign(x) anyway); else (value, no nodes)."""
    sel = alg.select(value)
    cmp = None if sel is None else alg.compare(sel.cond)
    if (sel is None or cmp is None or cmp.relation != ">=" or alg.scalar(cmp.rhs) != 0.0
            or zero_branch(alg, sel.when_false) is None or sel.when_true.coef != 1.0
            or len(sel.when_true.factors) != 1):
        return value, set()
    floored = _floored_at_zero(alg, cmp.lhs)
    guarded = floored[0] if floored is not None else cmp.lhs
    capped = alg.producer(guarded, "Min")
    absx = None if capped is None else alg.unary(capped[1].input[0], "Abs")
    cap = None if capped is None or len(capped[1].input) != 2 else alg.scalar(capped[1].input[1])
    # min(|x|, c) >= 0 holds for every x only for c >= 0 (max(., 0) >= 0 always)
    if absx is None or absx[0] != x or (floored is None and (cap is None or cap < 0)):
        return value, set()
    return next(iter(sel.when_true.factors)), sel.nodes | cmp.nodes | sel.when_false.nodes


def _uniform_constant(index: GraphIndex, name: str) -> float | None:
    """The value of a constant that holds one value everywhere (tf2onnx writes scalars broadcast
    to full shape, the dynamo exporter ones_like as a full tensor)."""
    c = index.const(name)
    if c is None or c.size == 0:
        return None
    flat = c.reshape(-1)
    return float(flat[0]) if (flat == flat[0]).all() else None


def _uniform_value(alg: Algebra, name: str, like: str) -> float | None:
    """A constant's one value, when broadcasting it leaves `like`'s shape as it is (a constant's
    only: the callers fold it into a coefficient and take no nodes along)."""
    found = fill(alg, name, like) if alg.index.const(name) is not None else None
    return None if found is None else found[0]


def _fold_uniform(alg: Algebra, mono: Monomial, like: str) -> Monomial:
    """mono with its uniform constant factors (_uniform_value) folded into the coefficient."""
    coef, factors = mono.coef, dict(mono.factors)
    for name, exp in mono.factors.items():
        value = _uniform_value(alg, name, like)
        if value is not None and value != 0.0:
            coef *= value ** exp
            del factors[name]
    return Monomial(coef, factors, mono.nodes)


class ConstantPlus(NamedTuple):
    """w + v1 + ... + vn: a uniform constant w and the other addends."""

    constant: float
    addends: list[str]
    nodes: set[int]


def _constant_plus(alg: Algebra, value: str, like: str) -> ConstantPlus | None:
    """value = Add/Sum(w, v1, ..., vn) with one uniform constant w that leaves `like`'s shape as it
    is, and n >= 1."""
    found = alg.producer(value, "Add", "Sum")
    if found is None:
        return None
    i, node = found
    consts = [v for v in node.input if alg.index.const(v) is not None]
    others = [v for v in node.input if v not in consts]
    w = _uniform_value(alg, consts[0], like) if len(consts) == 1 and others else None
    return None if w is None else ConstantPlus(w, others, {i})


def _like_terms_sum(alg: Algebra, addends: list[str], like: str) -> Monomial | None:
    """The addends' product views (uniform constants folded) added up, all with the same runtime
    factors: TensorFlow's gradient of q*q sums one term per operand, the same value twice or two
    products that grappler wrote apart."""
    return sum_like([_fold_uniform(alg, alg.monomial(v), like) for v in addends])


def _finish(alg: Algebra, form: str, out: str, x: str, scale: Monomial, beta: float,
            nodes: set[int]) -> Match:
    """Common tail: split K * dout [/ numel], check dtypes and shapes, absorb Cast wrappers."""
    index = alg.index
    sub = alg.producer(x, "Sub")
    if sub is None or len(sub[1].input) != 2:
        raise NoMatch("x is not predict - label")
    predict, label = sub[1].input
    # a label of another shape broadcasts to predict's: the kernel reads it as it is (a broadcast
    # load), and x - and so the gradient - has predict's shape either way
    label_broadcasts = not same_shape(index, predict, label)
    # dims an exporter named apart (unk__58 against unk__59): the rewrite expands each to the
    # other's shape, so the fused node reads both at the shape of the graph's own broadcast
    apart = label_broadcasts and not broadcasts_to(index, label, predict) and named_apart(index, predict, label)
    require(not label_broadcasts or apart or broadcasts_to(index, label, predict),
            shapes_differ(index, predict, label, "predict and label")
            + "; only a label that broadcasts to predict's shape is taken")
    boundary: set[int] = set()
    mean_at_runtime = False
    runtime: dict[str, int] = {}
    for name, exp in scale.factors.items():
        numel = alg.numel_of(name) if exp == -1 else None
        # with predict and label expanded, a count the graph divides by need not be the expanded
        # predict's (a predict that broadcast against label has fewer elements): it stays a
        # runtime value the graph computes, and dout is the quotient the graph computes with it
        if numel is not None and not apart and (numel[0] in (predict, x) or (numel[0] == label and not label_broadcasts)
                                                or same_shape(index, numel[0], predict)):
            require(not mean_at_runtime, "the gradient is divided by numel(predict) twice")
            mean_at_runtime = True
            if numel[0] == x:  # numel of the matched x (d.numel()): its Shape goes with x
                nodes = nodes | numel[1]
            else:
                boundary |= numel[1]
        else:
            runtime[name] = exp
    k = scale.coef
    douts = [name for name, exp in runtime.items() if exp == 1]
    if len(runtime) > 1 or any(exp != 1 for exp in runtime.values()):
        # dout computed upstream (a product or quotient the walk spilled into the match)
        grouped = alg.regroup(Monomial(1.0, {}, nodes), runtime, stop=frozenset({x}))
        if grouped is None:
            raise NoMatch("the gradient is scaled by runtime values other than dout and numel "
                          f"({', '.join(f'{n}^{e}' for n, e in sorted(runtime.items()))})")
        douts = [grouped[0]]
        nodes = nodes - grouped[1]
        k /= grouped[2]
    dtype = require_float(index, predict, "predict")
    require(require_float(index, label, "label") == dtype, "predict and label have different dtypes")
    dout: str | np.ndarray
    if douts:
        dout = douts[0]
        require(require_float(index, dout, "dout") == dtype, "dout's dtype differs from predict's")
        require(is_single_element(index, dout) or broadcasts_to(index, dout, predict),
                "dout's shape does not broadcast to predict's (the gradient of predict has predict's shape)")
    else:
        one_type = onnx.helper.tensor_dtype_to_np_dtype(dtype) if dtype != onnx.TensorProto.BFLOAT16 else np.float32
        dout = np.array(1.0, one_type)
    single = not douts or is_single_element(index, douts[0])
    # predict's declared count is not the expanded predict's when the two are named apart ([1, 4]
    # against [n, 4]): a constant 1/4 is then a scale, not the mean the kernel takes over n * 4
    count = None if apart else index.numel(predict)
    reduction, factor = split_reduction(count, k, mean_at_runtime, beta, single, _EPS[dtype])
    interior = nodes | {sub[0]}
    inputs: list = [predict, label, dout]
    wrapped = absorb_casts(alg, out, [predict, label] + ([dout] if isinstance(dout, str) else []))
    if wrapped is not None:
        out, sources, out_cast, in_casts, target = wrapped
        inputs = sources + ([] if isinstance(dout, str) else [_const_like(dout, target)])
        interior |= out_cast
        boundary |= in_casts
    elif dtype != onnx.TensorProto.FLOAT and not isinstance(dout, str):
        inputs[2] = _const_like(dout, dtype)
    caveats = []
    if any(index.nodes[i].op_type == "Sign" and index.elem_type(index.nodes[i].input[0]) == onnx.TensorProto.FLOAT16
           for i in interior):
        caveats.append(HALF_SIGN_CAVEAT)
    caveats += broadcast_caveats(index, predict, label, douts[0] if douts else None, apart)
    return Match(form, SMOOTH_L1_GRAD, out, target if wrapped is not None else dtype, inputs,
                 {"sigma": float(beta), "reduction": reduction, "scale": factor},
                 interior=interior - boundary, boundary=boundary, caveats=caveats,
                 expand={0: 1, 1: 0} if apart else {})


def broadcast_caveats(index: GraphIndex, predict: str, label: str, dout: str | None,
                      apart: bool = False) -> list[str]:
    """What the report says of a label or dout that broadcasts to predict's shape: the fused node
    reads it as it is and the kernel broadcasts it (a broadcast load); and of a predict and label
    whose dims were named `apart`, which are expanded to each other's shape."""
    out = [named_apart_caveat(index, predict, label)] if apart else []
    for role, value in (("label", label), ("dout", dout)):
        if value is not None and not same_shape(index, predict, value) and not (
                role == "dout" and is_single_element(index, value)) and not (role == "label" and apart):
            out.append(BROADCAST_CAVEAT.format(role=role, shape=shape_text(index, value)))
    return out


def _const_like(value: np.ndarray, dtype: int) -> np.ndarray:
    if dtype == onnx.TensorProto.BFLOAT16:
        import ml_dtypes

        return np.asarray(value, np.float32).astype(ml_dtypes.bfloat16)
    return np.asarray(value).astype(onnx.helper.tensor_dtype_to_np_dtype(dtype))


def split_reduction(numel: int | None, k: float, mean_at_runtime: bool, beta: float, single: bool,
               eps: float) -> tuple[str, float]:
    """Splits the constant multiplier K into the reduction's norm and an extra scale.

    K was rounded to the compute dtype when the graph was built, so 1/numel is recognised
    within that dtype's rounding (eps).
    """
    if mean_at_runtime:
        return "mean", float(k)
    if numel:
        if close(k, 1.0 / numel, eps):
            return "mean", 1.0
        if beta > 0 and close(k, beta / numel, 2 * eps):
            return "mean", float(beta)
    return ("sum" if single else "none"), float(k)


# the pre-checks of the product and sum anchors (here: the accept tests come first)
# through a Cast too: a clamp run in float32 and cast back (Algebra.clamp)
_CLAMP_END = Reach(_CLAMP_OPS, _PRODUCT_OPS | {"Cast"}, 4, _may_end_symmetric_clamp)
# 10: tf.clip_by_value(|x|, 0, delta) adds a Max and a select of its own to the v1 form's 7
_HUBER_MIN = Reach(_MIN_OPS, _TO_MIN | {"Max"}, 10, _caps_abs)
_FLOORED_ABS = Reach(frozenset({"Max", "Clip"}), _PRODUCT_OPS | {"Cast"}, 4, _floors_abs)
_MASK_END = Reach(_MASK_OPS, _TO_MASK, 6)
_SELECT_SUM_ENDS = (_MASK_END, Reach(_WHERE_OPS, _TO_MASK, 6, _selects_against_zero))
_EVERY_FORM = (BROADCAST_CAVEAT,)

SELECT_ON_ABS_X = Form(
    FAMILY, "select",
    formula="where(|x| < beta, K/beta * x * dout, K * sign(x) * dout)",
    spellings=(
        "`Where(|x| < beta, g*x/beta, g*sign(x))` (PyTorch's decomposition, `g = K * dout`), also with `<=` "
        "(both branches agree at `|x| == beta`), and with `>=` or a `Not` and the branches swapped",
        "the arithmetic select `m*A + m'*B` with float masks: `m' = Cast(Not(c))` as tf2onnx writes it or, "
        "written by hand, `(|x| >= beta).float()` beside `(|x| < beta).float()`, or `1 - m`",
        "the gradient of `tf.keras.losses.Huber`, two zero-padded selects summed (every reduction, with or "
        "without `output_gradients`)",
        "the gradient autograd takes of a loss written with `torch.where`, as torchvision, fvcore and mmdet "
        "write SmoothL1 (`0.5*n**2/beta` or `0.5*n*n/beta` inside, `n - 0.5*beta` outside; also YOLO's Huber): "
        "a sum of terms, each a product with `Where(c, g, 0)` or `Where(c, 0, g)`, read as one select whose "
        "sides add up the terms with equal runtime factors (terms that would cancel are refused), and "
        "`|x| * sign(x)` read as x (`Pow(n, 1)` is dropped by normalization)",
        "TensorFlow's gradient of a loss written with `0.5*x*x`, which sums one term per operand of the "
        "product, `Sum(a, b, a)` (in float16 the two copies multiplied in different orders): the addends with "
        "the same runtime factors add up, since at most one half of a select is nonzero at any element",
        "a select without dout scaled afterwards, `tf.where(|x| < beta, x/beta, sign(x)) * dout [/ n]`, whose "
        "products join the fusion (when they cannot, the select is fused alone)",
        "branches scaled by different full tensors of one number each (tf-faster-rcnn's `_smooth_l1_loss` with "
        "`sigma^2 = 2`): those numbers are read as the branches' coefficients",
        "in float16/bfloat16, a divisor that is the compared beta rounded to that dtype is the same beta",
        "beta = 0 (the gradient is `sign(x) * g`) with `<` in a Where; refused with `<=` or an arithmetic "
        "select, which compute 0/0 or 0*inf there",
    ),
    seen_from=("dynamo", "dynamo-optimized", "torchscript", "tf2onnx", "onnxruntime-training", "jax2onnx",
               "onnxconverter-common float16", "hand-written"),
    fused_op=SMOOTH_L1_GRAD,
    matcher=_select_on_abs_x,
    caveats=(HALF_SIGN_CAVEAT, *_EVERY_FORM),
    reported_as=("where", "arithmetic-select"),
)
NESTED_SELECT_ON_X = Form(
    FAMILY, "nested",
    formula="where(x < -beta, -K*dout, where(x > beta, K*dout, K/beta * x * dout))",
    spellings=(
        "`Where(x < -b, -g*b, Where(x > b, g*b, g*x))`, either side outermost: the Huber gradient "
        "(`scale = delta`)",
        "`-g*b` and `g*b` folded into full tensors of one number beside a tensor of ones for g, as dynamo's "
        "optimizer writes the gradient of a `reduction='none'` Huber loss, and with the tensor of ones dropped, "
        "as onnxsim, onnxslim and onnxoptimizer leave it",
        "either select an arithmetic select with float masks",
    ),
    seen_from=("dynamo", "dynamo-optimized", "torchscript", "onnxsim", "mindspore", "hand-written"),
    fused_op=SMOOTH_L1_GRAD,
    matcher=_nested_select_on_x,
    caveats=_EVERY_FORM,
    reported_as=("nested-where", "nested-arithmetic-select"),
)
CLAMPED_RATIO = Form(
    FAMILY, "clip",
    formula="K * dout * clamp(x/beta, -1, 1)",
    spellings=(
        "`Clip(x/beta, -1, 1) * g`, `Min(Max(x/beta, -1), 1) * g` (dynamo before its optimizer) or "
        "`Max(Min(x/beta, 1), -1) * g` (`tf.clip_by_value`), also run in float32 between Casts",
        "the Huber gradient `clamp(x, -delta, delta) * g` in the same spellings (beta = delta, scale delta)",
    ),
    seen_from=("dynamo", "dynamo-optimized", "torchscript", "tf2onnx", "paddle2onnx",
               "onnxconverter-common float16", "hand-written"),
    fused_op=SMOOTH_L1_GRAD,
    matcher=_clamped_ratio,
    caveats=_EVERY_FORM,
)
SIGN_TIMES_CAPPED_RATIO = Form(
    FAMILY, "capped-ratio",
    formula="K * dout * sign(x) * min(|x|/beta, 1)",
    spellings=(
        "`sign(x) * min(|x|/beta, 1) * g`, the magnitude capped at 1 (beta > 0), also as `Clip(|x|/beta, "
        "max=1)` from `torch.clamp(., max=1)`, and with the min run in float32 and cast back",
        "the 1 a full tensor of ones, as `torch.ones_like` exports it, or `Expand(1, Shape(x))` or "
        "`ConstantOfShape` before dynamo's optimizer",
    ),
    seen_from=("dynamo", "dynamo-optimized", "torchscript", "tf2onnx", "onnxconverter-common float16",
               "hand-written"),
    fused_op=SMOOTH_L1_GRAD,
    matcher=_sign_times_capped_ratio,
    caveats=(HALF_SIGN_CAVEAT, *_EVERY_FORM),
)
HUBER_LOSS_V1_GRADIENT = Form(
    FAMILY, "capped",
    formula="K * dout * sign(x) * (w + where(|x| <= delta, 2c*min(|x|, delta) - w, 0)),  2c = w/delta",
    spellings=(
        "the gradient of `tf.compat.v1.losses.huber_loss` (the TF object detection API's box-regression loss), "
        "`w/delta * x` inside because `sign(x)*|x| = x`; refused when its constants do not cancel or do not "
        "scale x by `w/delta`",
        "the same loss written by hand with `q*q`, or with `q = tf.clip_by_value(|x|, 0, delta)`, whose gradient "
        "adds a select on `q >= 0` that holds for every x but NaN",
    ),
    seen_from=("tf2onnx", "hand-written"),
    fused_op=SMOOTH_L1_GRAD,
    matcher=_huber_loss_v1_gradient,
    caveats=(HALF_SIGN_CAVEAT, *_EVERY_FORM),
)
X_OVER_FLOORED_ABS = Form(
    FAMILY, "over-floored-abs",
    formula="K * dout * x / max(|x|, beta)",
    spellings=(
        "`x / max(|x|, beta) * g`, also with `Clip(|x|, min=beta)` (`torch.clamp`), for a constant beta > 0: "
        "x/beta inside and x/|x| = sign(x) outside, exactly",
    ),
    seen_from=("tf2onnx", "hand-written"),
    fused_op=SMOOTH_L1_GRAD,
    matcher=_x_over_floored_abs,
    caveats=_EVERY_FORM,
)
# tried at a Where or a sum, on its select view, in this order
SELECT_FORMS = (SELECT_ON_ABS_X, NESTED_SELECT_ON_X)
# tried at a Mul or a Div, in this order
PRODUCT_FORMS = (CLAMPED_RATIO, SIGN_TIMES_CAPPED_RATIO, HUBER_LOSS_V1_GRADIENT, X_OVER_FLOORED_ABS)
FORMS = SELECT_FORMS + PRODUCT_FORMS

PATTERN = Pattern(FAMILY, frozenset({"Where", "Add", "Sum", "Mul", "Div"}), match,
                  prefilter={"Mul": (_CLAMP_END, _HUBER_MIN, _FLOORED_ABS),
                             "Div": (_CLAMP_END, _HUBER_MIN, _FLOORED_ABS),
                             "Add": _SELECT_SUM_ENDS, "Sum": _SELECT_SUM_ENDS},
                  forms=FORMS)
