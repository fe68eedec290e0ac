"""Forms found by exporting unseen user code (2026-12-04), written as the exporters wrote them.

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
from pass_numerics import (assert_fuses_once, assert_same, assert_same_outputs, fused_nodes, golden_of, precision_ok,
                           rounding_bound_ok, run_ort)

import lowering

N = 16
PGD, SL1 = "ApplyProximalGradientDescent", "SmoothL1LossGradV2"


def _const(name: str, value: float, shape: tuple[int, ...] = ()) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.full(shape, value, np.float32), name))


def _prox(shrink: list, shrunk: str, t: float = 0.05, runtime_t: bool = False) -> onnx.ModelProto:
    """shrink(p) / 1.25 with p = var - lr*delta; the test's nodes read p and t."""
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]), *shrink,
             _const("k", 1.25), h.make_node("Div", [shrunk, "k"], ["var_out"])]
    inputs = [("var", (N,)), ("delta", (N,)), ("lr", ())] + ([("t", ())] if runtime_t else [])
    # an initializer, not a Constant node: the contract's formula reads the fused node's inputs
    constants = [] if runtime_t else [numpy_helper.from_array(np.array(t, np.float32), "t")]
    graph = h.make_graph(nodes, "probe3", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info("var_out", T.FLOAT, (N,))], constants)
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def _edge_feeds(model: onnx.ModelProto, t: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    feeds = {vi.name: rng.standard_normal(tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)).astype(np.float32)
             * np.float32(0.1) for vi in model.graph.input}
    feeds["var"][:9] = [t, -t, 0.0, -0.0, np.nan, np.inf, -np.inf, np.nextafter(np.float32(t), 1), 1e30]
    feeds["delta"][:9] = 0.0
    feeds["lr"] = np.float32(0.3)
    return feeds


def _assert_not_fused(model: onnx.ModelProto, reason: str | None = None) -> None:
    _, report = lowering.fuse(model)
    assert not report.fusions, report.summary()
    if reason is not None:
        assert any(reason in r.reason for r in report.rejections), report.summary()


def _zeros() -> onnx.NodeProto:
    return _const("zero", 0.0)


def test_softshrink_with_zeros_where_p_is_small_fuses() -> None:
    # torch.where(|p| <= t, zeros, p - sign(p)*t): NaN fails the comparison and takes the shift
    # branch, so it stays NaN as in the fused op (the mirrored Where(|p| > t, ..., 0) does not)
    shrink = [h.make_node("Abs", ["p"], ["ap"]), h.make_node("LessOrEqual", ["ap", "t"], ["small"]),
              h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "t"], ["st"]),
              h.make_node("Sub", ["p", "st"], ["moved"]), _const("zeros", 0.0, (N,)),
              h.make_node("Where", ["small", "zeros", "moved"], ["shrunk"])]
    model = _prox(shrink, "shrunk")
    assert_fuses_once(model, PGD, _edge_feeds(model, 0.05))


def _relu_plus_min(first: str = "Relu", second: str = "Min") -> list:
    """relu(p - t) + min(p + t, 0), each clamp in the spelling asked for."""
    nodes = [h.make_node("Sub", ["p", "t"], ["d"]), h.make_node("Add", ["p", "t"], ["e"]), _zeros()]
    if first == "Relu":
        nodes.append(h.make_node("Relu", ["d"], ["hi"]))
    else:
        nodes.append(h.make_node("Clip", ["d", "zero"], ["hi"]))
    if second == "Min":
        nodes.append(h.make_node("Min", ["e", "zero"], ["lo"]))
    else:
        nodes.append(h.make_node("Clip", ["e", "", "zero"], ["lo"]))
    return nodes + [h.make_node("Add", ["hi", "lo"], ["shrunk"])]


def test_relu_plus_negative_part_fuses() -> None:
    # torch.clamp(p - t, min=0) + torch.clamp(p + t, max=0): min(e, 0) is -relu(-e)
    model = _prox(_relu_plus_min(), "shrunk")
    node = assert_fuses_once(model, PGD, _edge_feeds(model, 0.05))
    assert not any(a.name == "shrink_max" for a in node.attribute)


def test_relu_plus_negative_part_as_clips_keeps_the_clip_bound() -> None:
    # TorchScript's clamp(min=0) / clamp(max=0): Clip with a bound left out maps inf to the
    # largest finite value, which the fused node keeps as shrink_max
    model = _prox(_relu_plus_min("Clip", "Clip"), "shrunk")
    node = assert_fuses_once(model, PGD, _edge_feeds(model, 0.05))
    shrink_max = next(a.f for a in node.attribute if a.name == "shrink_max")
    assert shrink_max == np.finfo(np.float32).max


def test_relu_plus_negative_part_mixing_clip_and_min_is_not_fused() -> None:
    # +inf would map to the largest finite value and -inf stay -inf: no one shrink_max says that
    _assert_not_fused(_prox(_relu_plus_min("Clip", "Min"), "shrunk"))


def test_relu_plus_negative_part_with_a_runtime_or_negative_threshold_is_refused() -> None:
    _assert_not_fused(_prox(_relu_plus_min(), "shrunk", runtime_t=True), "t is a runtime value")
    _assert_not_fused(_prox(_relu_plus_min(), "shrunk", t=-0.05), "for t < 0 it is 2p near 0")


def test_relu_difference_of_clips_fuses() -> None:
    # TorchScript's (p - t).clamp(min=0) - (-p - t).clamp(min=0)
    shrink = [h.make_node("Sub", ["p", "t"], ["d"]), h.make_node("Neg", ["p"], ["np"]),
              h.make_node("Sub", ["np", "t"], ["e"]), _zeros(),
              h.make_node("Clip", ["d", "zero"], ["hi"]), h.make_node("Clip", ["e", "zero"], ["lo"]),
              h.make_node("Sub", ["hi", "lo"], ["shrunk"])]
    model = _prox(shrink, "shrunk")
    node = assert_fuses_once(model, PGD, _edge_feeds(model, 0.05))
    assert any(a.name == "shrink_max" for a in node.attribute)


def test_sign_times_shrunk_magnitude_times_a_float_mask_fuses() -> None:
    # torch.sign(p) * (|p| - t) * (|p| > t).float()
    shrink = [h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sign", ["p"], ["s"]),
              h.make_node("Sub", ["ap", "t"], ["d"]), h.make_node("Mul", ["s", "d"], ["sd"]),
              h.make_node("Greater", ["ap", "t"], ["big"]), h.make_node("Cast", ["big"], ["mask"], to=T.FLOAT),
              h.make_node("Mul", ["sd", "mask"], ["shrunk"])]
    model = _prox(shrink, "shrunk")
    assert_fuses_once(model, PGD, _edge_feeds(model, 0.05))


def test_sign_times_magnitude_shifted_by_another_threshold_is_not_fused() -> None:
    shrink = [h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sign", ["p"], ["s"]), _const("u", 0.06),
              h.make_node("Sub", ["ap", "u"], ["d"]), h.make_node("Mul", ["s", "d"], ["sd"]),
              h.make_node("Greater", ["ap", "t"], ["big"]), h.make_node("Cast", ["big"], ["mask"], to=T.FLOAT),
              h.make_node("Mul", ["sd", "mask"], ["shrunk"])]
    _assert_not_fused(_prox(shrink, "shrunk"))


def _capped_ratio(clip_inputs: list[str], extra: list) -> onnx.ModelProto:
    """sign(x) * Clip(|x|/0.5, ...) * go with x = p - t."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Sign", ["x"], ["s"]),
             h.make_node("Abs", ["x"], ["ax"]), _const("beta", 0.5), h.make_node("Div", ["ax", "beta"], ["r"]),
             _const("one", 1.0), *extra, h.make_node("Clip", ["r", *clip_inputs], ["capped"]),
             h.make_node("Mul", ["s", "capped"], ["g"]), h.make_node("Mul", ["g", "go"], ["grad"])]
    inputs = [("p", (N,)), ("t", (N,)), ("go", ())]
    graph = h.make_graph(nodes, "probe3", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info("grad", T.FLOAT, (N,))])
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def test_capped_ratio_as_clamp_max_fuses() -> None:
    # torch.clamp(|x|/beta, max=1): Clip(r, '', 1), also with a lower bound that cannot bind
    for clip_inputs, extra in (([" ", "one"], []), (["zero", "one"], [_zeros()])):
        clip_inputs = ["" if n == " " else n for n in clip_inputs]
        model = _capped_ratio(clip_inputs, extra)
        rng = np.random.default_rng()
        feeds = {"p": rng.standard_normal(N).astype(np.float32), "t": rng.standard_normal(N).astype(np.float32),
                 "go": np.float32(rng.standard_normal())}
        feeds["p"][:6] = [0.5, -0.5, 0.0, np.nan, np.inf, -np.inf]
        feeds["t"][:6] = 0.0
        node = assert_fuses_once(model, SL1, feeds)
        assert next(a.f for a in node.attribute if a.name == "sigma") == 0.5


def test_capped_ratio_with_a_binding_lower_bound_is_not_fused() -> None:
    _assert_not_fused(_capped_ratio(["half", "one"], [_const("half", 0.5)]))


@pytest.mark.parametrize("one_step", [False, True])
def test_two_updates_sharing_their_step_both_fuse(one_step: bool) -> None:
    # dynamo without its optimizer writes lr*delta once per update, merged by normalization into
    # one Mul (that ended in an internal error before); with its optimizer, or TorchScript, the
    # exporter shares one Mul itself. The Mul stays, and each update reads it as delta, alpha 1
    nodes, outputs = [_const("t", 0.05), _const("k", 1.25), _const("zero", 0.0)], []
    for v in ("var", "var2"):
        step = "step_var" if one_step else f"step_{v}"
        if not one_step or v == "var":
            nodes += [_const(f"lr_{v}", 0.1), h.make_node("Mul", ["delta", f"lr_{v}"], [step])]
        nodes += [h.make_node("Sub", [v, step], [f"p_{v}"]), h.make_node("Abs", [f"p_{v}"], [f"a_{v}"]),
                  h.make_node("Sub", [f"a_{v}", "t"], [f"d_{v}"]), h.make_node("Max", [f"d_{v}", "zero"], [f"m_{v}"]),
                  h.make_node("Sign", [f"p_{v}"], [f"s_{v}"]), h.make_node("Mul", [f"s_{v}", f"m_{v}"], [f"sm_{v}"]),
                  h.make_node("Div", [f"sm_{v}", "k"], [f"out_{v}"])]
        outputs.append(h.make_tensor_value_info(f"out_{v}", T.FLOAT, (N,)))
    graph = h.make_graph(nodes, "shared_step", [h.make_tensor_value_info(n, T.FLOAT, (N,)) for n in ("var", "var2", "delta")],
                         outputs)
    model = onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {PGD: 2}, report.summary()
    in_model = {n.name: list(n.input) for n in fused_nodes(fused)}
    assert all(in_model[f.node] == f.inputs for f in report.fusions)
    feeds = _edge_feeds(model, 0.05)
    del feeds["lr"]
    feeds["var2"] = -feeds["var"]
    assert_same_outputs(model, fused, feeds)
    for node, out in zip(fused_nodes(fused), run_ort(fused, feeds)):
        ok, detail = precision_ok(out, golden_of(fused, node, {**feeds, **_intermediates(fused, feeds)}), np.float32)
        assert ok, detail


def _intermediates(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value the standard nodes of a fused model compute, for the fused nodes' formulas."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [o for n in probe.graph.node if n.domain != "com.huawei.ascend" for o in n.output]
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    return dict(zip(names, run_ort(probe, feeds)))


def test_update_of_a_one_element_parameter_fuses() -> None:
    # Linear(d, 1).bias has shape [1]; a 0-D parameter too: delta is the factor shaped like var,
    # also when a runtime lr of shape [1] stands beside it
    for shape, runtime_lr in (((1,), False), ((), False), ((1,), True)):
        nodes = [_const("zero", 0.0), h.make_node("Mul", ["delta", "lr"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
                 h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sub", ["ap", "t"], ["d"]),
                 h.make_node("Max", ["d", "zero"], ["m"]), h.make_node("Sign", ["p"], ["s"]),
                 h.make_node("Mul", ["s", "m"], ["sm"]), h.make_node("Div", ["sm", "k"], ["var_out"])]
        inputs = [("var", shape), ("delta", shape)] + ([("lr", (1,))] if runtime_lr else [])
        constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("t", 0.05), ("k", 1.25))]
        constants += [] if runtime_lr else [numpy_helper.from_array(np.array(0.3, np.float32), "lr")]
        graph = h.make_graph(nodes, "bias", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                             [h.make_tensor_value_info("var_out", T.FLOAT, shape)], constants)
        model = onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
        fused, report = lowering.fuse(model)
        onnx.checker.check_model(fused, full_check=True)
        assert report.counts() == {PGD: 1}, (shape, runtime_lr, report.summary())
        node, = fused_nodes(fused)
        assert node.input[0] == "var" and node.input[4] in ("delta", "lr")
        for value in (0.05, -0.05, 0.0, np.nan, np.inf, 0.7):
            feeds = {"var": np.full(shape, value, np.float32), "delta": np.full(shape, 0.25, np.float32)}
            if runtime_lr:
                feeds["lr"] = np.full((1,), 0.3, np.float32)
            before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
            assert_same(before, after)
            ok, detail = precision_ok(before, golden_of(fused, node, feeds), np.float32)
            assert ok, detail


def _select_sum_grad(terms: str = "fvcore", second_cond: str = "lt") -> onnx.ModelProto:
    """torch.autograd.grad of torch.where(|x| < 0.25, 0.5*|x|**2/0.25, |x| - 0.125), with the
    upstream gradient g a graph input: Where(lt, 0, g) + (Where(lt, g, 0)/0.25*0.5)*(Pow(|x|, 1)*2)
    (fvcore) or the mmdet spelling with two terms for 0.5*n*n; all times Sign(x)."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["n"]),
             h.make_node("Less", ["n", "beta"], ["lt"]), h.make_node("LessOrEqual", ["n", "beta"], ["le"]),
             h.make_node("Where", ["lt", "zero", "g"], ["outer"]),
             h.make_node("Where", [second_cond, "g", "zero"], ["inner"]),
             h.make_node("Div", ["inner", "beta"], ["gb"])]
    if terms == "fvcore":
        nodes += [h.make_node("Mul", ["gb", "half"], ["gbh"]), h.make_node("Pow", ["n", "one"], ["n1"]),
                  h.make_node("Mul", ["n1", "two"], ["n2"]), h.make_node("Mul", ["gbh", "n2"], ["t2"]),
                  h.make_node("Add", ["outer", "t2"], ["sum"])]
    else:  # mmdet; "cancel" makes the two halves opposite
        nodes += [h.make_node("Mul", ["n", "half"], ["nh"]), h.make_node("Mul", ["gb", "nh"], ["t2"]),
                  h.make_node("Mul", ["gb", "n"], ["gn"]),
                  h.make_node("Mul", ["gn", "minus_half" if terms == "cancel" else "half"], ["t3"]),
                  h.make_node("Add", ["outer", "t2"], ["s1"]), h.make_node("Add", ["s1", "t3"], ["sum"])]
    nodes += [h.make_node("Sign", ["x"], ["s"]), h.make_node("Mul", ["sum", "s"], ["grad"])]
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                 (("beta", 0.25), ("zero", 0.0), ("half", 0.5), ("minus_half", -0.5), ("one", 1.0), ("two", 2.0))]
    graph = h.make_graph(nodes, "select_sum", [h.make_tensor_value_info(n, T.FLOAT, (N,)) for n in ("p", "t", "g")],
                         [h.make_tensor_value_info("grad", T.FLOAT, (N,))], constants)
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def test_autograd_of_a_hand_written_smooth_l1_fuses() -> None:
    for terms in ("fvcore", "mmdet"):
        model = _select_sum_grad(terms)
        rng = np.random.default_rng()
        feeds = {n: rng.standard_normal(N).astype(np.float32) * np.float32(0.3) for n in ("p", "t", "g")}
        feeds["p"][:5] = [0.25, -0.25, 0.0, -0.0, np.nan]  # |x| == beta, zeros, NaN (t = 0 there)
        feeds["t"][:5] = 0.0
        node = assert_fuses_once(model, SL1, feeds)
        assert list(node.input) == ["p", "t", "g"]
        fused, report = lowering.fuse(model)
        assert report.fusions[0].attributes == {"sigma": 0.25, "reduction": "none", "scale": 1.0}
        assert report.fusions[0].caveats, "inf in x gives NaN in the graph (0 * inf in the branch not taken)"
        assert report.normalization.get("powers of 1 removed", 0) == (terms == "fvcore")


def test_sum_of_selects_on_different_conditions_or_cancelling_terms_is_not_fused() -> None:
    _assert_not_fused(_select_sum_grad("fvcore", second_cond="le"))
    _assert_not_fused(_select_sum_grad("cancel"))


def test_mean_over_the_numel_of_x_itself_fuses() -> None:
    # TorchScript with a dynamic batch: d = p - t; where(...) / d.numel() as
    # Div(select, Cast(ReduceProd(Shape(d)))): the Shape reads the matched x and goes with it
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["n"]),
             h.make_node("Less", ["n", "beta"], ["lt"]), h.make_node("Div", ["x", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["s"]), h.make_node("Where", ["lt", "lin", "s"], ["sel"]),
             h.make_node("Shape", ["x"], ["shape"]), h.make_node("ReduceProd", ["shape"], ["count"], keepdims=0),
             h.make_node("Cast", ["count"], ["countf"], to=T.FLOAT), h.make_node("Div", ["sel", "countf"], ["mean"]),
             h.make_node("Mul", ["mean", "go"], ["grad"])]
    graph = h.make_graph(nodes, "numel_of_x", [h.make_tensor_value_info("p", T.FLOAT, ["batch", 5]),
                                               h.make_tensor_value_info("t", T.FLOAT, ["batch", 5]),
                                               h.make_tensor_value_info("go", T.FLOAT, [])],
                         [h.make_tensor_value_info("grad", T.FLOAT, ["batch", 5])],
                         [numpy_helper.from_array(np.array(0.25, np.float32), "beta")])
    model = onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    rng = np.random.default_rng()
    feeds = {"p": rng.standard_normal((6, 5)).astype(np.float32), "t": rng.standard_normal((6, 5)).astype(np.float32),
             "go": np.float32(rng.standard_normal())}
    node = assert_fuses_once(model, SL1, feeds)
    assert next(a.s for a in node.attribute if a.name == "reduction") == b"mean"


def _huber_folded(low_values: np.ndarray, ones: bool = True) -> onnx.ModelProto:
    """autograd of F.huber_loss(reduction='none', delta=0.5).sum() after dynamo's optimizer:
    Where(x < -0.5, LOW, Where(x > 0.5, HIGH, x * ONES)) with the constants full tensors; without
    `ones`, the middle branch is x itself (onnxsim, onnxslim and onnxoptimizer drop x * ONES)."""
    mid = "mid" if ones else "x"
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Less", ["x", "neg"], ["lo"]),
             h.make_node("Greater", ["x", "pos"], ["hi"]), h.make_node("Where", ["hi", "high", mid], ["inner"]),
             h.make_node("Where", ["lo", "low", "inner"], ["grad"])]
    if ones:
        nodes.insert(3, h.make_node("Mul", ["x", "ones"], ["mid"]))
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("neg", -0.5), ("pos", 0.5))]
    constants += [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
                  ((("ones", np.ones(N)),) if ones else ()) + (("high", np.full(low_values.shape, 0.5)), ("low", low_values))]
    out_shape = np.broadcast_shapes(low_values.shape, (N,))
    graph = h.make_graph(nodes, "huber_none", [h.make_tensor_value_info(n, T.FLOAT, (N,)) for n in ("p", "t")],
                         [h.make_tensor_value_info("grad", T.FLOAT, out_shape)], constants)
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def test_huber_gradient_with_its_scale_folded_into_full_tensors_fuses() -> None:
    model = _huber_folded(np.full(N, -0.5))
    rng = np.random.default_rng()
    feeds = {n: rng.standard_normal(N).astype(np.float32) for n in ("p", "t")}
    feeds["p"][:4], feeds["t"][:4] = [0.5, -0.5, np.nan, 0.0], 0.0
    node = assert_fuses_once(model, SL1, feeds)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["sigma"] == 0.5 and attrs["scale"] == 0.5 and node.input[2] == "ones"


def test_huber_gradient_with_a_non_uniform_constant_is_not_fused() -> None:
    _assert_not_fused(_huber_folded(np.linspace(-0.5, -0.4, N)))


def test_huber_gradient_whose_ones_factor_an_optimizer_dropped_fuses() -> None:
    # Where(x < -0.5, LOW, Where(x > 0.5, HIGH, x)): the full tensors' one value is the scale
    model = _huber_folded(np.full(N, -0.5), ones=False)
    rng = np.random.default_rng()
    feeds = {n: rng.standard_normal(N).astype(np.float32) for n in ("p", "t")}
    feeds["p"][:5], feeds["t"][:5] = [0.5, -0.5, np.nan, 0.0, np.inf], 0.0
    node = assert_fuses_once(model, SL1, feeds)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["sigma"] == 0.5 and attrs["scale"] == 0.5 and attrs["reduction"] == b"sum"


def test_huber_gradient_whose_constant_branches_broadcast_x_is_not_fused() -> None:
    # the branches' [2, N] tensors make the gradient [2, N] from an x of [N]: no fused op does that
    _assert_not_fused(_huber_folded(np.full((2, N), -0.5), ones=False))


def test_half_softshrink_comparing_a_widened_runtime_threshold_fuses() -> None:
    # the dynamo exporter's float16 softshrink with t = lr*l1 at runtime: Greater(Cast<float32>(|p|),
    # Cast<float32>(t)) beside p - sign(p)*t in float16; comparing the widened values is comparing t
    H = T.FLOAT16
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
             h.make_node("Mul", ["lr", "l1"], ["t"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Cast", ["ap"], ["apf"], to=T.FLOAT),
             h.make_node("Cast", ["t"], ["tf"], to=T.FLOAT), h.make_node("Greater", ["apf", "tf"], ["big"]),
             h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "t"], ["st"]),
             h.make_node("Sub", ["p", "st"], ["moved"]), h.make_node("Mul", ["p", "zero"], ["p0"]),
             h.make_node("Where", ["big", "moved", "p0"], ["var_out"])]
    inputs = [("var", (N,)), ("delta", (N,)), ("lr", ()), ("l1", ())]
    graph = h.make_graph(nodes, "half_runtime_t", [h.make_tensor_value_info(n, H, s) for n, s in inputs],
                         [h.make_tensor_value_info("var_out", H, (N,))],
                         [numpy_helper.from_array(np.array(0.0, np.float16), "zero")])
    model = onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {PGD: 1}, report.summary()
    rng = np.random.default_rng()
    feeds = {"var": rng.standard_normal(N).astype(np.float16), "delta": rng.standard_normal(N).astype(np.float16),
             "lr": np.float16(0.5), "l1": np.float16(0.25)}
    feeds["var"][:4], feeds["delta"][:4] = [0.125, -0.125, np.nan, 0.0], 0.0
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    ok, detail = rounding_bound_ok(fused, fused_nodes(fused)[0], {**feeds, **_intermediates(fused, feeds)}, before)
    assert ok, detail


def _batch_mean_grad(outside_op: str = "Shape") -> onnx.ModelProto:
    """where(|x| < 0.25, x/0.25, sign(x)) * go / x.shape[0] with a dynamic batch (TorchScript):
    the batch size is read from the matched x, by a node that stays outside the fusion."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["n"]),
             h.make_node("Less", ["n", "beta"], ["lt"]), h.make_node("Div", ["x", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["s"]), h.make_node("Where", ["lt", "lin", "s"], ["sel"]),
             h.make_node("Mul", ["sel", "go"], ["g"])]
    if outside_op == "Shape":
        nodes += [h.make_node("Shape", ["x"], ["shape"]), h.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
                  h.make_node("Cast", ["rows"], ["rowsf"], to=T.FLOAT), h.make_node("Div", ["g", "rowsf"], ["grad"])]
    else:  # x itself read outside: the fusion would remove a value still needed
        nodes += [h.make_node("Relu", ["x"], ["rx"]), h.make_node("Add", ["g", "rx"], ["grad"])]
    graph = h.make_graph(nodes, "batch_mean", [h.make_tensor_value_info("p", T.FLOAT, ["batch", 5]),
                                               h.make_tensor_value_info("t", T.FLOAT, ["batch", 5]),
                                               h.make_tensor_value_info("go", T.FLOAT, [])],
                         [h.make_tensor_value_info("grad", T.FLOAT, ["batch", 5])],
                         [numpy_helper.from_array(np.array(0.25, np.float32), "beta"),
                          numpy_helper.from_array(np.array(0, np.int64), "zero")])
    return onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def test_shape_of_a_matched_intermediate_is_read_from_an_input_of_its_shape() -> None:
    model = _batch_mean_grad()
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {SL1: 1}, report.summary()
    assert [list(n.input) for n in fused.graph.node if n.op_type == "Shape"] == [["p"]]
    rng = np.random.default_rng()
    feeds = {"p": rng.standard_normal((6, 5)).astype(np.float32), "t": rng.standard_normal((6, 5)).astype(np.float32),
             "go": np.float32(rng.standard_normal())}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


def test_matched_intermediate_read_by_another_op_is_still_refused_without_recompute() -> None:
    _, report = lowering.fuse(_batch_mean_grad("Relu"), recompute_shared=False)
    assert not report.fusions, report.summary()
    assert any("also used by" in r.reason for r in report.rejections), report.summary()


def test_sign_written_as_a_where_fuses_only_with_a_constant_threshold() -> None:
    # torch.where(p >= 0, 1., -1.) * clamp(|p| - t, min=0): +1 at p = 0, where the clamp is 0 when t >= 0
    from pass_forms import pgd

    model = pgd(shrink="where-sign")
    fused, report = lowering.fuse(model)
    assert report.counts() == {PGD: 1}, report.summary()
    feeds = {"var": np.array([0.005, -0.005, 0.0, -0.0, np.nan, np.inf, -0.3, 0.7, 1.0, -1.0, 0.01, 0.2],
                             np.float32).reshape(3, 4), "delta": np.zeros((3, 4), np.float32)}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(model, feeds)[0], golden_of(fused, fused_nodes(fused)[0], feeds), np.float32)
    assert ok, detail
    _assert_not_fused(pgd(shrink="where-sign", scalars="raw"), "constant t >= 0")


def test_update_of_a_clipped_gradient_takes_the_clipped_gradient_as_delta() -> None:
    # clip_grad_norm then the step: var - 0.1 * (grad * coef), coef a runtime 0-D scale
    nodes = [_const("lr", 0.1), _const("zero", 0.0), _const("k", 1.25), _const("t", 0.05),
             h.make_node("Mul", ["grad", "coef"], ["clipped"]), h.make_node("Mul", ["clipped", "lr"], ["step"]),
             h.make_node("Sub", ["var", "step"], ["p"]), h.make_node("Abs", ["p"], ["ap"]),
             h.make_node("Sub", ["ap", "t"], ["d"]), h.make_node("Max", ["d", "zero"], ["m"]),
             h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "m"], ["sm"]), h.make_node("Div", ["sm", "k"], ["var_out"])]
    inputs = [("var", (N,)), ("grad", (N,)), ("coef", ())]
    graph = h.make_graph(nodes, "clipped", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info("var_out", T.FLOAT, (N,))])
    model = onnx.shape_inference.infer_shapes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {PGD: 1}, report.summary()
    node, = fused_nodes(fused)
    assert node.input[4] == "clipped"
    alpha = next(t for t in fused.graph.initializer if t.name == node.input[1])
    assert float(numpy_helper.to_array(alpha)) == np.float32(0.1)
    rng = np.random.default_rng()
    feeds = {"var": rng.standard_normal(N).astype(np.float32), "grad": rng.standard_normal(N).astype(np.float32),
             "coef": np.float32(0.7)}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(model, feeds)[0], golden_of(fused, node, {**feeds, **_intermediates(fused, feeds)}),
                              np.float32)
    assert ok, detail
