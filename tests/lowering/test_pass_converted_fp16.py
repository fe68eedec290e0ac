"""Graphs converted to float16 after export (onnxconverter-common's convert_float_to_float16, see
models/make_converted_models.py for the committed fixtures): the converter runs every Max and Min in
float32 between Casts, Cast<f16>(Max(Cast<f32>(a), Cast<f32>(b))). Max and Min return one of their
inputs, so that is Max(a, b) in float16, and normalization narrows it; a constant input counts when
it is a float16 constant widened by a folded Cast."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pass_numerics import assert_runs_as_fused, make_feeds

import lowering

from .pass_forms import PGD, SL1, G

H, F = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT


def _widened(g: G, value: str) -> str:
    return g.op("Cast", value, to=F)


def _in_float32(g: G, op: str, *inputs: str, to: int = H) -> str:
    """op computed in float32 on widened inputs and cast back, as the converter writes it."""
    return g.op("Cast", g.op(op, *(_widened(g, v) for v in inputs)), to=to)


def _prox(zero_of) -> onnx.ModelProto:
    """sign(p) * max(|p| - t, 0) / k in float16, its Max in float32 between Casts."""
    g = G()
    var, delta = g.input("var", H), g.input("delta", H)
    p = g.op("Sub", var, g.op("Mul", delta, g.const(0.1, H)))
    d = g.op("Sub", g.op("Abs", p), g.const(0.005, H))
    clamped = _in_float32(g, "Max", d, zero_of(g))
    out = g.op("Div", g.op("Mul", g.op("Sign", p), clamped), g.const(1.001, H))
    g.output(out, H)
    return g.model()


def _zeros_full(g: G) -> str:  # torch.zeros_like folded to a full-shape initializer (too big to fold)
    return g.const(0.0, H, shape=(3, 4))


def _zero_scalar(g: G) -> str:  # a 0-D float16 zero, whose widening Cast folds
    return g.const(0.0, H)


def _fused(model: onnx.ModelProto) -> tuple[onnx.ModelProto, lowering.FusionReport]:
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, report


@pytest.mark.parametrize("zero_of", [_zeros_full, _zero_scalar], ids=["full-zeros", "scalar-zero"])
def test_proximal_clamp_in_float32_between_casts_fuses(zero_of, rng: np.random.Generator) -> None:
    model = _prox(zero_of)
    fused, report = _fused(model)
    assert [f.op_type for f in report.fusions] == [PGD]
    assert report.normalization["exact ops narrowed"] == 1
    assert report.fusions[0].dtype == "float16"
    for nonfinite in (False, True):
        feeds = make_feeds(model, rng, edges=(0.005,), nonfinite=nonfinite)
        assert_runs_as_fused(model, fused, feeds)


def test_capped_ratio_with_a_widened_constant_one_fuses(rng: np.random.Generator) -> None:
    """sign(x) * min(|x|/beta, 1) * dout with the Min in float32 and its 1 a folded widening."""
    g = G()
    p, t, go = g.input("predict", H), g.input("label", H), g.input("go", H)
    x = g.op("Sub", p, t)
    ratio = g.op("Div", g.op("Abs", x), g.const(0.5, H))
    capped = _in_float32(g, "Min", ratio, g.const(1.0, H, shape=(3, 4)))
    out = g.op("Mul", g.op("Mul", g.op("Sign", x), capped), go)
    g.output(out, H)
    model = g.model()
    fused, report = _fused(model)
    assert [(f.op_type, f.attributes["sigma"]) for f in report.fusions] == [(SL1, 0.5)]
    assert report.normalization["exact ops narrowed"] == 1
    for nonfinite in (False, True):
        feeds = make_feeds(model, rng, edges=(0.5,), nonfinite=nonfinite)
        assert_runs_as_fused(model, fused, feeds)


def test_a_float32_constant_that_is_no_widening_keeps_the_max_in_float32() -> None:
    """Max(Cast<f32>(d), c) with c a float32 constant of its own: which float16 value c stands for
    is not the graph's to say, so nothing is narrowed (the clamp pattern then reads the Max itself)."""
    g = G()
    d = g.input("d", H)
    out = g.op("Cast", g.op("Max", _widened(g, d), g.const(1e-8)), to=H)
    g.output(out, H)
    _, report = _fused(g.model())
    assert "exact ops narrowed" not in report.normalization


def test_a_cast_to_another_narrow_type_is_not_narrowed() -> None:
    """Max over float16 values widened to float32, cast to bfloat16: rounding, not a no-op."""
    g = G()
    a, b = g.input("a", H), g.input("b", H)
    g.output(_in_float32(g, "Max", a, b, to=onnx.TensorProto.BFLOAT16), onnx.TensorProto.BFLOAT16)
    _, report = _fused(g.model())
    assert "exact ops narrowed" not in report.normalization


def _clip_in_float32(g: G, y: str, lo: str, hi: str) -> str:
    """tf.clip_by_value converted: Max(Min(Cast<f32>(y), hi), lo) in float32, one Cast back, the
    bounds left float32 (the converter keeps the constants of the ops it blocks)."""
    return g.op("Cast", g.op("Max", g.op("Min", _widened(g, y), hi), lo), to=H)


def test_smooth_l1_clip_in_float32_with_float32_bounds_fuses(rng: np.random.Generator) -> None:
    g = G()
    p, t, go = g.input("predict", H), g.input("label", H), g.input("go", H)
    ratio = g.op("Mul", g.op("Sub", p, t), g.const(2.0, H))
    out = g.op("Mul", _clip_in_float32(g, ratio, g.const(-1.0), g.const(1.0)), go)
    g.output(out, H)
    model = g.model()
    fused, report = _fused(model)
    assert [(f.op_type, f.attributes["sigma"]) for f in report.fusions] == [(SL1, 0.5)]
    for nonfinite in (False, True):
        assert_runs_as_fused(model, fused, make_feeds(model, rng, edges=(0.5,), nonfinite=nonfinite))


def test_clamp_residual_bound_is_the_float16_value_the_graph_clamps_at(rng: np.random.Generator) -> None:
    """p - clip(p, -t, t) with t = 0.003 in float32: the float16 result is the clamp at t rounded
    to float16, so that is the fused node's threshold."""
    g = G()
    var, delta = g.input("var", H), g.input("delta", H)
    p = g.op("Sub", var, g.op("Mul", delta, g.const(0.1, H)))
    residual = g.op("Sub", p, _clip_in_float32(g, p, g.const(-0.003), g.const(0.003)))
    out = g.op("Mul", residual, g.const(0.99, H))
    g.output(out, H)
    model = g.model()
    fused, report = _fused(model)
    fusion, = report.fusions
    assert fusion.op_type == PGD
    threshold = next(t for t in fused.graph.initializer if t.name == fusion.inputs[2])
    assert float(onnx.numpy_helper.to_array(threshold)) == float(np.float16(0.003)) != 0.003
    # |p| == t is left out: onnxruntime's CPU provider runs that float16 Sub in float32 and drops the
    # Cast back to float16 between them (onnxruntime#8787), so it subtracts the float32 t there
    for nonfinite in (False, True):
        assert_runs_as_fused(model, fused, make_feeds(model, rng, nonfinite=nonfinite))


def test_a_float32_runtime_bound_is_not_read_as_a_float16_one() -> None:
    """clip(p, -t, t) in float32 with t a float32 input: the graph clamps at t rounded at run
    time, which no input of the fused node holds."""
    g = G()
    var, delta, t = g.input("var", H), g.input("delta", H), g.input("t", F, shape=())
    p = g.op("Sub", var, g.op("Mul", delta, g.const(0.1, H)))
    residual = g.op("Sub", p, _clip_in_float32(g, p, g.op("Neg", t), t))
    g.output(g.op("Mul", residual, g.const(0.99, H)), H)
    _, report = _fused(g.model())
    assert not report.fusions
