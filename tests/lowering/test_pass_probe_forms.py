"""Forms found by exporting unseen user code (2026-12-03), written as the exporters wrote them.

Each fuses (or is refused with a reason) as its semantics demand; a fused model computes what the
unfused one does (onnx.reference for bfloat16, which onnxruntime's CPU provider cannot run).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from pass_numerics import assert_same, fused_nodes, golden_of, precision_ok, run_ort

import lowering

N = 12
NP = {T.FLOAT: np.float32, T.FLOAT16: np.float16, T.BFLOAT16: ml_dtypes.bfloat16}


def _const(name: str, value: float, dtype: int = T.FLOAT, shape: tuple[int, ...] = ()) -> onnx.NodeProto:
    array = np.full(shape, value, np.float32).astype(NP[dtype])
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _model(nodes: list, inputs: dict[str, tuple[int, tuple]], output: str, dtype: int, opset: int = 17) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "probe", [h.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                         [h.make_tensor_value_info(output, dtype, (N,))])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model)


def _feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        feeds[vi.name] = (rng.standard_normal(shape) * 2).astype(np.float32).astype(NP[t.elem_type])
    return feeds


def _fuse(model: onnx.ModelProto) -> tuple[onnx.ModelProto, lowering.FusionReport]:
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, report


def _sl1_where(dtype: int, beta_compare: float, divisor: onnx.NodeProto) -> onnx.ModelProto:
    """TorchScript's native half/bfloat16 where-form: the compare widens |x| to float32."""
    nodes = [
        h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
        h.make_node("Cast", ["ax"], ["axf"], to=T.FLOAT), _const("beta", beta_compare),
        h.make_node("Less", ["axf", "beta"], ["lt"]), h.make_node("Mul", ["go", "x"], ["gx"]), divisor,
        h.make_node("Div", ["gx", "div"], ["lin"]), h.make_node("Sign", ["x"], ["sx"]),
        h.make_node("Mul", ["go", "sx"], ["gs"]), h.make_node("Where", ["lt", "lin", "gs"], ["grad"]),
    ]
    return _model(nodes, {"go": (dtype, ()), "p": (dtype, (N,)), "t": (dtype, (N,))}, "grad", dtype)


@pytest.mark.parametrize("divisor", [
    _const("div", 0.5, T.BFLOAT16),  # TorchScript: a bfloat16 Constant node
    h.make_node("Cast", ["beta"], ["div"], to=T.BFLOAT16),  # dynamo: Cast<bfloat16> of the float32 beta
], ids=["bf16-constant", "cast-to-bf16"])
def test_native_bfloat16_where_fuses(divisor: onnx.NodeProto) -> None:
    model = _sl1_where(T.BFLOAT16, 0.5, divisor)
    fused, report = _fuse(model)
    assert report.counts() == {"SmoothL1LossGradV2": 1}, report.summary()
    assert report.fusions[0].attributes == {"sigma": 0.5, "reduction": "sum", "scale": 1.0}
    feeds = _feeds(model, np.random.default_rng())
    before, = ReferenceEvaluator(model).run(None, feeds)
    after, = ReferenceEvaluator(fused).run(None, feeds)
    assert_same(before, after)


def test_half_divisor_rounded_from_the_compared_beta_fuses() -> None:
    # compares with 0.3 in float32, divides by 0.3 rounded to float16 (0.30005): one beta
    model = _sl1_where(T.FLOAT16, 0.3, _const("div", 0.3, T.FLOAT16))
    fused, report = _fuse(model)
    assert report.counts() == {"SmoothL1LossGradV2": 1}, report.summary()
    assert report.fusions[0].attributes["sigma"] == pytest.approx(0.3)
    node, = fused_nodes(fused)
    feeds = _feeds(model, np.random.default_rng())
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(fused, feeds)[0], golden_of(fused, node, feeds), np.float16)
    assert ok, detail


def test_half_divisor_beyond_rounding_is_refused() -> None:
    model = _sl1_where(T.FLOAT16, 0.3, _const("div", 0.31, T.FLOAT16))
    _, report = _fuse(model)
    assert not report.fusions
    assert any("scales x by" in r.reason for r in report.rejections), report.summary()


def test_clamp_as_max_and_min_fuses_with_the_mean() -> None:
    """The dynamo exporter before its optimizer: torch.clamp(d/2, -1, 1) as Min(Max(.)) and the
    mean as a final Div by numel."""
    nodes = [
        h.make_node("Sub", ["p", "t"], ["x"]), _const("two", 2.0), h.make_node("Div", ["x", "two"], ["y"]),
        _const("lo", -1.0), _const("hi", 1.0),
        h.make_node("Max", ["y", "lo"], ["c1"]), h.make_node("Min", ["c1", "hi"], ["clamp"]),
        h.make_node("Mul", ["clamp", "go"], ["m"]), _const("n", float(N)), h.make_node("Div", ["m", "n"], ["grad"]),
    ]
    model = _model(nodes, {"go": (T.FLOAT, ()), "p": (T.FLOAT, (N,)), "t": (T.FLOAT, (N,))}, "grad", T.FLOAT)
    fused, report = _fuse(model)
    assert report.counts() == {"SmoothL1LossGradV2": 1}, report.summary()
    assert report.fusions[0].attributes == {"sigma": 2.0, "reduction": "mean", "scale": 1.0}
    node, = fused_nodes(fused)
    feeds = _feeds(model, np.random.default_rng())
    feeds["p"][:3] = [np.nan, 2.0, -2.0]  # NaN, and |x| == beta where label is 0
    feeds["t"][:3] = 0.0
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(fused, feeds)[0], golden_of(fused, node, feeds), np.float32)
    assert ok, detail


def _prox(zero: list, zero_name: str, extra_inputs: dict | None = None) -> onnx.ModelProto:
    """sign(p) * Max(|p| - t, zero) / k with p = var - lr*delta and a zero the test supplies."""
    nodes = [
        h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
        h.make_node("Abs", ["p"], ["ap"]), _const("t", 0.01), h.make_node("Sub", ["ap", "t"], ["d"]), *zero,
        h.make_node("Max", ["d", zero_name], ["clamp"]), h.make_node("Sign", ["p"], ["s"]),
        h.make_node("Mul", ["s", "clamp"], ["u"]), _const("k", 1.01), h.make_node("Div", ["u", "k"], ["var_out"]),
    ]
    inputs = {"var": (T.FLOAT, (N,)), "delta": (T.FLOAT, (N,)), "lr": (T.FLOAT, ()), **(extra_inputs or {})}
    graph = h.make_graph(nodes, "probe", [h.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                         [h.make_tensor_value_info("var_out", T.FLOAT, None)])
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def test_zeros_like_as_expand_fuses() -> None:
    zero = [_const("z0", 0.0), h.make_node("Shape", ["p"], ["shape"]), h.make_node("Expand", ["z0", "shape"], ["zeros"])]
    model = _prox(zero, "zeros")
    fused, report = _fuse(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    feeds = _feeds(model, np.random.default_rng())
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


@pytest.mark.parametrize("zero_kind", ["expand-to-other-shape", "constant-of-larger-shape"])
def test_zeros_that_broadcast_the_update_are_not_a_clamp(zero_kind: str) -> None:
    if zero_kind == "expand-to-other-shape":
        zero = [_const("z0", 0.0), h.make_node("Shape", ["other"], ["shape"]),
                h.make_node("Expand", ["z0", "shape"], ["zeros"])]
        model = _prox(zero, "zeros", {"other": (T.FLOAT, (3, N))})
    else:
        model = _prox([_const("zeros", 0.0, shape=(3, N))], "zeros")
    _, report = _fuse(model)
    assert not report.fusions, report.summary()


def _softshrink(else_branch: list, else_name: str, shift: onnx.NodeProto, dtype: int = T.FLOAT) -> onnx.ModelProto:
    nodes = [
        h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
        h.make_node("Abs", ["p"], ["ap"]), h.make_node("Cast", ["ap"], ["apf"], to=T.FLOAT), _const("t", 0.05),
        h.make_node("Greater", ["apf", "t"], ["gt"]), h.make_node("Sign", ["p"], ["s"]), shift,
        h.make_node("Mul", ["s", "shift"], ["ts"]), h.make_node("Sub", ["p", "ts"], ["moved"]), *else_branch,
        h.make_node("Where", ["gt", "moved", else_name], ["w"]), _const("k", 1.0, dtype),
        _const("k2", 1.03125, dtype), h.make_node("Div", ["w", "k2"], ["var_out"]),
    ]
    graph = h.make_graph(nodes, "probe", [h.make_tensor_value_info(n, dtype, s) for n, s in
                                          (("var", (N,)), ("delta", (N,)), ("lr", ()))],
                         [h.make_tensor_value_info("var_out", dtype, None)])
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def test_softshrink_with_zeros_instead_of_p_times_0_is_refused_with_its_reason() -> None:
    model = _softshrink([_const("zeros", 0.0, shape=(N,))], "zeros", _const("shift", 0.05))
    _, report = _fuse(model)
    assert not report.fusions
    assert any("NaN in p gives 0" in r.reason for r in report.rejections), report.summary()


def test_softshrink_shifting_by_another_threshold_is_refused_with_its_reason() -> None:
    # float16 graph: compares |p| with 0.05 in float32 but shifts p by 0.0625; for |p| between
    # them the graph gives a negative magnitude, so near |p| == t it is no shrink
    times_zero = [_const("zero", 0.0, T.FLOAT16), h.make_node("Mul", ["p", "zero"], ["p0"])]
    model = _softshrink(times_zero, "p0", _const("shift", 0.0625, T.FLOAT16), T.FLOAT16)
    _, report = _fuse(model)
    assert not report.fusions
    assert any("shifts p by" in r.reason for r in report.rejections), report.summary()
    exact = _softshrink(times_zero, "p0", _const("shift", 0.0625, T.FLOAT16), T.FLOAT16)
    exact.graph.node[4].CopyFrom(_const("t", 0.0625))
    _, report = _fuse(exact)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()


def test_softshrink_shifting_by_the_threshold_rounded_to_float16_fuses() -> None:
    # torch's softshrink on a half tensor: compares |p| (widened) with 0.05 in float32 and shifts
    # by 0.05 rounded to float16 (0.049988); no float16 lies between the two, so the graph is the
    # shrink at the rounded threshold, which the fused node takes
    times_zero = [_const("zero", 0.0, T.FLOAT16), h.make_node("Mul", ["p", "zero"], ["p0"])]
    model = _softshrink(times_zero, "p0", _const("shift", 0.05, T.FLOAT16), T.FLOAT16)
    fused, report = _fuse(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    node, = fused_nodes(fused)
    feeds = _feeds(model, np.random.default_rng())
    rounded = np.float16(0.05)
    above = np.nextafter(rounded, np.float16(1))
    feeds["var"][:8] = [rounded, -rounded, above, -above, np.nextafter(rounded, np.float16(0)), np.nan, np.inf, 0.0]
    feeds["lr"] = np.float16(0.0)
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    ok, detail = precision_ok(after, golden_of(fused, node, feeds), np.float16)
    assert ok, detail
