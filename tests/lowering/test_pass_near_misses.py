"""Near misses must not fuse, and the report must say why (docs/matched-forms.md, "Never fused")."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from pass_forms import BF, PGD, SL1, F, G, H, autograd_where_loss, pgd, sl1, splice
from pass_numerics import assert_runs_as_fused, fused_nodes, make_feeds

import lowering

SEED = 18


def _sl1_graph(mutate) -> onnx.ModelProto:
    """PyTorch-form SmoothL1 backward (sum, beta 0.5) with a hook to bend one piece of it."""
    g = G()
    p, l, go = g.input("predict"), g.input("label"), g.input("dout", shape=())
    parts = {"p": p, "l": l, "go": go}
    mutate(g, parts, "pre")
    x = g.op("Sub", parts["p"], parts["l"])
    a = g.op("Abs", x)
    b = parts.get("beta") or g.const(0.5)
    lin = g.op("Div", g.op("Mul", parts["go"], x), b) if "lin" not in parts else parts["lin"](g, x, b)
    y = g.op("Where", g.op("Less", a, b), lin, g.op("Mul", parts["go"], g.op("Sign", x)))
    parts.update(x=x, a=a, y=y)
    mutate(g, parts, "post")
    g.output(y)
    return g.model()


def _fuse(model):
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused)
    return fused, report


def _assert_rejected(model, op_type: str, reason: str) -> None:
    fused, report = _fuse(model)
    assert not [n for n in fused_nodes(fused) if n.op_type == op_type]
    reasons = [r.reason for r in report.rejections]
    assert any(reason in r for r in reasons), reasons


def test_plain_sgd_is_not_a_proximal_update() -> None:
    g = G()
    var, delta = g.input("var"), g.input("delta")
    y = g.op("Sub", var, g.op("Mul", g.const(0.1), delta))
    g.output(y)
    fused, report = _fuse(g.model())
    assert not fused_nodes(fused) and not report.fusions


def test_l2_only_update_is_not_fused() -> None:
    g = G()
    var, delta = g.input("var"), g.input("delta")
    y = g.op("Div", g.op("Sub", var, g.op("Mul", g.const(0.1), delta)), g.const(1.02))
    g.output(y)
    assert not fused_nodes(_fuse(g.model())[0])


def test_intermediate_graph_output_blocks_fusion() -> None:
    def mutate(g, parts, stage):
        if stage == "post":
            g.output(parts["x"])
    _assert_rejected(_sl1_graph(mutate), SL1, "is a graph output")


def test_intermediate_with_outside_consumer_blocks_fusion_without_recompute() -> None:
    def mutate(g, parts, stage):
        if stage == "post":
            g.output(g.op("Neg", parts["a"]))
    model = _sl1_graph(mutate)
    _, report = lowering.fuse(model, recompute_shared=False)
    assert not report.fusions
    assert any("outside the match" in r.reason for r in report.rejections), report.summary()
    # by default the intermediate is computed again for its outside reader
    fused, report = _fuse(model)
    assert report.counts() == {SL1: 1}, report.summary()
    assert "computes those values twice" in report.fusions[0].caveats[-1], report.summary()


def test_overridable_beta_blocks_fusion() -> None:
    def mutate(g, parts, stage):
        if stage == "pre":
            parts["beta"] = g.const(0.5)
            g.inputs.append(helper.make_tensor_value_info(parts["beta"], F, []))
    _assert_rejected(_sl1_graph(mutate), SL1, "also a graph input")


def test_x_times_beta_is_not_smooth_l1() -> None:
    def mutate(g, parts, stage):
        if stage == "pre":
            parts["lin"] = lambda g, x, b: g.op("Mul", g.op("Mul", parts["go"], x), b)
    _assert_rejected(_sl1_graph(mutate), SL1, "not by K/beta")


def test_label_broadcasting_predict_to_a_bigger_shape_is_refused_with_its_reason() -> None:
    # autograd of torch.where(n < b, 0.5*n*n/b, n - 0.5*b).mean() with n = |p - t|, t of shape
    # (2, 3, 4) and p (3, 4): the gradient has t's shape. The sum of Wheres against 0 is scaled by
    # sign(x) only afterwards, so the refusal comes from the grown match (that reason was once
    # dropped there, and the model missed without one)
    model = autograd_where_loss((2, 3, 4), out_shape=(2, 3, 4))
    _, report = lowering.fuse(model, by_meaning=False)
    assert not report.fusions
    assert any("only a label that broadcasts to predict's shape" in r.reason
               for r in report.rejections), report.summary()
    # by meaning it is the gradient with predict and label swapped, times -1 (test_pass_broadcast_label)
    _, report = _fuse(model)
    assert [(f.pattern, f.attributes["scale"]) for f in report.fusions] == [("smooth_l1_grad/meaning", -1.0)]


def _rounded_abs_graph(family: str) -> onnx.ModelProto:
    """A float16 pattern as onnxruntime's CPU optimizer saves it: inputs widened to float32, the
    body in float32, and only the compared |x| rounded to float16 and back."""
    g = G()
    if family == SL1:
        p, t, go = (g.op("Cast", g.input(n, dtype=H, shape=s), to=F) for n, s in
                    (("predict", (3, 4)), ("label", (3, 4)), ("dout", ())))
        x = g.op("Sub", p, t)
        rounded = g.op("Cast", g.op("Cast", g.op("Abs", x), to=H), to=F)
        lin = g.op("Div", g.op("Mul", go, x), g.const(0.300048828125))
        y = g.op("Where", g.op("Less", rounded, g.const(0.3)), lin, g.op("Mul", go, g.op("Sign", x)))
    else:
        var, delta = (g.op("Cast", g.input(n, dtype=H), to=F) for n in ("var", "delta"))
        x = g.op("Sub", var, g.op("Mul", delta, g.const(0.125)))
        rounded = g.op("Cast", g.op("Cast", g.op("Abs", x), to=H), to=F)
        shifted = g.op("Sub", x, g.op("Mul", g.op("Sign", x), g.const(0.0625)))
        kept = g.op("Where", g.op("Greater", rounded, g.const(0.0625)), shifted, g.op("Mul", x, g.const(0.0)))
        y = g.op("Div", kept, g.const(1.03125))
    g.output(g.op("Cast", y, to=H), dtype=H)
    return g.model()


@pytest.mark.parametrize("family", [SL1, PGD])
def test_abs_rounded_to_half_and_back_is_refused_with_its_reason(family: str) -> None:
    # the compare sits at the midpoint below the float16 threshold, not at beta/t, and float32
    # values of x lie between: it was missed without any reason
    _assert_rejected(_rounded_abs_graph(family), family, "rounded to float16 and back while x is float32")


def test_dout_that_would_grow_the_gradient_is_refused() -> None:
    # a dout that broadcasts to predict's shape is the kernel's (a broadcast load); one that makes
    # the result bigger than predict is no gradient of predict
    def mutate(g, parts, stage):
        if stage == "pre":
            g.inputs.pop(2)
            parts["go"] = g.input("dout", shape=(2, 1, 4))
    _assert_rejected(_sl1_graph(mutate), SL1, "dout's shape does not broadcast to predict's")


def test_less_or_equal_with_beta_zero_is_refused() -> None:
    _assert_rejected(sl1(form="where_le", beta=0.0, reduction="sum"), SL1, "0 by 0")


def test_arithmetic_select_with_beta_zero_is_refused() -> None:
    _assert_rejected(sl1(form="tf2onnx", beta=0.0, reduction="sum"), SL1, "arithmetic select")


def test_proximal_with_abs_instead_of_max_is_not_fused() -> None:
    g = G()
    var, delta = g.input("var"), g.input("delta")
    p = g.op("Sub", var, g.op("Mul", g.const(0.1), delta))
    y = g.op("Div", g.op("Mul", g.op("Sign", p), g.op("Abs", g.op("Sub", g.op("Abs", p), g.const(0.005)))),
             g.const(1.02))
    g.output(y)
    assert not fused_nodes(_fuse(g.model())[0])


def test_proximal_intermediate_escape_is_refused() -> None:
    model = pgd()
    sign = next(n for n in model.graph.node if n.op_type == "Sign")
    model.graph.output.append(helper.make_tensor_value_info(sign.output[0], F, [3, 4]))
    fused, report = _fuse(model)
    assert not fused_nodes(fused)
    assert any("graph output" in r.reason for r in report.rejections)


def test_proximal_var_delta_shape_mismatch_is_refused() -> None:
    g = G()
    var, delta = g.input("var"), g.input("delta", shape=(4,))
    p = g.op("Sub", var, g.op("Mul", g.const(0.1), delta))
    y = g.op("Mul", g.op("Sign", p), g.op("Relu", g.op("Sub", g.op("Abs", p), g.const(0.005))))
    g.output(y)
    _assert_rejected(g.model(), PGD, "var and delta shapes differ or are unknown (var: [3, 4], delta: [4])")


def test_proximal_scaled_runtime_alpha_keeps_the_step_outside() -> None:
    # (2*lr)*delta: no alpha input is that product, so the step stays, computed as the graph does,
    # and the update reads it as delta with alpha 1
    g = G()
    var, delta, lr = g.input("var"), g.input("delta"), g.input("lr", shape=())
    step = g.op("Mul", g.op("Mul", lr, g.const(2.0)), delta)
    p = g.op("Sub", var, step)
    y = g.op("Mul", g.op("Sign", p), g.op("Relu", g.op("Sub", g.op("Abs", p), g.const(0.005))))
    g.output(y)
    fused, report = _fuse(g.model())
    (node,) = fused_nodes(fused)
    assert node.input[0] == var and node.input[4] == step
    alpha = next(t for t in fused.graph.initializer if t.name == node.input[1])
    assert numpy_helper.to_array(alpha) == 1.0


def test_overridable_proximal_scalar_stays_a_runtime_input() -> None:
    """An initializer that is also a graph input is a runtime value: fused, but never folded."""
    model = pgd()
    alpha = next(n for n in model.graph.node if n.op_type == "Mul").input[0]
    model.graph.input.append(helper.make_tensor_value_info(alpha, F, []))
    fused, _ = _fuse(model)
    (node,) = fused_nodes(fused)
    assert node.input[1] == alpha


@pytest.mark.parametrize("dtype", [H, BF])
def test_half_output_without_cast_back_keeps_float32_node(dtype: int) -> None:
    """Cast-to-float32 inputs but a float32 output: the Casts stay, the node is float32."""
    model = sl1(dtype=dtype, cast_wrapped=True)
    last = model.graph.node[-1]
    assert last.op_type == "Cast"
    model.graph.node.pop()
    model.graph.output[0].name = last.input[0]
    model.graph.output[0].type.tensor_type.elem_type = F
    fused, report = _fuse(model)
    assert report.fusions[0].dtype == "float32"
    assert {n.op_type for n in fused.graph.node} == {"Cast", SL1}


def test_identical_updates_share_one_function_body() -> None:
    """Every weight of a model updated with the same lr/l1/l2 gives the same subgraph: one function."""
    g = G()
    outs = []
    shared = {role: f"w0_{role}" for role in ("alpha", "l1", "l2")}
    for k in range(3):
        inst = pgd(scalars="raw")
        names = splice(g, inst, shared if k else {}, f"w{k}_")
        outs.append(names[inst.graph.output[0].name])
    for o in outs:
        g.output(o)
    model = g.model()
    fused, report = _fuse(model)
    assert report.counts() == {PGD: 3}
    assert len(fused.functions) == 1
    assert {n.overload for n in fused_nodes(fused)} == {fused.functions[0].overload}


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("swap", [False, True])
def test_two_where_softshrink_fuses_as_the_nan_to_zero_variant(scaled: bool, swap: bool) -> None:
    """TorchScript's softshrink symbolic equals sign(p)*max(|p|-t, 0) on finite p and maps NaN to
    0: the op's nan_to_zero variant, exactly."""
    g = G()
    var, delta = g.input("var"), g.input("delta")
    p = g.op("Sub", var, g.op("Mul", delta, g.const(0.1)))
    t = 0.001
    upper = g.op("Where", g.op("Greater", p, g.const(t)), g.op("Sub", p, g.const(t)), g.const(0.0))
    lower = g.op("Where", g.op("Less", p, g.const(-t)), g.op("Add", p, g.const(t)), g.const(0.0))
    y = g.op("Add", *((lower, upper) if swap else (upper, lower)))
    g.output(g.op("Div", y, g.const(1.005)) if scaled else y)
    fused, report = _fuse(g.model())
    assert [n.op_type for n in fused_nodes(fused)] == [PGD], [r.reason for r in report.rejections]
    assert report.fusions[0].attributes["nonfinite"] == "nan_to_zero"


def test_sum_of_two_unrelated_wheres_is_not_reported() -> None:
    g = G()
    var, delta = g.input("var"), g.input("delta")
    p, q = g.op("Sub", var, delta), g.op("Add", var, delta)
    upper = g.op("Where", g.op("Greater", p, g.const(0.001)), g.op("Sub", p, g.const(0.001)), g.const(0.0))
    lower = g.op("Where", g.op("Less", q, g.const(-0.001)), g.op("Add", q, g.const(0.001)), g.const(0.0))
    g.output(g.op("Div", g.op("Add", upper, lower), g.const(1.005)))
    fused, report = _fuse(g.model())
    assert not fused_nodes(fused) and not [r for r in report.rejections if "two Wheres" in r.reason]


@pytest.mark.parametrize("shrink", ["residual", "residual-minmax"])
def test_clamp_residual_with_a_runtime_threshold_is_refused(shrink: str) -> None:
    # p - clip(p, -t, t) is the shrink only for t >= 0; a runtime t may be negative
    _assert_rejected(pgd(shrink=shrink, scalars="raw"), PGD, "t is a runtime value")


def test_clamp_residual_with_a_negative_threshold_is_refused() -> None:
    _assert_rejected(pgd(shrink="residual", l1=-0.05), PGD, "with a negative t the clamp returns a bound")


def _prox_around(shrink) -> onnx.ModelProto:
    """p = var - 0.1*delta, shrink(g, p) as the shrink, divided by 1.02."""
    g = G()
    var, delta = g.input("var"), g.input("delta")
    p = g.op("Sub", var, g.op("Mul", g.const(0.1), delta))
    g.output(g.op("Div", shrink(g, p), g.const(1.02)))
    return g.model()


def _sl1_around(grad) -> onnx.ModelProto:
    """x = predict - label and a scalar dout, grad(g, x, dout) as the gradient."""
    g = G()
    p, l, go = g.input("predict"), g.input("label"), g.input("dout", shape=())
    g.output(grad(g, g.op("Sub", p, l), go))
    return g.model()


def _assert_nothing_fused(model: onnx.ModelProto) -> None:
    fused, report = _fuse(model)
    assert not fused_nodes(fused) and not report.fusions


def test_clamp_residual_with_asymmetric_bounds_is_not_a_shrink() -> None:
    _assert_nothing_fused(_prox_around(lambda g, p: g.op("Sub", p, g.op("Clip", p, g.const(-0.01), g.const(0.02)))))


def test_residual_of_a_clamp_of_another_value_is_not_a_shrink() -> None:
    _assert_nothing_fused(_prox_around(
        lambda g, p: g.op("Sub", p, g.op("Clip", g.input("other"), g.const(-0.005), g.const(0.005)))))


def test_asymmetric_clamp_of_x_is_not_a_smooth_l1_gradient() -> None:
    _assert_nothing_fused(_sl1_around(lambda g, x, go: g.op("Mul", g.op("Clip", x, g.const(-1.0), g.const(2.0)), go)))


@pytest.mark.parametrize("case", ["other-threshold", "same-relation", "two-minus-mask"])
def test_masks_that_are_not_complements_are_not_a_select(case: str) -> None:
    def grad(g: G, x: str, go: str) -> str:
        a = g.op("Abs", x)
        m = g.op("Cast", g.op("Less", a, g.const(0.5)), to=F)
        if case == "other-threshold":
            other = g.op("Cast", g.op("GreaterOrEqual", a, g.const(0.6)), to=F)
        elif case == "same-relation":
            other = g.op("Cast", g.op("Less", a, g.const(0.5)), to=F)
        else:
            other = g.op("Sub", g.const(2.0), m)
        lin = g.op("Div", g.op("Mul", go, x), g.const(0.5))
        return g.op("Add", g.op("Mul", m, lin), g.op("Mul", g.op("Mul", go, g.op("Sign", x)), other))

    _assert_nothing_fused(_sl1_around(grad))


def _masked_softshrink(g: G, p: str, compare: str, threshold: float, shift: float) -> str:
    """(p - shift*sign(p)) * Cast(compare(|p|, threshold))."""
    mask = g.op("Cast", g.op(compare, g.op("Abs", p), g.const(threshold)), to=F)
    return g.op("Mul", g.op("Sub", p, g.op("Mul", g.const(shift), g.op("Sign", p))), mask)


def test_masked_softshrink_with_the_complementary_mask_is_not_a_shrink() -> None:
    _assert_nothing_fused(_prox_around(lambda g, p: _masked_softshrink(g, p, "LessOrEqual", 0.005, 0.005)))


def test_masked_softshrink_shifting_by_another_threshold_is_refused() -> None:
    model = _prox_around(lambda g, p: _masked_softshrink(g, p, "Greater", 0.005, 0.006))
    _assert_rejected(model, PGD, "softshrink shifts p by 0.006")


def test_relu_difference_with_a_runtime_threshold_is_refused() -> None:
    _assert_rejected(pgd(shrink="relu-diff", scalars="raw"), PGD, "t is a runtime value")


def test_relu_difference_with_a_negative_threshold_is_refused() -> None:
    _assert_rejected(pgd(shrink="relu-diff", l1=-0.05), PGD, "for t < 0 it is 2p near 0")


@pytest.mark.parametrize("case", ["other-threshold", "same-sign"])
def test_relu_differences_that_are_not_a_shrink(case: str) -> None:
    def shrink(g: G, p: str) -> str:
        t = g.const(0.005)
        minus = g.op("Sub", g.op("Neg", p), g.const(0.006)) if case == "other-threshold" else g.op("Sub", p, t)
        return g.op("Sub", g.op("Relu", g.op("Sub", p, t)), g.op("Relu", minus))

    _assert_nothing_fused(_prox_around(shrink))


@pytest.mark.parametrize("cap, beta", [(2.0, 0.5), (1.0, 0.0)])
def test_sign_times_a_capped_ratio_other_than_min_ratio_1_is_not_a_spelled_out_form(cap: float, beta: float) -> None:
    def grad(g: G, x: str, go: str) -> str:
        capped = g.op("Min", g.op("Div", g.op("Abs", x), g.const(beta)), g.const(cap))
        return g.op("Mul", g.op("Mul", g.op("Sign", x), capped), go)

    model = _sl1_around(grad)
    _, report = lowering.fuse(model, by_meaning=False)
    assert not report.fusions
    fused, report = _fuse(model)
    if beta == 0:  # |x| / 0 is 0/0 = NaN at x == 0, where the gradient is 0
        assert not report.fusions, report.summary()
        return
    # sign(x) * min(|x| / 0.5, 2) is 2 * SmoothL1's gradient with sigma = 1: the recogniser proves it
    assert [(f.op_type, f.attributes["sigma"], f.attributes["scale"]) for f in report.fusions] == \
        [("SmoothL1LossGradV2", cap * beta, cap)], report.summary()
    feeds = make_feeds(model, np.random.default_rng(SEED), edges=(cap * beta,), nonfinite=True)
    assert_runs_as_fused(model, fused, feeds)
