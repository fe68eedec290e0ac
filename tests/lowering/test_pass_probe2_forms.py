"""Forms found by a second probe of unseen exporter output (2026-12-04), written as the exporters
wrote them: F.threshold as the proximal clamp, and torch.sgn of a float16/bfloat16 tensor, which
the dynamo exporter computes in float32 between two Casts."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from pass_numerics import assert_runs_as_fused, assert_same, fused_nodes, golden_of, precision_ok, run_ort

import lowering

N = 64
NP = {T.FLOAT: np.float32, T.FLOAT16: np.float16, T.BFLOAT16: ml_dtypes.bfloat16}
LR, T1, K = 0.125, 0.0625, 1.03125  # exact in every dtype, so no rounding hides a wrong scalar


def _const(name: str, value: float, dtype: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.float32).astype(NP[dtype]), name)


def _prox(dtype: int, clamp: list[onnx.NodeProto], sign: list[onnx.NodeProto], extra_inits=()) -> onnx.ModelProto:
    """var_out = sign * clamp / K, p = var - LR * delta; `clamp` computes "m" from "d" = |p| - T1,
    `sign` computes "s" from "p"."""
    nodes = [h.make_node("Mul", ["delta", "lr"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sub", ["ap", "t"], ["d"]), *clamp, *sign,
             h.make_node("Mul", ["s", "m"], ["sm"]), h.make_node("Div", ["sm", "k"], ["var_out"])]
    inits = [_const("lr", LR, dtype), _const("t", T1, dtype), _const("k", K, dtype), _const("zero", 0.0, dtype),
             *extra_inits]
    graph = h.make_graph(nodes, "prox", [h.make_tensor_value_info(n, dtype, (N,)) for n in ("var", "delta")],
                         [h.make_tensor_value_info("var_out", dtype, (N,))], inits)
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 20)]))


SIGN = [h.make_node("Sign", ["p"], ["s"])]


def _where_clamp(relation: str) -> list[onnx.NodeProto]:
    """F.threshold(d, 0, 0) is Where(d <= 0, 0, d); the other relations are its relatives."""
    low = relation in ("LessOrEqual", "Less")
    return [h.make_node(relation, ["d", "zero"], ["c"]),
            h.make_node("Where", ["c", "zero", "d"] if low else ["c", "d", "zero"], ["m"])]


def _widened_sign(dtype: int) -> list[onnx.NodeProto]:
    return [h.make_node("Cast", ["p"], ["pf"], to=T.FLOAT), h.make_node("Sign", ["pf"], ["sf"]),
            h.make_node("Cast", ["sf"], ["s"], to=dtype)]


def _feeds(dtype: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    var = rng.standard_normal(N).astype(np.float32)
    var[:6] = [0.0, -0.0, np.nan, np.inf, -np.inf, LR * 0.5]  # NaN, infinities, zero, near the threshold
    return {"var": var.astype(NP[dtype]), "delta": rng.standard_normal(N).astype(np.float32).astype(NP[dtype])}


def _fused_and_checked(model: onnx.ModelProto) -> tuple[onnx.ModelProto, lowering.FusionReport]:
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, report


@pytest.mark.parametrize("relation", ["LessOrEqual", "Less"])
def test_threshold_clamp_fuses(relation: str) -> None:
    model = _prox(T.FLOAT, _where_clamp(relation), SIGN)
    fused, report = _fused_and_checked(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    assert report.fusions[0].pattern == "proximal_gd/where"
    feeds = _feeds(T.FLOAT, np.random.default_rng())
    assert_runs_as_fused(model, fused, feeds)


@pytest.mark.parametrize("relation", ["Greater", "GreaterOrEqual"])
def test_where_clamp_that_sends_nan_to_zero_is_refused(relation: str) -> None:
    model = _prox(T.FLOAT, _where_clamp(relation), SIGN)
    fused, report = lowering.fuse(model, by_meaning=False)
    assert not fused_nodes(fused)
    assert any("NaN in d gives 0" in r.reason for r in report.rejections), report.rejections
    # the whole update still gives NaN there (sign(NaN) * 0), so the recogniser proves it the contract
    fused, report = _fused_and_checked(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    assert_runs_as_fused(model, fused, _feeds(T.FLOAT, np.random.default_rng(18)))


def test_where_clamp_with_a_nonzero_floor_is_not_a_clamp() -> None:
    clamp = [h.make_node("LessOrEqual", ["d", "floor"], ["c"]), h.make_node("Where", ["c", "zero", "d"], ["m"])]
    fused, _ = _fused_and_checked(_prox(T.FLOAT, clamp, SIGN, [_const("floor", 0.5, T.FLOAT)]))
    assert not fused_nodes(fused)


def test_float16_sign_computed_in_float32_fuses() -> None:
    model = _prox(T.FLOAT16, [h.make_node("Max", ["d", "zero"], ["m"])], _widened_sign(T.FLOAT16))
    fused, report = _fused_and_checked(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    assert not report.fusions[0].caveats  # Sign runs in float32: NaN stays NaN in the graph too
    feeds = _feeds(T.FLOAT16, np.random.default_rng())
    assert_runs_as_fused(model, fused, feeds)


def test_bfloat16_sign_computed_in_float32_fuses() -> None:
    model = _prox(T.BFLOAT16, [h.make_node("Max", ["d", "zero"], ["m"])], _widened_sign(T.BFLOAT16))
    fused, report = _fused_and_checked(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    feeds = _feeds(T.BFLOAT16, np.random.default_rng())
    before, = ReferenceEvaluator(model).run(None, feeds)
    after, = ReferenceEvaluator(fused).run(None, feeds)
    assert_same(before, after)


def test_sign_of_a_narrowed_value_is_not_sign_of_p() -> None:
    """Sign(Cast<float16>(p)) is 0 where p underflows float16: not sign(p), so the patterns do not
    fuse it. There |p| is far below the threshold and the clamp is 0, so the update as a whole is
    the contract, and the recogniser fuses it."""
    sign = [h.make_node("Cast", ["p"], ["ph"], to=T.FLOAT16), h.make_node("Sign", ["ph"], ["sh"]),
            h.make_node("Cast", ["sh"], ["s"], to=T.FLOAT)]
    model = _prox(T.FLOAT, [h.make_node("Max", ["d", "zero"], ["m"])], sign)
    fused, _ = lowering.fuse(model, by_meaning=False)
    assert not fused_nodes(fused)
    fused, report = _fused_and_checked(model)
    assert report.counts() == {"ApplyProximalGradientDescent": 1}, report.summary()
    assert_runs_as_fused(model, fused, _feeds(T.FLOAT, np.random.default_rng(18)))


def _sl1_half(sign: list[onnx.NodeProto]) -> onnx.ModelProto:
    """torch.where(|x| < 0.5, go*x/0.5, go*sign(x)) in native float16; `sign` computes "s" from "x"."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
             h.make_node("Less", ["ax", "beta"], ["lt"]), h.make_node("Mul", ["go", "x"], ["gx"]),
             h.make_node("Div", ["gx", "beta"], ["lin"]), *sign, h.make_node("Mul", ["go", "s"], ["gs"]),
             h.make_node("Where", ["lt", "lin", "gs"], ["grad"])]
    inputs = [h.make_tensor_value_info("go", T.FLOAT16, ()),
              *(h.make_tensor_value_info(n, T.FLOAT16, (N,)) for n in ("p", "t"))]
    graph = h.make_graph(nodes, "sl1", inputs, [h.make_tensor_value_info("grad", T.FLOAT16, (N,))],
                         [_const("beta", 0.5, T.FLOAT16)])
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 20)]))


@pytest.mark.parametrize("widened", [True, False], ids=["sign-in-float32", "native-sign"])
def test_float16_smooth_l1_caveat_only_for_a_native_float16_sign(widened: bool) -> None:
    sign = ([h.make_node("Cast", ["x"], ["xf"], to=T.FLOAT), h.make_node("Sign", ["xf"], ["sf"]),
             h.make_node("Cast", ["sf"], ["s"], to=T.FLOAT16)] if widened else [h.make_node("Sign", ["x"], ["s"])])
    model = _sl1_half(sign)
    fused, report = _fused_and_checked(model)
    assert report.counts() == {"SmoothL1LossGradV2": 1}, report.summary()
    caveats = report.fusions[0].caveats
    assert bool([c for c in caveats if "float16 Sign maps NaN to 0" in c]) is not widened, caveats
    rng = np.random.default_rng()
    p = rng.standard_normal(N).astype(np.float16)
    p[:3] = [np.nan, np.inf, 0.0]
    feeds = {"go": np.array(1.5, np.float16), "p": p, "t": rng.standard_normal(N).astype(np.float16)}
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    if widened:  # where the graph's own Sign keeps NaN, the fused node agrees with it everywhere
        node, = fused_nodes(fused)
        ok, detail = precision_ok(before, golden_of(fused, node, feeds), before.dtype)
        assert ok, detail
