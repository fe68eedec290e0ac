"""ApplyProximalGradientDescent -> IR.

    prox = var - alpha * delta
    var_out = sign(prox) * min(max(|prox| - t, 0), shrink_max) * r     t = threshold, r = 1 / divisor

is computed as `prox - c` with c = sign(prox) * min(|prox|, t), which equals the contract for
every non-NaN prox and any t (for t < 0, min(|prox|, t) = t), and a NaN prox gives NaN whatever
Sign or Mins do with NaN, because `prox - c` is NaN for any c: no reliance on undocumented NaN
behaviour. A NaN threshold must also give NaN; Mins with a NaN scalar is undocumented, so the
scalar unit folds NaN-ness of t into r (r + 0 * clamp(t, -1, 1), NaN exactly when t is NaN;
SMin/SMax propagate NaN by definition).

alpha, l1 and l2 are always read at run time from their one-element inputs (SInput), constant
or not, as CANN's operator reads them: one kernel serves every value. shrink_max is an attribute
the host reads at tiling time. The variant (codegen/variants.py) is the scalar form, whether
shrink_max is finite and the dtypes of alpha, l1 and l2.

A kernel CANN's prototype expresses (var, alpha, l1, l2, delta -> var_out, no attributes, float or
float16 throughout: the raw scalar form without a clamp) is CANN's operator, which has no variant
axes; every other kernel is a variant of the project's own AscendLoweringApplyProximalGradientDescent
(attributes scalar_form and shrink_max, bfloat16 and float32 scalars too).
"""

from __future__ import annotations

import math
from typing import SupportsFloat

from codegen.ir import FLOAT_DTYPES, Kernel, KernelBuilder, Kind, Op
from codegen.nodes import NodeSpec
from codegen.registry import (
    FINITE_ATTR,
    INPUT_DTYPE,
    STRING_ATTR,
    Attribute,
    Axis,
    Operator,
    OpInterface,
    Rule,
    register_rule,
)
from codegen.rules.common import choice, common_dtype, fail, load_f32, same_shape, store
from contracts.fused_ops import PROXIMAL_GD, PROXIMAL_NONFINITE, SCALAR_FORMS

_SCALAR_DTYPES = ("float32",)


def _scalar(b: KernelBuilder, spec: NodeSpec, role: str) -> int:
    inp = spec.inputs[role]
    if inp.numel() != 1:
        raise fail(
            spec, f"{role} must hold exactly one element (0-D or [1]), got shape {inp.shape}"
        )
    return b.sinput(role)


def _scalars(b: KernelBuilder, spec: NodeSpec, form: str) -> tuple[int, int, int]:
    """(alpha, threshold, 1/divisor) as scalar values."""
    alpha, l1, l2 = (_scalar(b, spec, r) for r in ("alpha", "l1", "l2"))
    if form == "raw":
        one = b.sconst(1.0)
        return (
            alpha,
            b.sop(Op.SMUL, alpha, l1),
            b.sop(Op.SRECIP, b.sop(Op.SADD, one, b.sop(Op.SMUL, alpha, l2))),
        )
    if form == "folded":
        return alpha, l1, b.sop(Op.SRECIP, l2)
    return alpha, l1, l2


def _scalar_form(spec: NodeSpec) -> str:
    return choice(spec, "scalar_form", SCALAR_FORMS)


def _shrink_max(spec: NodeSpec) -> float:
    value = spec.attrs.get("shrink_max", math.inf)
    if not isinstance(value, SupportsFloat):
        raise fail(spec, f"shrink_max must be a number, got {value!r}")
    return float(value)


def _nonfinite(spec: NodeSpec) -> str:
    return choice(spec, "nonfinite", PROXIMAL_NONFINITE, "select")


def proximal_variant(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    """The kernel variant a node needs (checks its attributes and dtypes on the way)."""
    form = _scalar_form(spec)
    dtype = common_dtype(spec, ("var", "delta"))
    for role in ("alpha", "l1", "l2"):
        if spec.inputs[role].dtype not in (dtype, *_SCALAR_DTYPES):
            raise fail(spec, f"{role} must be {dtype} or float32, got {spec.inputs[role].dtype}")
    shrink_max = _shrink_max(spec)
    return (
        ("scalar_form", form),
        ("shrink_max", "finite" if math.isfinite(shrink_max) else "inf"),
        *((f"{r}_dtype", spec.inputs[r].dtype) for r in ("alpha", "l1", "l2")),
        ("nonfinite", _nonfinite(spec)),
    )


def lower_proximal_gd(spec: NodeSpec) -> Kernel:
    variant = proximal_variant(spec)
    form = _scalar_form(spec)
    dtype = common_dtype(spec, ("var", "delta"))
    if not same_shape(spec.inputs["var"].shape, spec.inputs["delta"].shape):
        raise fail(spec, "var and delta must have one (known) shape")

    b = KernelBuilder(spec.op_type, dtype, variant)
    b.input("var", dtype)
    for role in ("alpha", "l1", "l2"):
        b.input(role, spec.inputs[role].dtype, Kind.SCALAR)
    b.input("delta", dtype)
    b.output("var_out", dtype)

    alpha, thr, recip = _scalars(b, spec, form)
    nan_if_t_nan = b.sop(
        Op.SMUL,
        b.sop(Op.SMAX, b.sop(Op.SMIN, thr, b.sconst(1.0)), b.sconst(-1.0)),
        b.sconst(0.0),
    )
    recip = b.sop(Op.SADD, recip, nan_if_t_nan)

    var = load_f32(b, "var")
    prox = b.binary(Op.SUB, var, b.tile_scalar(Op.MULS, load_f32(b, "delta"), alpha))
    shrink = b.tile_scalar(Op.MINS, b.unary(Op.ABS, prox), thr)
    c = b.binary(Op.MUL, b.unary(Op.SIGN, prox), shrink)
    shrunk = b.binary(Op.SUB, prox, c)
    shrink_max = _shrink_max(spec)
    if math.isfinite(shrink_max):
        # min(., shrink_max) on the magnitude; Maxs/Mins on NaN are undocumented, so a NaN is
        # selected back from the unclamped value (Compare(x, x, EQ) is false only for NaN)
        m = b.sattr("shrink_max", shrink_max)
        clamped = b.tile_scalar(Op.MINS, b.tile_scalar(Op.MAXS, shrunk, b.sop(Op.SNEG, m)), m)
        shrunk = b.select(b.compare(shrunk, shrunk, "EQ"), clamped, shrunk)
    out = b.tile_scalar(Op.MULS, shrunk, recip)
    nonfinite = _nonfinite(spec)
    if nonfinite == "blend":  # an arithmetic select's NaN: + 0 * prox is NaN exactly where prox is +-inf or NaN
        out = b.binary(Op.ADD, out, b.tile_scalar(Op.MULS, prox, b.sconst(0.0)))
    elif nonfinite == "nan_to_zero":  # a where-chain's or Shrink's 0 where prox is NaN
        out = b.select(b.compare(prox, prox, "EQ"), out, b.duplicate(b.sconst(0.0)))
    store(b, "var_out", out, dtype)
    return b.build()


def _cann_takes(dtype: str, v: dict[str, str]) -> bool:
    """CANN's ApplyProximalGradientDescent: float or float16, every input of one dtype, its
    formula (scalar form raw, no clamp)."""
    return (dtype in CANN_DTYPES and v["scalar_form"] == "raw" and v["shrink_max"] == "inf"
            and v["nonfinite"] == "select" and all(v[f"{r}_dtype"] == dtype for r in ("alpha", "l1", "l2")))


CANN_DTYPES = ("float32", "float16")
# The project's own operator for what CANN's prototype cannot express: the folded scalar forms
# (turning a threshold and divisor back into alpha, l1 and l2 is exact only for some alphas, and
# the values are known at run time only), the clamp of ONNX Clip without max, bfloat16 (CANN's
# operator registers float and float16) and scalars in float32 beside float16/bfloat16 tensors
# (a cast down would round them).
EXTENDED_OP = "AscendLoweringApplyProximalGradientDescent"
_FULL_AXES = (
    Axis("scalar_form", SCALAR_FORMS, STRING_ATTR, "scalar_form"),
    Axis("shrink_max", ("inf", "finite"), FINITE_ATTR, "shrink_max"),
    *(Axis(f"{r}_dtype", FLOAT_DTYPES, INPUT_DTYPE, r) for r in ("alpha", "l1", "l2")),
    Axis("nonfinite", PROXIMAL_NONFINITE, STRING_ATTR, "nonfinite"),
)

register_rule(Rule(
    PROXIMAL_GD,
    lower=lower_proximal_gd,
    variant=proximal_variant,
    operators=(
        Operator(PROXIMAL_GD, (), OpInterface(outputs=("var_out",), attributes=(), dtypes=CANN_DTYPES),
                 accepts=_cann_takes, cann=True),
        Operator(EXTENDED_OP, _FULL_AXES, OpInterface(outputs=("var_out",), attributes=(
            Attribute(
                "scalar_form", "string", "raw", False,
                '"raw" (CANN: threshold alpha*l1, divisor 1+alpha*l2), "folded" (l1, l2) or '
                '"folded_reciprocal" (l1, 1/l2)',
            ),
            Attribute(
                "shrink_max", "float", math.inf, False,
                "clamp of the shrunk magnitude (inf: CANN's op; finite: ONNX Clip without max)",
            ),
            Attribute(
                "nonfinite", "string", "select", False,
                '"select" (CANN\'s op), "blend" (NaN where prox is +-inf: an arithmetic select) or '
                '"nan_to_zero" (0 where prox is NaN: a where-chain, ONNX Shrink)',
            ),
        ))),
    ),
))
