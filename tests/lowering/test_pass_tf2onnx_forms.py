"""Forms tf2onnx writes (found by the fixtures of models/make_tf_models.py), hand-built so each
variant and its near misses are pinned down: the arithmetic select with a Not under its mask,
clip_by_value as Max(Min(.)) (for SmoothL1's unit clamp and for the proximal clamp capped at the
dtype's largest value), softshrink's zero branch under an arithmetic select, and a Keras loss's
gradient, which masks each branch of the select apart and sums the two."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from pass_forms import graph_model
from pass_numerics import assert_runs_as_fused, assert_same_outputs, fused_nodes

import lowering

SHAPE = (4, 8)
FMAX = float(np.finfo(np.float32).max)


def _model(nodes: list[onnx.NodeProto], inputs: list[str], output: str, consts: dict[str, object]) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()]
    return graph_model(nodes, {n: (T.FLOAT, () if n == "go" else SHAPE) for n in inputs}, {output: (T.FLOAT, SHAPE)},
                       inits, opset=13, name="tf")


def _feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        value = (rng.standard_normal(shape) * 2).astype(np.float32)
        if value.ndim:
            value.reshape(-1)[:4] = [0.0, -0.0, np.nan, 0.5]
        feeds[vi.name] = value
    return feeds


def _fuses_exactly(model: onnx.ModelProto, op_type: str, rng: np.random.Generator) -> lowering.FusionReport:
    """One fusion; the fused model runs as the original; the fused node meets the standard."""
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {op_type: 1}, report.summary()
    feeds = _feeds(model, rng)
    assert_runs_as_fused(model, fused, feeds)
    return report


def _not_fused(model: onnx.ModelProto) -> lowering.FusionReport:
    fused, report = lowering.fuse(model)
    assert not fused_nodes(fused), report.summary()
    return report


def _mask_pair(cond: str, prefix: str) -> list[onnx.NodeProto]:
    """prefix_t = Cast(cond), prefix_f = Cast(Not(cond)): the two masks of an arithmetic select."""
    return [h.make_node("Cast", [cond], [f"{prefix}_t"], to=T.FLOAT), h.make_node("Not", [cond], [f"{prefix}_n"]),
            h.make_node("Cast", [f"{prefix}_n"], [f"{prefix}_f"], to=T.FLOAT)]


def test_arithmetic_select_whose_condition_is_a_not(rng: np.random.Generator) -> None:
    """Before opset 12 tf2onnx writes |x| <= 2 as Not(|x| > 2); the false mask is then Not(Not(.))."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["a"]),
             h.make_node("Greater", ["a", "beta"], ["gt"]), h.make_node("Not", ["gt"], ["le"]), *_mask_pair("le", "m"),
             h.make_node("Mul", ["x", "half"], ["lin"]), h.make_node("Mul", ["m_t", "lin"], ["tl"]),
             h.make_node("Sign", ["x"], ["s"]), h.make_node("Mul", ["s", "m_f"], ["ts"]),
             h.make_node("Add", ["tl", "ts"], ["grad"])]
    report = _fuses_exactly(_model(nodes, ["p", "t"], "grad", {"beta": 2.0, "half": 0.5}), "SmoothL1LossGradV2", rng)
    assert report.fusions[0].attributes["sigma"] == 2.0


@pytest.mark.parametrize("outer", ["Max", "Min"])
def test_unit_clamp_in_either_nesting(outer: str, rng: np.random.Generator) -> None:
    inner = "Min" if outer == "Max" else "Max"
    bound = {"Min": "one", "Max": "minus_one"}
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Mul", ["x", "inv_beta"], ["y"]),
             h.make_node(inner, ["y", bound[inner]], ["c1"]), h.make_node(outer, ["c1", bound[outer]], ["c"]),
             h.make_node("Mul", ["c", "go"], ["grad"])]
    consts = {"inv_beta": 2.0, "one": 1.0, "minus_one": -1.0}
    report = _fuses_exactly(_model(nodes, ["go", "p", "t"], "grad", consts), "SmoothL1LossGradV2", rng)
    assert report.fusions[0].attributes["sigma"] == 0.5


def test_clamp_with_other_bounds_is_not_a_unit_clamp() -> None:
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Min", ["x", "two"], ["c1"]),
             h.make_node("Max", ["c1", "minus_one"], ["c"]), h.make_node("Mul", ["c", "go"], ["grad"])]
    _not_fused(_model(nodes, ["go", "p", "t"], "grad", {"two": 2.0, "minus_one": -1.0}))


def _prox(clamp: list[onnx.NodeProto], consts: dict[str, object]) -> onnx.ModelProto:
    """var_out = sign(p) * m / 1.005, p = var - 0.1*delta, m computed by `clamp` from d = |p| - 0.001."""
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sub", ["ap", "t"], ["d"]), *clamp,
             h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "m"], ["sm"]),
             h.make_node("Mul", ["sm", "inv_k"], ["var_out"])]
    return _model(nodes, ["var", "delta"], "var_out", {"lr": 0.1, "t": 0.001, "inv_k": 1 / 1.005, **consts})


@pytest.mark.parametrize("clamp", [
    [h.make_node("Min", ["d", "fmax"], ["c"]), h.make_node("Max", ["c", "zero"], ["m"])],
    [h.make_node("Max", ["d", "zero"], ["c"]), h.make_node("Min", ["c", "fmax"], ["m"])],
    [h.make_node("Clip", ["d", "zero", "fmax"], ["m"])],
], ids=["max-of-min", "min-of-max", "clip-with-max"])
def test_proximal_clamp_capped_at_the_largest_float(clamp: list[onnx.NodeProto], rng: np.random.Generator) -> None:
    """tf.clip_by_value(d, 0, float32.max) is Clip without max: inf -> the largest float."""
    report = _fuses_exactly(_prox(clamp, {"zero": 0.0, "fmax": FMAX}), "ApplyProximalGradientDescent", rng)
    assert report.fusions[0].attributes["shrink_max"] == FMAX


def test_proximal_clamp_capped_lower_is_not_a_clamp() -> None:
    clamp = [h.make_node("Min", ["d", "cap"], ["c"]), h.make_node("Max", ["c", "zero"], ["m"])]
    _not_fused(_prox(clamp, {"zero": 0.0, "cap": 100.0}))


def _softshrink_arithmetic(zero_branch: str) -> onnx.ModelProto:
    """tf.where(|p| > t, p - sign(p)*t, zero) through tf2onnx, zero a zeros tensor or a scalar 0."""
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Greater", ["ap", "t"], ["gt"]), *_mask_pair("gt", "m"),
             h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["t", "s"], ["st"]),
             h.make_node("Sub", ["p", "st"], ["moved"]), h.make_node("Mul", ["m_t", "moved"], ["a"]),
             h.make_node("Mul", [zero_branch, "m_f"], ["b"]), h.make_node("Add", ["a", "b"], ["shr"]),
             h.make_node("Mul", ["shr", "inv_k"], ["var_out"])]
    consts = {"lr": 0.1, "t": 0.001, "inv_k": 1 / 1.005, "zeros": np.zeros(SHAPE), "zero": 0.0}
    return _model(nodes, ["var", "delta"], "var_out", consts)


@pytest.mark.parametrize("zero_branch", ["zeros", "zero"])
def test_softshrink_with_zero_branch_under_arithmetic_select_fuses(zero_branch: str, rng: np.random.Generator) -> None:
    """The 0 mask multiplies the taken branch too, so NaN in p stays NaN, as in the fused op."""
    _fuses_exactly(_softshrink_arithmetic(zero_branch), "ApplyProximalGradientDescent", rng)


def _keras_huber(delta: float, second_cond: str = "le") -> onnx.ModelProto:
    """The gradient of Keras' Huber(delta) through tf2onnx: each branch scales its own masked
    copy of the upstream gradient g, and Sum adds the two."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["a"]),
             h.make_node("LessOrEqual", ["a", "delta"], ["le"]), h.make_node("Greater", ["a", "other"], ["gt2"]),
             *_mask_pair("le", "m"), *_mask_pair(second_cond, "k"),
             h.make_node("Mul", ["m_t", "g"], ["g1t"]), h.make_node("Mul", ["zero", "m_f"], ["g1f"]),
             h.make_node("Add", ["g1t", "g1f"], ["g1"]),  # select(le, g, 0)
             h.make_node("Mul", ["half", "g1"], ["h1"]), h.make_node("Mul", ["x", "two"], ["x2"]),
             h.make_node("Mul", ["h1", "x2"], ["quad"]),  # 0.5 * 2x * select(le, g, 0)
             h.make_node("Mul", ["k_t", "zero"], ["g2t"]), h.make_node("Mul", ["g", "k_f"], ["g2f"]),
             h.make_node("Add", ["g2t", "g2f"], ["g2"]),  # select(le, 0, g)
             h.make_node("Mul", ["delta", "g2"], ["d2"]), h.make_node("Sign", ["x"], ["s"]),
             h.make_node("Mul", ["d2", "s"], ["lin"]), h.make_node("Sum", ["quad", "lin"], ["grad"])]
    consts = {"delta": delta, "other": delta, "zero": 0.0, "half": 0.5, "two": 2.0, "g": np.full(SHAPE, 0.125)}
    return _model(nodes, ["p", "t"], "grad", consts)


@pytest.mark.parametrize("delta", [0.5, 1.0, 2.0])
def test_keras_huber_gradient_fuses(delta: float, rng: np.random.Generator) -> None:
    report = _fuses_exactly(_keras_huber(delta), "SmoothL1LossGradV2", rng)
    fusion, = report.fusions
    assert fusion.attributes["sigma"] == delta and fusion.attributes["scale"] == pytest.approx(delta)
    assert fusion.attributes["nonfinite"] in ("blend", "blend_dout")  # an arithmetic select: NaN at inf x, exactly


def test_keras_style_sum_with_masks_of_different_conditions_is_not_fused() -> None:
    _not_fused(_keras_huber(1.0, second_cond="gt2"))


def _where_then_scaled(scaling: list[onnx.NodeProto], inputs: list[str], consts: dict[str, object],
                       extra_outputs: list[str] = ()) -> onnx.ModelProto:
    """sel = tf.where(|x| < 0.5, x / 0.5, sign(x)), then `scaling` computes grad from sel."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["a"]),
             h.make_node("Less", ["a", "beta"], ["lt"]), h.make_node("Div", ["x", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["s"]), h.make_node("Where", ["lt", "lin", "s"], ["sel"]), *scaling]
    model = _model(nodes, inputs, "grad", {"beta": 0.5, **consts})
    for name in extra_outputs:
        model.graph.output.append(h.make_tensor_value_info(name, T.FLOAT, SHAPE))
    return model


@pytest.mark.parametrize("mean", [False, True], ids=["times-dout", "times-dout-over-numel"])
def test_scaling_after_the_select_joins_the_fusion(mean: bool, rng: np.random.Generator) -> None:
    """tf.where(...) * dout [/ n]: the scaling becomes the fused node's dout and reduction."""
    scaling = [h.make_node("Mul", ["sel", "go"], ["gs" if mean else "grad"])]
    if mean:
        scaling.append(h.make_node("Div", ["gs", "n"], ["grad"]))
    model = _where_then_scaled(scaling, ["go", "p", "t"], {"n": float(np.prod(SHAPE))})
    report = _fuses_exactly(model, "SmoothL1LossGradV2", rng)
    fusion, = report.fusions
    assert fusion.output == "grad" and fusion.inputs[2] == "go"
    assert fusion.attributes["reduction"] == ("mean" if mean else "sum")
    fused, _ = lowering.fuse(model)
    assert [n.op_type for n in fused.graph.node] == ["SmoothL1LossGradV2"]


def test_a_broadcast_scale_after_the_select_joins_as_dout(rng: np.random.Generator) -> None:
    """A [1, 8] scale broadcasts to predict's shape: it becomes the fused node's dout, which the
    kernel broadcasts."""
    model = _where_then_scaled([h.make_node("Mul", ["sel", "row"], ["grad"])], ["p", "t"],
                               {"row": np.full((1, SHAPE[1]), 0.25)})
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    fusion, = report.fusions
    assert fusion.output == "grad" and [n.op_type for n in fused.graph.node] == ["SmoothL1LossGradV2"]
    assert any(c.startswith("dout (") for c in fusion.caveats), fusion.caveats
    assert_same_outputs(model, fused, _feeds(model, rng))


def test_scaling_that_cannot_join_leaves_the_select_fused_alone(rng: np.random.Generator) -> None:
    # the select is also a graph output: the Mul cannot own it
    model = _where_then_scaled([h.make_node("Mul", ["sel", "go"], ["grad"])], ["go", "p", "t"], {},
                               extra_outputs=["sel"])
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    fusion, = report.fusions
    assert fusion.output == "sel" and [n.op_type for n in fused.graph.node] == ["SmoothL1LossGradV2", "Mul"]
    feeds = _feeds(model, rng)
    assert_same_outputs(model, fused, feeds)


def _v1_huber(delta: float, w: float, c: float, minus_w: float | None = None, compare: str = "LessOrEqual",
              compared: float | None = None, w_shape: tuple[int, ...] = SHAPE) -> onnx.ModelProto:
    """The gradient of tf.compat.v1.losses.huber_loss through tf2onnx:
    sign(x) * Sum(w, select(|x| <= delta, Sum(M, M, -w), 0)), M = c * Min(|x|, delta), every
    constant a full-shape tensor of one value."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["a"]),
             h.make_node(compare, ["a", "cmp_delta"], ["le"]), *_mask_pair("le", "m"),
             h.make_node("Min", ["a", "delta"], ["q"]), h.make_node("Mul", ["q", "c"], ["cq"]),
             h.make_node("Sum", ["cq", "cq", "minus_w"], ["inner"]), h.make_node("Mul", ["m_t", "inner"], ["in_t"]),
             h.make_node("Mul", ["m_f", "zeros"], ["in_f"]), h.make_node("Add", ["in_t", "in_f"], ["sel"]),
             h.make_node("Sum", ["sel", "w"], ["total"]), h.make_node("Sign", ["x"], ["s"]),
             h.make_node("Mul", ["total", "s"], ["grad"])]
    consts = {"delta": delta, "cmp_delta": delta if compared is None else compared, "c": np.full(SHAPE, c),
              "minus_w": np.full(SHAPE, -w if minus_w is None else minus_w), "zeros": np.zeros(SHAPE),
              "w": np.full(w_shape, w)}
    model = _model(nodes, ["p", "t"], "grad", consts)
    if w_shape != SHAPE:  # the sum broadcasts the gradient to w's shape
        model.graph.output[0].type.tensor_type.shape.Clear()
        for d in w_shape:
            model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = d
    return model


@pytest.mark.parametrize("delta, w", [(1.0, 1 / 32), (2.0, 2.0), (0.5, 0.25)])
def test_v1_huber_loss_gradient_fuses(delta: float, w: float, rng: np.random.Generator) -> None:
    """sign(x) * (w + [|x| <= d] * (2c*min(|x|, d) - w)) = w/d * x inside, w * sign(x) outside."""
    report = _fuses_exactly(_v1_huber(delta, w, c=w / delta / 2), "SmoothL1LossGradV2", rng)
    fusion, = report.fusions
    assert fusion.pattern == "smooth_l1_grad/capped" and fusion.attributes["sigma"] == delta
    assert not fusion.caveats  # the Min keeps the branch not taken finite: exact for inf and NaN too


def test_v1_huber_loss_gradient_is_exact_at_infinity_and_nan() -> None:
    model = _v1_huber(1.0, 0.5, c=0.25)
    fused, _ = lowering.fuse(model)
    p = np.array([np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 0.0, 3.0] * 4, np.float32).reshape(SHAPE)
    feeds = {"p": p, "t": np.zeros(SHAPE, np.float32)}
    assert_runs_as_fused(model, fused, feeds)


@pytest.mark.parametrize("case", ["constants-do-not-cancel", "wrong-scale", "other-threshold", "w-broadcasts-x"])
def test_v1_huber_relatives_are_not_fused(case: str) -> None:
    if case == "w-broadcasts-x":  # the kernel's output has predict's shape, the graph's is larger
        model = _v1_huber(1.0, 0.5, c=0.25, w_shape=(2, *SHAPE))
    elif case == "constants-do-not-cancel":
        model = _v1_huber(1.0, 0.5, c=0.25, minus_w=-0.4)
    elif case == "wrong-scale":
        model = _v1_huber(1.0, 0.5, c=0.3)
    else:
        model = _v1_huber(1.0, 0.5, c=0.25, compared=0.8)
    _not_fused(model)
