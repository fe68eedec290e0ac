"""SmoothL1/Huber gradient spellings that exporters write for user code: native float16/bfloat16
selects whose divisor is the compared beta rounded, clamps as Max/Min, the ratio capped with Clip,
autograd's sum of selects for a loss written by hand, means over x's own numel, Huber gradients
with their scale folded into full tensors, and x / max(|x|, beta).

Each fuses (or is refused with its reason) as its semantics demand: the fused model computes what
the unfused one does, NaN and inf included, and the fused node's contract formula agrees with it
(onnx.reference for bfloat16, which onnxruntime's CPU provider cannot run).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator
from pass_forms import SL1, assert_not_fused, const_node, const_tensor, fuse_checked, graph_model
from pass_numerics import assert_fuses_once, assert_same, fused_nodes, golden_of, normal_feeds, precision_ok, run_ort

import lowering

N = 16


def _sl1_where(dtype: int, beta_compare: float, divisor: onnx.NodeProto) -> onnx.ModelProto:
    """TorchScript's native half/bfloat16 where-form: the compare widens |x| to float32."""
    nodes = [
        h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
        h.make_node("Cast", ["ax"], ["axf"], to=T.FLOAT), const_node("beta", beta_compare),
        h.make_node("Less", ["axf", "beta"], ["lt"]), h.make_node("Mul", ["go", "x"], ["gx"]), divisor,
        h.make_node("Div", ["gx", "div"], ["lin"]), h.make_node("Sign", ["x"], ["sx"]),
        h.make_node("Mul", ["go", "sx"], ["gs"]), h.make_node("Where", ["lt", "lin", "gs"], ["grad"]),
    ]
    return graph_model(nodes, {"go": (dtype, ()), "p": (dtype, (N,)), "t": (dtype, (N,))}, {"grad": (dtype, (N,))})


@pytest.mark.parametrize("divisor", [
    const_node("div", 0.5, T.BFLOAT16),  # TorchScript: a bfloat16 Constant node
    h.make_node("Cast", ["beta"], ["div"], to=T.BFLOAT16),  # dynamo: Cast<bfloat16> of the float32 beta
], ids=["bf16-constant", "cast-to-bf16"])
def test_native_bfloat16_where_fuses(divisor: onnx.NodeProto, rng: np.random.Generator) -> None:
    model = _sl1_where(T.BFLOAT16, 0.5, divisor)
    fused, report = fuse_checked(model)
    assert report.counts() == {SL1: 1}, report.summary()
    assert report.fusions[0].attributes == {"sigma": 0.5, "reduction": "sum", "scale": 1.0}
    feeds = normal_feeds(model, rng)
    before, = ReferenceEvaluator(model).run(None, feeds)
    after, = ReferenceEvaluator(fused).run(None, feeds)
    assert_same(before, after)


def test_half_divisor_rounded_from_the_compared_beta_fuses(rng: np.random.Generator) -> None:
    # compares a widened float16 with 0.3 in float32 and divides by 0.3 rounded to float16
    # (0.30005): on float16 inputs, the SmoothL1 of beta 0.30005, which the fused node takes
    model = _sl1_where(T.FLOAT16, 0.3, const_node("div", 0.3, T.FLOAT16))
    fused, report = fuse_checked(model)
    assert report.counts() == {SL1: 1}, report.summary()
    assert report.fusions[0].attributes["sigma"] == float(np.float16(0.3))
    node, = fused_nodes(fused)
    feeds = normal_feeds(model, rng)
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(fused, feeds)[0], golden_of(fused, node, feeds), np.float16)
    assert ok, detail


def test_half_divisor_beyond_rounding_is_refused() -> None:
    model = _sl1_where(T.FLOAT16, 0.3, const_node("div", 0.31, T.FLOAT16))
    _, report = fuse_checked(model)
    assert not report.fusions
    assert any("scales x by" in r.reason for r in report.rejections), report.summary()


def test_clamp_as_max_and_min_fuses_with_the_mean(rng: np.random.Generator) -> None:
    """The dynamo exporter before its optimizer: torch.clamp(d/2, -1, 1) as Min(Max(.)) and the
    mean as a final Div by numel."""
    nodes = [
        h.make_node("Sub", ["p", "t"], ["x"]), const_node("two", 2.0), h.make_node("Div", ["x", "two"], ["y"]),
        const_node("lo", -1.0), const_node("hi", 1.0),
        h.make_node("Max", ["y", "lo"], ["c1"]), h.make_node("Min", ["c1", "hi"], ["clamp"]),
        h.make_node("Mul", ["clamp", "go"], ["m"]), const_node("n", float(N)), h.make_node("Div", ["m", "n"], ["grad"]),
    ]
    model = graph_model(nodes, {"go": (T.FLOAT, ()), "p": (T.FLOAT, (N,)), "t": (T.FLOAT, (N,))},
                        {"grad": (T.FLOAT, (N,))})
    fused, report = fuse_checked(model)
    assert report.counts() == {SL1: 1}, report.summary()
    assert report.fusions[0].attributes == {"sigma": 2.0, "reduction": "mean", "scale": 1.0}
    node, = fused_nodes(fused)
    feeds = normal_feeds(model, rng)
    feeds["p"][:3] = [np.nan, 2.0, -2.0]  # NaN, and |x| == beta where label is 0
    feeds["t"][:3] = 0.0
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(fused, feeds)[0], golden_of(fused, node, feeds), np.float32)
    assert ok, detail


def _sl1_half(sign: list[onnx.NodeProto]) -> onnx.ModelProto:
    """torch.where(|x| < 0.5, go*x/0.5, go*sign(x)) in native float16; `sign` computes "s" from "x"."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
             h.make_node("Less", ["ax", "beta"], ["lt"]), h.make_node("Mul", ["go", "x"], ["gx"]),
             h.make_node("Div", ["gx", "beta"], ["lin"]), *sign, h.make_node("Mul", ["go", "s"], ["gs"]),
             h.make_node("Where", ["lt", "lin", "gs"], ["grad"])]
    return graph_model(nodes, {"go": (T.FLOAT16, ()), "p": (T.FLOAT16, (N,)), "t": (T.FLOAT16, (N,))},
                       {"grad": (T.FLOAT16, (N,))}, [const_tensor("beta", 0.5, T.FLOAT16)], opset=20)


@pytest.mark.parametrize("widened", [True, False], ids=["sign-in-float32", "native-sign"])
def test_float16_smooth_l1_caveat_only_for_a_native_float16_sign(widened: bool, rng: np.random.Generator) -> None:
    sign = ([h.make_node("Cast", ["x"], ["xf"], to=T.FLOAT), h.make_node("Sign", ["xf"], ["sf"]),
             h.make_node("Cast", ["sf"], ["s"], to=T.FLOAT16)] if widened else [h.make_node("Sign", ["x"], ["s"])])
    model = _sl1_half(sign)
    fused, report = fuse_checked(model)
    assert report.counts() == {SL1: 1}, report.summary()
    caveats = report.fusions[0].caveats
    assert bool([c for c in caveats if "float16 Sign maps NaN to 0" in c]) is not widened, caveats
    p = rng.standard_normal(N).astype(np.float16)
    p[:3] = [np.nan, np.inf, 0.0]
    feeds = {"go": np.array(1.5, np.float16), "p": p, "t": rng.standard_normal(N).astype(np.float16)}
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    if widened:  # where the graph's own Sign keeps NaN, the fused node agrees with it everywhere
        node, = fused_nodes(fused)
        ok, detail = precision_ok(before, golden_of(fused, node, feeds), before.dtype)
        assert ok, detail


def _capped_ratio(clip_inputs: list[str], extra: list) -> onnx.ModelProto:
    """sign(x) * Clip(|x|/0.5, ...) * go with x = p - t."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Sign", ["x"], ["s"]),
             h.make_node("Abs", ["x"], ["ax"]), const_node("beta", 0.5), h.make_node("Div", ["ax", "beta"], ["r"]),
             const_node("one", 1.0), *extra, h.make_node("Clip", ["r", *clip_inputs], ["capped"]),
             h.make_node("Mul", ["s", "capped"], ["g"]), h.make_node("Mul", ["g", "go"], ["grad"])]
    return graph_model(nodes, {"p": (T.FLOAT, (N,)), "t": (T.FLOAT, (N,)), "go": (T.FLOAT, ())},
                       {"grad": (T.FLOAT, (N,))})


def test_capped_ratio_as_clamp_max_fuses(rng: np.random.Generator) -> None:
    # torch.clamp(|x|/beta, max=1): Clip(r, '', 1), also with a lower bound that cannot bind
    for clip_inputs, extra in ((["", "one"], []), (["zero", "one"], [const_node("zero", 0.0)])):
        model = _capped_ratio(clip_inputs, extra)
        feeds = {"p": rng.standard_normal(N).astype(np.float32), "t": rng.standard_normal(N).astype(np.float32),
                 "go": np.float32(rng.standard_normal())}
        feeds["p"][:6] = [0.5, -0.5, 0.0, np.nan, np.inf, -np.inf]
        feeds["t"][:6] = 0.0
        node = assert_fuses_once(model, SL1, feeds)
        assert next(a.f for a in node.attribute if a.name == "sigma") == 0.5


def test_capped_ratio_with_a_binding_lower_bound_is_not_fused() -> None:
    assert_not_fused(_capped_ratio(["half", "one"], [const_node("half", 0.5)]))


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
    constants = [const_tensor(n, v) for n, v in
                 (("beta", 0.25), ("zero", 0.0), ("half", 0.5), ("minus_half", -0.5), ("one", 1.0), ("two", 2.0))]
    return graph_model(nodes, {n: (T.FLOAT, (N,)) for n in ("p", "t", "g")}, {"grad": (T.FLOAT, (N,))}, constants)


def test_autograd_of_a_hand_written_smooth_l1_fuses(rng: np.random.Generator) -> None:
    for terms in ("fvcore", "mmdet"):
        model = _select_sum_grad(terms)
        feeds = {n: rng.standard_normal(N).astype(np.float32) * np.float32(0.3) for n in ("p", "t", "g")}
        feeds["p"][:5] = [0.25, -0.25, 0.0, -0.0, np.nan]  # |x| == beta, zeros, NaN (t = 0 there)
        feeds["t"][:5] = 0.0
        node = assert_fuses_once(model, SL1, feeds)
        assert list(node.input) == ["p", "t", "g"]
        fused, report = lowering.fuse(model)
        # autograd sums the masked branches: NaN where the branch not taken is inf, the blend variant
        assert report.fusions[0].attributes == {"sigma": 0.25, "reduction": "none", "scale": 1.0,
                                                "nonfinite": "blend"}
        assert report.normalization.get("powers of 1 removed", 0) == (terms == "fvcore")


def test_sum_of_selects_on_different_conditions_or_cancelling_terms_is_not_fused() -> None:
    assert_not_fused(_select_sum_grad("fvcore", second_cond="le"))
    assert_not_fused(_select_sum_grad("cancel"))


def test_mean_over_the_numel_of_x_itself_fuses(rng: np.random.Generator) -> None:
    # TorchScript with a dynamic batch: d = p - t; where(...) / d.numel() as
    # Div(select, Cast(ReduceProd(Shape(d)))): the Shape reads the matched x and goes with it
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["n"]),
             h.make_node("Less", ["n", "beta"], ["lt"]), h.make_node("Div", ["x", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["s"]), h.make_node("Where", ["lt", "lin", "s"], ["sel"]),
             h.make_node("Shape", ["x"], ["shape"]), h.make_node("ReduceProd", ["shape"], ["count"], keepdims=0),
             h.make_node("Cast", ["count"], ["countf"], to=T.FLOAT), h.make_node("Div", ["sel", "countf"], ["mean"]),
             h.make_node("Mul", ["mean", "go"], ["grad"])]
    model = graph_model(nodes, {"p": (T.FLOAT, ["batch", 5]), "t": (T.FLOAT, ["batch", 5]), "go": (T.FLOAT, [])},
                        {"grad": (T.FLOAT, ["batch", 5])}, [const_tensor("beta", 0.25)])
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
    constants = [const_tensor("neg", -0.5), const_tensor("pos", 0.5)]
    constants += [onnx.numpy_helper.from_array(v.astype(np.float32), n) for n, v in
                  ((("ones", np.ones(N)),) if ones else ())
                  + (("high", np.full(low_values.shape, 0.5)), ("low", low_values))]
    out_shape = np.broadcast_shapes(low_values.shape, (N,))
    return graph_model(nodes, {"p": (T.FLOAT, (N,)), "t": (T.FLOAT, (N,))}, {"grad": (T.FLOAT, out_shape)}, constants)


def test_huber_gradient_with_its_scale_folded_into_full_tensors_fuses(rng: np.random.Generator) -> None:
    model = _huber_folded(np.full(N, -0.5))
    feeds = {n: rng.standard_normal(N).astype(np.float32) for n in ("p", "t")}
    feeds["p"][:4], feeds["t"][:4] = [0.5, -0.5, np.nan, 0.0], 0.0
    node = assert_fuses_once(model, SL1, feeds)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["sigma"] == 0.5 and attrs["scale"] == 0.5 and node.input[2] == "ones"


def test_huber_gradient_with_a_non_uniform_constant_is_not_fused() -> None:
    assert_not_fused(_huber_folded(np.linspace(-0.5, -0.4, N)))


def test_huber_gradient_whose_ones_factor_an_optimizer_dropped_fuses(rng: np.random.Generator) -> None:
    # Where(x < -0.5, LOW, Where(x > 0.5, HIGH, x)): the full tensors' one value is the scale
    model = _huber_folded(np.full(N, -0.5), ones=False)
    feeds = {n: rng.standard_normal(N).astype(np.float32) for n in ("p", "t")}
    feeds["p"][:5], feeds["t"][:5] = [0.5, -0.5, np.nan, 0.0, np.inf], 0.0
    node = assert_fuses_once(model, SL1, feeds)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["sigma"] == 0.5 and attrs["scale"] == 0.5 and attrs["reduction"] == b"sum"


def test_huber_gradient_whose_constant_branches_broadcast_x_is_not_fused() -> None:
    # the branches' [2, N] tensors make the gradient [2, N] from an x of [N]: no fused op does that
    assert_not_fused(_huber_folded(np.full((2, N), -0.5), ones=False))


def _over_floored_abs(floor: str, beta: float) -> onnx.ModelProto:
    """x / max(|x|, beta) * go / numel, the floor as Max or as Clip(|x|, min=beta) (torch.clamp)."""
    floor_node = (h.make_node("Max", ["a", "beta"], ["floor"]) if floor == "Max"
                  else h.make_node("Clip", ["a", "beta"], ["floor"]))
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["a"]), floor_node,
             h.make_node("Div", ["x", "floor"], ["ratio"]), h.make_node("Mul", ["ratio", "go"], ["scaled"]),
             h.make_node("Div", ["scaled", "n"], ["grad"])]
    return graph_model(nodes, {"p": (T.FLOAT, (N,)), "t": (T.FLOAT, (N,)), "go": (T.FLOAT, ())},
                       {"grad": (T.FLOAT, (N,))}, [const_tensor("beta", beta), const_tensor("n", N)])


@pytest.mark.parametrize("floor", ["Max", "Clip"])
def test_x_over_floored_abs_fuses_as_its_nonfinite_behaviour_allows(floor: str, rng: np.random.Generator) -> None:
    """x / max(|x|, beta) is inf/inf = NaN at x = +-inf: exactly the blend variant's NaN where
    x / sigma is not finite, so it fuses with no caveat. Clip without max caps |x| at the largest
    float, so x = +-inf gives +-inf there, which no variant gives: fused under assume_finite only."""
    model = _over_floored_abs(floor, 0.5)
    if floor == "Clip":
        _, strict = lowering.fuse(model)
        assert not strict.fusions and any("non-finite" in r.reason for r in strict.rejections), strict.summary()
    feeds = {"p": rng.standard_normal(N).astype(np.float32), "t": rng.standard_normal(N).astype(np.float32),
             "go": np.array(1.5, np.float32)}
    feeds["p"][:5], feeds["t"][:5] = [0.5, -0.5, 0.0, np.nan, 0.49999997], 0.0
    fused, report = lowering.fuse(model, assume_finite=floor == "Clip")
    fusion, = report.fusions
    assert fusion.attributes["nonfinite" if floor == "Max" else "sigma"] == ("blend" if floor == "Max" else 0.5)
    assert fusion.assumed_finite == (floor == "Clip")
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    node, = fused_nodes(fused)
    ok, detail = precision_ok(run_ort(model, feeds)[0], golden_of(fused, node, feeds), np.float32)
    assert ok, detail


def test_x_over_floored_abs_with_beta_zero_is_refused() -> None:
    _, report = lowering.fuse(_over_floored_abs("Max", 0.0))
    assert not report.fusions and any("0/0 = NaN at x = 0" in r.reason for r in report.rejections), report.summary()


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
    return graph_model(nodes, {"p": (T.FLOAT, ["batch", 5]), "t": (T.FLOAT, ["batch", 5]), "go": (T.FLOAT, [])},
                       {"grad": (T.FLOAT, ["batch", 5])},
                       [const_tensor("beta", 0.25), onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")])


def test_shape_of_a_matched_intermediate_is_read_from_an_input_of_its_shape(rng: np.random.Generator) -> None:
    model = _batch_mean_grad()
    fused, report = fuse_checked(model)
    assert report.counts() == {SL1: 1}, report.summary()
    assert [list(n.input) for n in fused.graph.node if n.op_type == "Shape"] == [["p"]]
    feeds = {"p": rng.standard_normal((6, 5)).astype(np.float32), "t": rng.standard_normal((6, 5)).astype(np.float32),
             "go": np.float32(rng.standard_normal())}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


def test_matched_intermediate_read_by_another_op_is_still_refused_without_recompute() -> None:
    _, report = lowering.fuse(_batch_mean_grad("Relu"), recompute_shared=False)
    assert not report.fusions, report.summary()
    assert any("also used by" in r.reason for r in report.rejections), report.summary()
