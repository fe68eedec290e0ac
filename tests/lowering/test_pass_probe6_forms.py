"""Proximal shrink forms a probe of TensorFlow user code found (2026-12-05), written here with
onnx.helper so that the Where spellings (which tf2onnx turns into arithmetic selects) are
covered too; the tf2onnx spellings are fixtures (models/make_tf_models.py, probe_cases).

Each fuses (or is refused with a reason) as its semantics demand: the fused model computes what
the unfused one does, NaN and inf included, and the fused node's contract formula agrees with it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from pass_numerics import assert_fuses_once, assert_same, fused_nodes, golden_of, precision_ok, run_ort

import lowering

N = 16
PGD = "ApplyProximalGradientDescent"


def _prox(shrink: list[onnx.NodeProto], shrunk: str, t: float | None = 0.05) -> onnx.ModelProto:
    """shrink(p) / 1.25 with p = var - lr*delta; the nodes read p, t and -t (t None: an input)."""
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]), *shrink,
             h.make_node("Div", [shrunk, "k"], ["var_out"])]
    inputs = [("var", (N,)), ("delta", (N,)), ("lr", ())]
    constants = [numpy_helper.from_array(np.array(1.25, np.float32), "k"),
                 numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    if t is None:
        inputs.append(("t", ()))
        nodes.insert(0, h.make_node("Neg", ["t"], ["neg_t"]))
    else:
        constants += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("t", t), ("neg_t", -t))]
    graph = h.make_graph(nodes, "probe6", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info("var_out", T.FLOAT, (N,))], constants)
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def _nested(else_branch: str = "p0", outer: str = "Greater") -> list[onnx.NodeProto]:
    """Where(p > t, p - t, Where(p < -t, p + t, p*0)), or the low side tested first."""
    high = [h.make_node("Greater", ["p", "t"], ["hi"]), h.make_node("Sub", ["p", "t"], ["moved_down"])]
    low = [h.make_node("Less", ["p", "neg_t"], ["lo"]), h.make_node("Add", ["p", "t"], ["moved_up"])]
    zero = [h.make_node("Mul", ["p", "zero"], ["p0"])]
    if outer == "Greater":
        selects = [h.make_node("Where", ["lo", "moved_up", else_branch], ["inner"]),
                   h.make_node("Where", ["hi", "moved_down", "inner"], ["shrunk"])]
    else:
        selects = [h.make_node("Where", ["hi", "moved_down", else_branch], ["inner"]),
                   h.make_node("Where", ["lo", "moved_up", "inner"], ["shrunk"])]
    return high + low + zero + selects


def _feeds(t: float = 0.05) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    feeds = {n: (rng.standard_normal(N) * 0.1).astype(np.float32) for n in ("var", "delta")}
    feeds["var"][:9] = [t, -t, 0.0, -0.0, np.nan, np.inf, -np.inf, np.nextafter(np.float32(t), 1), 1e30]
    feeds["delta"][:9] = 0.0
    feeds["lr"] = np.array(0.3, np.float32)
    return feeds


@pytest.mark.parametrize("outer", ["Greater", "Less"])
def test_nested_where_softshrink_fuses(outer: str) -> None:
    # NaN fails both comparisons and ends in p*0 = NaN; +-inf takes a side: the shrink everywhere
    node = assert_fuses_once(_prox(_nested(outer=outer), "shrunk"), PGD, _feeds())
    assert node.op_type == PGD


def test_nested_where_softshrink_with_a_plain_zero_is_refused() -> None:
    _, report = lowering.fuse(_prox(_nested(else_branch="zero"), "shrunk"))
    assert not report.fusions
    assert any("NaN in p gives 0 there" in r.reason for r in report.rejections), report.summary()


def test_nested_where_softshrink_with_a_runtime_t_is_refused() -> None:
    _, report = lowering.fuse(_prox(_nested(), "shrunk", t=None))
    assert not report.fusions
    assert any("only for t >= 0, and t is a runtime value" in r.reason for r in report.rejections), report.summary()


def test_nested_where_softshrink_with_a_negative_t_is_refused() -> None:
    _, report = lowering.fuse(_prox(_nested(), "shrunk", t=-0.05))
    assert not report.fusions
    assert any("for t < 0 the sides overlap" in r.reason for r in report.rejections), report.summary()


def test_min_residual_is_the_shrink_for_a_negative_runtime_t() -> None:
    # p - sign(p)*min(|p|, t): for t < 0 the Min is t and the result p - sign(p)*t, which is
    # sign(p)*max(|p| - t, 0) too; the fused node reads t as given
    shrink = [h.make_node("Sign", ["p"], ["s"]), h.make_node("Abs", ["p"], ["a"]),
              h.make_node("Min", ["a", "t"], ["capped"]), h.make_node("Mul", ["s", "capped"], ["shift"]),
              h.make_node("Sub", ["p", "shift"], ["shrunk"])]
    model = _prox(shrink, "shrunk", t=None)
    for t in (0.05, -0.05, 0.0):
        assert_fuses_once(model, PGD, {**_feeds(t), "t": np.array(t, np.float32)})


def _over_floored_abs(floor: str, beta: float) -> onnx.ModelProto:
    """x / max(|x|, beta) * go / numel, the floor as Max or as Clip(|x|, min=beta) (torch.clamp)."""
    floor_node = (h.make_node("Max", ["a", "beta"], ["floor"]) if floor == "Max"
                  else h.make_node("Clip", ["a", "beta"], ["floor"]))
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["a"]), floor_node,
             h.make_node("Div", ["x", "floor"], ["ratio"]), h.make_node("Mul", ["ratio", "go"], ["scaled"]),
             h.make_node("Div", ["scaled", "n"], ["grad"])]
    constants = [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in (("beta", beta), ("n", N))]
    inputs = [h.make_tensor_value_info("p", T.FLOAT, (N,)), h.make_tensor_value_info("t", T.FLOAT, (N,)),
              h.make_tensor_value_info("go", T.FLOAT, ())]
    graph = h.make_graph(nodes, "over_floored_abs", inputs, [h.make_tensor_value_info("grad", T.FLOAT, (N,))], constants)
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


@pytest.mark.parametrize("floor", ["Max", "Clip"])
def test_x_over_floored_abs_fuses_with_its_inf_caveat(floor: str) -> None:
    model = _over_floored_abs(floor, 0.5)
    rng = np.random.default_rng()
    feeds = {"p": rng.standard_normal(N).astype(np.float32), "t": rng.standard_normal(N).astype(np.float32),
             "go": np.array(1.5, np.float32)}
    feeds["p"][:5], feeds["t"][:5] = [0.5, -0.5, 0.0, np.nan, 0.49999997], 0.0
    fused, report = lowering.fuse(model)
    fusion, = report.fusions
    assert fusion.attributes == {"sigma": 0.5, "reduction": "mean", "scale": 1.0}
    assert any("inf/inf" in c for c in fusion.caveats)
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    node, = fused_nodes(fused)
    ok, detail = precision_ok(run_ort(model, feeds)[0], golden_of(fused, node, feeds), np.float32)
    assert ok, detail


def test_x_over_floored_abs_with_beta_zero_is_refused() -> None:
    _, report = lowering.fuse(_over_floored_abs("Max", 0.0))
    assert not report.fusions and any("0/0 = NaN at x = 0" in r.reason for r in report.rejections), report.summary()


def test_nested_selects_with_p_plus_p_are_no_softshrink() -> None:
    # where(p > t, p + p, ...): the branch has no shift by t; once the reader unpacked it and crashed
    shrink = _nested()
    shrink[1] = h.make_node("Add", ["p", "p"], ["moved_down"])
    _, report = lowering.fuse(_prox(shrink, "shrunk"))
    assert not report.fusions
