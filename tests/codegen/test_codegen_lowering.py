"""Lowering rules: the IR of every variant, and its numerics against the float64 contract.

The numerics use a small numpy evaluator of the IR written here from the semantics in
codegen/ir.py (independent of runtime/), run with both readings of the undocumented Maxs/Mins
NaN behaviour: a lowering must give the same result either way.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from codegen.api import kernel_for_spec, structure_text
from codegen.errors import CodegenError
from codegen.ir import Kernel, Kind, Op, is_attr, scalar_stages
from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import (
    PROXIMAL_GD,
    SMOOTH_L1_GRAD,
    proximal_gd_reference,
    proximal_scalars,
    smooth_l1_grad_reference,
)

NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
T = {"float32": 2.0**-13, "float16": 2.0**-10, "bfloat16": 2.0**-7}
DTYPES = ("float32", "float16", "bfloat16")


# --------------------------------------------------------------------------- IR evaluator


def run_ir(k: Kernel, inputs: dict[str, np.ndarray], nan_minmax: str) -> dict[str, np.ndarray]:
    """Whole-array evaluation of the IR semantics; nan_minmax: 'nan' or 'scalar' for Maxs/Mins."""
    f32 = np.float32
    n = next(inputs[p.name].size for p in k.inputs if p.kind is Kind.TILE)
    v: dict[int, object] = {}
    out: dict[str, np.ndarray] = {}
    maxs = np.maximum if nan_minmax == "nan" else np.fmax
    mins = np.minimum if nan_minmax == "nan" else np.fmin
    with np.errstate(all="ignore"):
        for i, ins in enumerate(k.instrs):
            a = [v[s] for s in ins.srcs]
            op = ins.op
            if op is Op.SCONST:
                r = f32(ins.attr("value"))
            elif op is Op.SINPUT:
                r = f32(np.asarray(inputs[ins.attr("name")]).reshape(-1)[0])
            elif op is Op.SNUMEL:
                r = f32(inputs[ins.attr("name")].size)
            elif op in (Op.SADD, Op.ADD, Op.ADDS):
                r = f32(a[0] + a[1]) if op is Op.SADD else (a[0] + a[1]).astype(f32)
            elif op in (Op.SSUB, Op.SUB):
                r = f32(a[0] - a[1]) if op is Op.SSUB else (a[0] - a[1]).astype(f32)
            elif op in (Op.SMUL, Op.MUL, Op.MULS):
                r = f32(a[0] * a[1]) if op is Op.SMUL else (a[0] * a[1]).astype(f32)
            elif op in (Op.SDIV, Op.DIV):
                r = f32(a[0] / a[1]) if op is Op.SDIV else (a[0] / a[1]).astype(f32)
            elif op is Op.SNEG:
                r = f32(-a[0])
            elif op is Op.SRECIP:
                r = f32(f32(1) / a[0])
            elif op is Op.SMAX:
                r = a[0] if (a[0] > a[1] or np.isnan(a[0])) else a[1]
            elif op is Op.SMIN:
                r = a[0] if (a[0] < a[1] or np.isnan(a[0])) else a[1]
            elif op is Op.COPY_IN:
                r = inputs[ins.attr("name")].reshape(-1)
            elif op is Op.COPY_IN_BRC:
                r = np.full(n, inputs[ins.attr("name")].reshape(-1)[0])
            elif op is Op.CAST:
                r = a[0].astype(NP[ins.dtype])
            elif op is Op.ABS:
                r = np.abs(a[0])
            elif op is Op.SIGN:
                r = np.where(a[0] > 0, f32(1), np.where(a[0] < 0, f32(-1), f32(0))).astype(f32)
            elif op is Op.MAXS:
                r = maxs(a[0], a[1]).astype(f32)
            elif op is Op.MINS:
                r = mins(a[0], a[1]).astype(f32)
            elif op is Op.COMPARE:
                mode = ins.attr("mode")
                x, y = a
                r = {"LT": x < y, "GT": x > y, "EQ": x == y, "LE": x <= y, "GE": x >= y}.get(
                    mode, x != y
                )
            elif op is Op.SELECT:
                r = np.where(a[0], a[1], a[2]).astype(np.float32)
            elif op is Op.DUPLICATE:
                r = np.full(n, a[0], np.float32)
            elif op is Op.COPY_OUT:
                out[ins.attr("name")] = a[0]
                continue
            else:
                raise AssertionError(op)
            v[i] = r
    return out


def assert_precise(actual: np.ndarray, golden64: np.ndarray, dtype: str, what: str) -> None:
    """CANN standard against the float64 golden cast to the output dtype (as ops-nn's golden.py
    does); NaN and inf positions must match exactly."""
    act = np.asarray(actual).astype(np.float64)
    with np.errstate(over="ignore"):
        rounded = golden64.astype(NP[dtype]).astype(np.float64)
    assert np.array_equal(np.isnan(act), np.isnan(rounded)), f"{what}: NaN positions differ"
    inf = np.isinf(rounded) | np.isinf(act)
    assert np.array_equal(act[inf], rounded[inf]), f"{what}: inf positions differ"
    ok = ~np.isnan(act) & ~inf
    rel = np.abs(act[ok] - rounded[ok]) / (np.abs(rounded[ok]) + 1e-7)
    if rel.size:
        assert rel.mean() < T[dtype] and rel.max() < 10 * T[dtype], (
            f"{what}: MERE {rel.mean():.3g} MARE {rel.max():.3g}"
        )


# --------------------------------------------------------------------------- SmoothL1


def sl1_spec(dtype: str, reduction: str, sigma: float, scalar_dout: bool, scale: float = 1.0):
    shape = (4, 80)
    inputs = {
        "predict": InputSpec(dtype, shape),
        "label": InputSpec(dtype, shape),
        "dout": InputSpec(dtype, () if scalar_dout else shape),
    }
    attrs = {"sigma": sigma, "reduction": reduction, "scale": scale}
    return NodeSpec("node", SMOOTH_L1_GRAD, inputs, attrs)


def tile_ops(k: Kernel) -> list[str]:
    return [ins.op.value for ins in k.instrs if ins.kind is not Kind.SCALAR]


@pytest.mark.parametrize("dtype", DTYPES)
def test_smooth_l1_ir_shape(dtype: str) -> None:
    k = kernel_for_spec(sl1_spec(dtype, "mean", 0.5, True))
    casts_in = ["Cast"] if dtype != "float32" else []
    want = (
        ["CopyIn", *casts_in, "CopyIn", *casts_in, "Sub", "Abs", "Compare", "Sign", "Muls"]
        + ["Select", "Muls", *(["Cast"] if dtype != "float32" else []), "CopyOut"]
    )
    assert tile_ops(k) == want
    rounds = [ins.attr("round") for ins in k.instrs if ins.op is Op.CAST]
    assert rounds == ([] if dtype == "float32" else ["CAST_NONE", "CAST_NONE", "CAST_RINT"])
    assert k.param("dout").kind is Kind.SCALAR
    assert [ins.op for ins in k.instrs if ins.kind is Kind.SCALAR].count(Op.SINPUT) == 1


def test_smooth_l1_variants_ir() -> None:
    # sum/none, scale 1: dout read on the scalar unit is the only factor
    k = kernel_for_spec(sl1_spec("float32", "sum", 2.0, True))
    assert tile_ops(k).count("Muls") == 2 and k.vector_instruction_count() == 7
    # sigma is read at tiling time: sigma = 1 gets the kernel of sigma = 2, 1/sigma a host scalar
    one = kernel_for_spec(sl1_spec("float32", "sum", 1.0, True))
    assert structure_text(one) == structure_text(k)
    assert [str(ins.attr("attr")) for ins in one.instrs if is_attr(ins)] == ["sigma"]
    assert all(scalar_stages(one)[i] == "host" for i, ins in enumerate(one.instrs) if ins.op is Op.SRECIP)
    # full dout, sum: a Mul by the dout tile and no scaling at all
    k = kernel_for_spec(sl1_spec("float16", "none", 2.0, False))
    assert "Mul" in tile_ops(k) and tile_ops(k).count("Muls") == 1
    assert k.param("dout").kind is Kind.TILE
    # full dout, mean: Mul by dout then Muls by 1/numel (a host scalar)
    k = kernel_for_spec(sl1_spec("float32", "mean", 2.0, False))
    assert tile_ops(k)[-3:] == ["Mul", "Muls", "CopyOut"]
    # sigma = 0: pure sign; no division, NaN test is x == x
    k = kernel_for_spec(sl1_spec("float32", "none", 0.0, False))
    assert "Div" not in tile_ops(k) and "Abs" not in tile_ops(k)
    cmp = next(ins for ins in k.instrs if ins.op is Op.COMPARE)
    assert cmp.attr("mode") == "EQ" and cmp.srcs[0] == cmp.srcs[1]
    assert not any(ins.op is Op.SRECIP for ins in k.instrs)


def _sl1_inputs(rng: np.random.Generator, dtype: str, sigma: float, scalar_dout: bool):
    n = 320
    p = rng.standard_normal(n) * 2
    l = rng.standard_normal(n) * 2
    # edges: x = 0, +-0, exactly +-sigma, just inside/outside, +-inf, NaN, huge
    p[:12] = [0, -0.0, sigma, -sigma, 0, np.inf, -np.inf, np.nan, 1, 6e4, -6e4, 3]
    l[:12] = [0, 0.0, 0, 0, np.nan, 1, 1, 1, np.inf, -6e4, 6e4, 3]
    if sigma > 0:
        p[12:14] = [np.nextafter(sigma, 0), np.nextafter(sigma, 10)]
        l[12:14] = 0
    p, l = p.astype(NP[dtype]), l.astype(NP[dtype])
    d = np.asarray([-1.5] if scalar_dout else rng.standard_normal(n)).astype(NP[dtype])
    if not scalar_dout:
        d[20:24] = [0, -0.0, np.inf, np.nan]
    return p, l, d


@pytest.mark.parametrize(
    "dtype, reduction, sigma, scalar_dout",
    list(itertools.product(DTYPES, ("none", "mean", "sum"), (0.0, 0.5, 1.0, 3.0), (True, False))),
)
def test_smooth_l1_numerics(dtype: str, reduction: str, sigma: float, scalar_dout: bool,
                            rng: np.random.Generator) -> None:
    scale = 300.0 if reduction == "mean" else 0.75  # keeps float16 results out of subnormals
    spec = sl1_spec(dtype, reduction, sigma, scalar_dout, scale=scale)
    k = kernel_for_spec(NodeSpec("n", SMOOTH_L1_GRAD, {
        "predict": InputSpec(dtype, (320,)),
        "label": InputSpec(dtype, (320,)),
        "dout": InputSpec(dtype, () if scalar_dout else (320,)),
    }, spec.attrs))
    p, l, d = _sl1_inputs(rng, dtype, sigma, scalar_dout)
    gold = smooth_l1_grad_reference(p, l, d, sigma, reduction, scale)
    for policy in ("nan", "scalar"):
        got = run_ir(k, {"predict": p, "label": l, "dout": d}, policy)["gradient"]
        assert got.dtype == NP[dtype]
        assert_precise(got, gold, dtype, f"{dtype} {reduction} sigma={sigma} {policy}")


def test_smooth_l1_refusals() -> None:
    spec = sl1_spec("float32", "mean", 1.0, True)
    bad_dout = NodeSpec("n", SMOOTH_L1_GRAD, {**spec.inputs, "dout": InputSpec("float32", (3, 80))}, spec.attrs)
    with pytest.raises(CodegenError, match="dout .* must have .* one element or a shape that broadcasts"):
        kernel_for_spec(bad_dout)
    growing = NodeSpec("n", SMOOTH_L1_GRAD, {**spec.inputs, "label": InputSpec("float32", (2, 4, 80))}, spec.attrs)
    with pytest.raises(CodegenError, match="label .* must have .* a shape that broadcasts to predict's"):
        kernel_for_spec(growing)
    with pytest.raises(CodegenError, match="sigma"):
        kernel_for_spec(NodeSpec("n", SMOOTH_L1_GRAD, spec.inputs, {**spec.attrs, "sigma": -1.0}))
    with pytest.raises(CodegenError, match="reduction"):
        kernel_for_spec(NodeSpec("n", SMOOTH_L1_GRAD, spec.inputs, {**spec.attrs, "reduction": "max"}))
    mixed = {**spec.inputs, "label": InputSpec("float16", (4, 80))}
    with pytest.raises(CodegenError, match="one dtype"):
        kernel_for_spec(NodeSpec("n", SMOOTH_L1_GRAD, mixed, spec.attrs))
    dyn = {"predict": InputSpec("float32", ("B", 80)), "label": InputSpec("float32", ("B", 80)),
           "dout": InputSpec("float32", ("B", 80))}
    assert kernel_for_spec(NodeSpec("n", SMOOTH_L1_GRAD, dyn, spec.attrs)).param("dout").kind is Kind.TILE


# --------------------------------------------------------------------------- proximal GD

SCALARS = ("alpha", "l1", "l2")


def apgd_spec(dtype: str, form: str, consts: dict[str, float], sdtype: str | None = None):
    inputs = {"var": InputSpec(dtype, (320,)), "delta": InputSpec(dtype, (320,))}
    for r in SCALARS:
        const = consts.get(r)
        if const is not None:  # an initializer holds the value in its own dtype
            const = float(np.asarray(const).astype(NP[sdtype or dtype]))
        inputs[r] = InputSpec(sdtype or dtype, (1,) if r == "l2" else (), const)
    return NodeSpec("node", PROXIMAL_GD, inputs, {"scalar_form": form})


def test_apgd_ir_general_form_matches_the_cann_budget() -> None:
    k = kernel_for_spec(apgd_spec("float32", "raw", {}))
    assert tile_ops(k) == ["CopyIn", "CopyIn", "Muls", "Sub", "Abs", "Mins", "Sign", "Mul", "Sub", "Muls", "CopyOut"]
    assert k.vector_instruction_count() == 8
    assert {k.instrs[i].attr("name") for i, ins in enumerate(k.instrs) if ins.op is Op.SINPUT} == set(SCALARS)


def test_apgd_ir_constant_scalars() -> None:
    # constant alpha/l1/l2 are read at run time like any others (CANN's operator reads them so):
    # the kernel is the one of runtime scalars, every declared input is used
    general = structure_text(kernel_for_spec(apgd_spec("float32", "raw", {})))
    for consts in ({"alpha": 0.1, "l1": 0.01, "l2": 0.5}, {"alpha": 0.1, "l1": -0.5, "l2": 0.0}):
        k = kernel_for_spec(apgd_spec("float32", "raw", consts))
        assert structure_text(k) == general
        assert {str(ins.attr("name")) for ins in k.instrs if ins.op is Op.SINPUT} == set(SCALARS)
    # the scalar form is a variant: folded_reciprocal multiplies by l2 itself
    k = kernel_for_spec(apgd_spec("float32", "folded_reciprocal", {"alpha": 0.1, "l1": 0.5, "l2": 0.25}))
    assert dict(k.variant)["scalar_form"] == "folded_reciprocal"
    assert not any(ins.op is Op.SRECIP for ins in k.instrs)
    # a finite shrink_max is an attribute read at tiling time
    spec = apgd_spec("float16", "raw", {})
    spec = NodeSpec(spec.name, spec.op_type, spec.inputs, {**spec.attrs, "shrink_max": 65504.0})
    k = kernel_for_spec(spec)
    assert dict(k.variant)["shrink_max"] == "finite"
    assert [str(ins.attr("attr")) for ins in k.instrs if is_attr(ins)] == ["shrink_max"]
    for k in (kernel_for_spec(apgd_spec(dt, "raw", {})) for dt in DTYPES):
        assert not any(
            ins.op is Op.CAST and k.instrs[ins.srcs[0]].dtype == ins.dtype for ins in k.instrs
        )


APGD_CASES = [
    ("raw", {}),
    ("raw", {"alpha": 0.125, "l1": 0.25, "l2": 0.5}),
    ("raw", {"alpha": 0.1, "l1": 0.2, "l2": 0.5}),
    ("raw", {"alpha": 0.1, "l1": 0.0, "l2": 0.0}),
    ("raw", {"l1": 0.25}),
    ("raw", {"alpha": 0.25, "l1": -0.375, "l2": 0.5}),
    ("folded", {}),
    ("folded", {"alpha": 0.5, "l1": 0.02, "l2": 1.5}),
    ("folded_reciprocal", {}),
    ("folded_reciprocal", {"alpha": 0.5, "l1": 0.02, "l2": 0.8}),
]
RUNTIME_VALUES = [
    {"alpha": 0.125, "l1": 0.25, "l2": 0.5},
    {"alpha": 0.1, "l1": 0.2, "l2": 0.5},
    {"alpha": 0.25, "l1": -0.375, "l2": 0.5},
    {"alpha": 0.5, "l1": 0.0, "l2": 0.0},
    {"alpha": 0.1, "l1": np.nan, "l2": 0.5},
    {"alpha": np.nan, "l1": 0.2, "l2": 0.5},
    {"alpha": 0.1, "l1": np.inf, "l2": 0.5},
    {"alpha": 1.0, "l1": 0.2, "l2": -1.0},
]


def _apgd_inputs(rng: np.random.Generator, dtype: str, thr: float):
    """Random var/delta plus edges. |prox| == threshold is placed only where the threshold is
    exact in float32 and in the dtype: elsewhere the float64 formula (unrounded threshold) and
    any float32 computation (the kernel's and onnxruntime's alike) differ by an ill-conditioned
    cancellation at that point."""
    n = 320
    var = rng.standard_normal(n)
    delta = rng.standard_normal(n)
    exact = np.isfinite(thr) and float(np.float32(thr)) == thr == float(np.asarray(thr).astype(NP[dtype]))
    edge = thr if exact else 2.5
    with np.errstate(invalid="ignore"):
        var[:10] = [0, -0.0, np.nan, np.inf, -np.inf, 1, 1, 3e4, edge, -edge]
    delta[:10] = [0, 0, 1, 0, 0, np.nan, np.inf, -3e4, 0, 0]
    return var.astype(NP[dtype]), delta.astype(NP[dtype])


def _apgd_golden(var: np.ndarray, delta: np.ndarray, scal: dict[str, np.ndarray], form: str) -> np.ndarray:
    """The float64 formula from prox and threshold as float32 holds them.

    The update is ill-conditioned where |prox| is near the threshold: |prox| - t cancels, so the
    one rounding every float32 computation of prox = var - alpha*delta makes (the kernel's and
    onnxruntime's alike) becomes a relative error without bound (seen: |prox| - t = 1.1e-6,
    kernel 4.9e-3 off the float64 value). From the float32 prox and threshold on, the formula is
    well-conditioned (Sterbenz makes the cancelling subtraction exact), so the standard holds.
    """
    alpha = scal["alpha"].astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        prox = var.astype(np.float32) - alpha * delta.astype(np.float32)
    a = float(alpha[0])
    t, k = proximal_scalars(a, float(scal["l1"][0]), float(scal["l2"][0]), form)
    with np.errstate(over="ignore"):
        t32 = float(np.float32(t))
    return proximal_gd_reference(prox, 0.0, t32, k, np.zeros_like(prox), "folded")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form, consts", APGD_CASES)
def test_apgd_numerics(dtype: str, form: str, consts: dict[str, float], rng: np.random.Generator) -> None:
    for sdtype in (dtype, "float32"):
        k = kernel_for_spec(apgd_spec(dtype, form, consts, sdtype))
        values_list = [consts] if len(consts) == 3 else [{**v, **consts} for v in RUNTIME_VALUES]
        for values in values_list:
            scal = {r: np.asarray([values[r]]).astype(NP[sdtype]) for r in SCALARS}
            a = float(scal["alpha"][0])
            thr = a * float(scal["l1"][0]) if form == "raw" else float(scal["l1"][0])
            var, delta = _apgd_inputs(rng, dtype, thr)
            gold = _apgd_golden(var, delta, scal, form)
            for policy in ("nan", "scalar"):
                got = run_ir(k, {"var": var, "delta": delta, **scal}, policy)["var_out"]
                assert_precise(got, gold, dtype, f"{dtype}/{sdtype} {form} {values} {policy}")


def test_apgd_refusals() -> None:
    spec = apgd_spec("float32", "raw", {})
    with pytest.raises(CodegenError, match="exactly one element"):
        kernel_for_spec(NodeSpec("n", PROXIMAL_GD, {**spec.inputs, "alpha": InputSpec("float32", (2,))}, spec.attrs))
    with pytest.raises(CodegenError, match="scalar_form"):
        kernel_for_spec(NodeSpec("n", PROXIMAL_GD, spec.inputs, {"scalar_form": "odd"}))
    with pytest.raises(CodegenError, match="float32"):
        kernel_for_spec(apgd_spec("float16", "raw", {}, "bfloat16"))
