"""SmoothL1LossGradV2 -> IR.

    x = predict - label
    s = sign(x) where |x| >= sigma, else x * (1/sigma)      (Compare + Select)
    gradient = s * (dout * norm * scale)

Why this shape: AscendC Sign maps NaN to 0, but `|x| >= sigma` is false for NaN, so NaN lanes take
x * (1/sigma), which is NaN. The Select is a bitwise pick, so whatever the unselected branch
holds (inf, NaN) never leaks. For sigma = 0 every non-NaN lane takes sign(x); the other branch
only matters for NaN, so it multiplies by 1 (removed by the simplifier) instead of 1/0: no
division, never a NaN that the contract does not have. |x| == sigma gives exactly +-1.

A one-element dout is read once on the scalar unit and folded with norm and scale into one Muls;
a full-shape dout is a streamed tile. A label or dout of another shape that broadcasts to
predict's (CANN's op broadcasts its three inputs) is read by a broadcast load (CopyInBcast,
codegen/broadcast.py); the gradient has predict's shape, as the gradient of predict must.
sigma and scale are attributes the host reads at tiling time, and norm = 1/numel(predict) for
"mean" is computed there too, so one kernel serves every shape, sigma > 0 and scale; the variant
(codegen/variants.py) is the dout kind (predict's shape, one element or broadcast), the reduction,
whether sigma is 0 and scale 1, and the label kind (predict's shape or broadcast).

Kernels with scale 1 are variants of CANN's operator (its prototype: predict, label, dout ->
gradient, attributes sigma and reduction); the others are variants of the project's own
AscendLoweringSmoothL1LossGrad, which adds the attribute scale.
"""

from __future__ import annotations

import math

from codegen.ir import F32, Kernel, KernelBuilder, Kind, Op
from codegen.nodes import NodeSpec
from codegen.registry import (
    INPUT_SHAPE,
    STRING_ATTR,
    ZERO_ATTR,
    Attribute,
    Axis,
    Operator,
    OpInterface,
    Rule,
    register_rule,
)
from codegen.rules.common import choice, common_dtype, fail, load_f32, shape_kind, store
from contracts.fused_ops import REDUCTIONS, SMOOTH_L1_GRAD, SMOOTH_L1_NONFINITE

LABEL_KINDS = ("tile", "broadcast")
DOUT_KINDS = ("tile", "scalar", "broadcast")


def _dout_kind(spec: NodeSpec) -> str:
    # one element is the scalar fast path even when predict holds one element too
    if spec.inputs["dout"].numel() == 1:
        return "scalar"
    return shape_kind(spec, "dout", "predict", DOUT_KINDS)


def _load(b: KernelBuilder, name: str, kind: str) -> int:
    """A streamed input as float32: a plain load, or a broadcast load (then a cast up)."""
    if kind != "broadcast":
        return load_f32(b, name)
    v = b.copy_in_bcast(name)
    return v if b.instrs[v].dtype == F32 else b.cast(v, F32)


def _nonfinite(spec: NodeSpec) -> str:
    return choice(spec, "nonfinite", SMOOTH_L1_NONFINITE, "select")


def _check(spec: NodeSpec) -> tuple[float, str, float]:
    sigma, reduction, scale = spec.attrs["sigma"], spec.attrs["reduction"], spec.attrs["scale"]
    if not isinstance(sigma, float) or math.isnan(sigma) or sigma < 0:
        raise fail(spec, f"sigma must be a float >= 0, got {sigma!r}")
    if reduction not in REDUCTIONS:
        raise fail(spec, f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not isinstance(scale, float):
        raise fail(spec, f"scale must be a float, got {scale!r}")
    return sigma, str(reduction), scale


def smooth_l1_variant(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    """The kernel variant a node needs (checks its attributes and shapes on the way)."""
    sigma, reduction, scale = _check(spec)
    common_dtype(spec, ("predict", "label", "dout"))
    return (
        ("dout", _dout_kind(spec)),
        ("reduction", reduction),
        ("sigma", "zero" if sigma == 0 else "positive"),
        ("scale", "one" if scale == 1 else "other"),
        ("label", shape_kind(spec, "label", "predict", LABEL_KINDS)),
        ("nonfinite", _nonfinite(spec)),
    )


def lower_smooth_l1_grad(spec: NodeSpec) -> Kernel:
    sigma, reduction, scale = _check(spec)
    dtype = common_dtype(spec, ("predict", "label", "dout"))
    variant = smooth_l1_variant(spec)
    dout_kind, label_kind = dict(variant)["dout"], dict(variant)["label"]
    scalar_dout = dout_kind == "scalar"

    b = KernelBuilder(spec.op_type, dtype, variant)
    b.input("predict", dtype)
    b.input("label", dtype, broadcast=label_kind == "broadcast")
    b.input("dout", dtype, Kind.SCALAR if scalar_dout else Kind.TILE, broadcast=dout_kind == "broadcast")
    b.output("gradient", dtype)

    # scalars: norm * scale, optionally times dout; 1/sigma (1 when sigma = 0, see the docstring)
    factor = b.sconst(1.0) if scale == 1 else b.sattr("scale", scale)
    if reduction == "mean":
        factor = b.sop(Op.SMUL, factor, b.sop(Op.SRECIP, b.snumel("predict")))
    if scalar_dout:
        factor = b.sop(Op.SMUL, b.sinput("dout"), factor)
    s_sigma = b.sattr("sigma", sigma) if sigma > 0 else b.sconst(0.0)
    inv_sigma = b.sop(Op.SRECIP, s_sigma) if sigma > 0 else b.sconst(1.0)

    x = b.binary(Op.SUB, load_f32(b, "predict"), _load(b, "label", label_kind))
    outside = b.compare(b.unary(Op.ABS, x), s_sigma, "GE")
    sign, linear = b.unary(Op.SIGN, x), b.tile_scalar(Op.MULS, x, inv_sigma)
    s = b.select(outside, sign, linear)
    nonfinite = _nonfinite(spec)
    zero = b.sconst(0.0)
    if nonfinite == "blend":  # an arithmetic select of x / sigma and sign(x): 0 * the other branch
        s = b.binary(Op.ADD, s, b.tile_scalar(Op.MULS, linear, zero))
    dout = None if scalar_dout else _load(b, "dout", dout_kind)
    if dout is not None:
        s = b.binary(Op.MUL, s, dout)
    out = b.tile_scalar(Op.MULS, s, factor)
    if nonfinite == "blend_dout":  # the same select of each branch times dout and the factor
        for branch in (linear, sign):
            g = b.tile_scalar(Op.MULS, branch if dout is None else b.binary(Op.MUL, branch, dout), factor)
            out = b.binary(Op.ADD, out, b.tile_scalar(Op.MULS, g, zero))
    store(b, "gradient", out, dtype)
    return b.build()


_SIGMA = Attribute("sigma", "float", 1.0, True, "PyTorch's beta, >= 0")
_REDUCTION = Attribute("reduction", "string", "mean", True, '"none", "mean" or "sum"')
_AXES = (
    Axis("dout", DOUT_KINDS, INPUT_SHAPE, "dout"),
    Axis("reduction", REDUCTIONS, STRING_ATTR, "reduction"),
    Axis("sigma", ("positive", "zero"), ZERO_ATTR, "sigma"),
    Axis("label", LABEL_KINDS, INPUT_SHAPE, "label"),
)
# The project's own operator: CANN's prototype has no factor on the gradient, and a Mul after
# CANN's operator would round twice (fp16/bf16) and read and write the gradient once more; nor
# has it the arithmetic select's NaN where a branch not taken is +-inf.
SCALED_OP = "AscendLoweringSmoothL1LossGrad"

register_rule(Rule(
    SMOOTH_L1_GRAD,
    lower=lower_smooth_l1_grad,
    variant=smooth_l1_variant,
    operators=(
        Operator(SMOOTH_L1_GRAD, _AXES,
                 OpInterface(outputs=("gradient",), attributes=(_SIGMA, _REDUCTION),
                             dtypes=("bfloat16", "float16", "float32")),
                 accepts=lambda dtype, v: v["scale"] == "one" and v["nonfinite"] == "select", cann=True),
        Operator(SCALED_OP, _AXES + (Axis("nonfinite", SMOOTH_L1_NONFINITE, STRING_ATTR, "nonfinite"),),
                 OpInterface(outputs=("gradient",), attributes=(
                     _SIGMA, _REDUCTION,
                     Attribute("scale", "float", 1.0, False, "constant factor on the gradient (1: CANN's op)"),
                     Attribute("nonfinite", "string", "select", False,
                               '"select" (CANN\'s op), "blend" (an arithmetic select of x/sigma and sign(x): NaN '
                               'where x/sigma is +-inf) or "blend_dout" (of each branch times dout)'),
                 ))),
    ),
))
