"""ApplyProximalGradientDescent -> IR.

    prox = var - alpha * delta
    var_out = sign(prox) * min(max(|prox| - t, 0), shrink_max) * r     t = threshold, r = 1 / divisor

is computed as `prox - c` with

    c = sign(prox) * min(|prox|, t)          any t (general form)
    c = min(max(prox, -t), t)                t a compile-time constant >= 0 (clip form)

Both equal the contract for every non-NaN prox (for t < 0, min(|prox|, t) = t), and a NaN prox
gives NaN whatever Sign, Maxs or Mins do with NaN, because `prox - c` is NaN for any c: no
reliance on undocumented NaN behaviour. A NaN threshold must also give NaN; Mins with a NaN
scalar is undocumented, so for a runtime threshold the scalar unit folds NaN-ness of t into r
(r + 0 * clamp(t, -1, 1), NaN exactly when t is NaN; SMin/SMax propagate NaN by definition).

Scalars are host/scalar-unit values: constants (initializers) become SConst and fold; runtime
scalars are read once per launch from their one-element inputs (SInput).
"""

from __future__ import annotations

import math

from codegen.ir import Kernel, KernelBuilder, Kind, Op
from codegen.nodes import NodeSpec
from codegen.rules.common import common_dtype, fail, load_f32, same_shape, store
from lowering.fused_ops import SCALAR_FORMS

_SCALAR_DTYPES = ("float32",)


def _scalar(b: KernelBuilder, spec: NodeSpec, role: str) -> int:
    inp = spec.inputs[role]
    if inp.numel() != 1:
        raise fail(
            spec, f"{role} must hold exactly one element (0-D or [1]), got shape {inp.shape}"
        )
    return b.sconst(inp.const) if inp.const is not None else b.sinput(role)


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


def _const_threshold(spec: NodeSpec) -> float | None:
    """The threshold as a number when every scalar it depends on is a constant."""
    form = spec.attrs["scalar_form"]
    l1 = spec.inputs["l1"].const
    if form != "raw":
        return l1
    alpha = spec.inputs["alpha"].const
    return None if alpha is None or l1 is None else alpha * l1


def lower_proximal_gd(spec: NodeSpec) -> Kernel:
    form = spec.attrs["scalar_form"]
    if form not in SCALAR_FORMS:
        raise fail(spec, f"scalar_form must be one of {SCALAR_FORMS}, got {form!r}")
    dtype = common_dtype(spec, ("var", "delta"))
    if not same_shape(spec.inputs["var"].shape, spec.inputs["delta"].shape):
        raise fail(spec, "var and delta must have one (known) shape")
    for role in ("alpha", "l1", "l2"):
        if spec.inputs[role].dtype not in (dtype, *_SCALAR_DTYPES):
            raise fail(spec, f"{role} must be {dtype} or float32, got {spec.inputs[role].dtype}")

    b = KernelBuilder(spec.op_type, dtype)
    b.input("var", dtype)
    for role in ("alpha", "l1", "l2"):
        b.input(role, spec.inputs[role].dtype, Kind.SCALAR)
    b.input("delta", dtype)
    b.output("var_out", dtype)

    alpha, thr, recip = _scalars(b, spec, form)
    t_const = _const_threshold(spec)
    clip_form = t_const is not None and not math.isnan(t_const) and t_const >= 0
    if not clip_form:
        nan_if_t_nan = b.sop(
            Op.SMUL,
            b.sop(Op.SMAX, b.sop(Op.SMIN, thr, b.sconst(1.0)), b.sconst(-1.0)),
            b.sconst(0.0),
        )
        recip = b.sop(Op.SADD, recip, nan_if_t_nan)

    var = load_f32(b, "var")
    prox = b.binary(Op.SUB, var, b.tile_scalar(Op.MULS, load_f32(b, "delta"), alpha))
    if clip_form:
        lo = b.tile_scalar(Op.MAXS, prox, b.sop(Op.SNEG, thr))
        c = b.tile_scalar(Op.MINS, lo, thr)
    else:
        shrink = b.tile_scalar(Op.MINS, b.unary(Op.ABS, prox), thr)
        c = b.binary(Op.MUL, b.unary(Op.SIGN, prox), shrink)
    shrunk = b.binary(Op.SUB, prox, c)
    shrink_max = float(spec.attrs.get("shrink_max", math.inf))
    if math.isfinite(shrink_max):
        # min(., shrink_max) on the magnitude; Maxs/Mins on NaN are undocumented, so a NaN is
        # selected back from the unclamped value (Compare(x, x, EQ) is false only for NaN)
        m = b.sconst(shrink_max)
        clamped = b.tile_scalar(Op.MINS, b.tile_scalar(Op.MAXS, shrunk, b.sop(Op.SNEG, m)), m)
        shrunk = b.select(b.compare(shrunk, shrunk, "EQ"), clamped, shrunk)
    out = b.tile_scalar(Op.MULS, shrunk, recip)
    store(b, "var_out", out, dtype)
    return b.build()
