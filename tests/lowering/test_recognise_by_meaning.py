"""Recognition by meaning (lowering.patterns.meaning): random spellings of the two functions fuse,
with the fused model running as the original under onnxruntime; random perturbations do not, and
their near miss gives a counterexample. Every random case prints its seed when it fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from fixture_manifests import as_proved
from new_exporter_check import runnable_copy
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from pass_numerics import assert_same, run_ort

import lowering
from lowering.patterns import DEFAULT_PATTERNS
from lowering.rewrite import fuse_proto

REPO = Path(__file__).resolve().parents[2]
N = 24
SIGMA = 0.5


class _Graph:
    """A tiny graph builder: each op gets a fresh output name."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = f"v{len(self.nodes)}"
        self.nodes.append(h.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, value: float) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def commuted(self, op_type: str, a: str, b: str) -> str:
        return self.op(op_type, *((a, b) if self.rng.random() < 0.5 else (b, a)))

    def noise(self, value: str) -> str:
        """value, or value + 0, value * 1, a float32 Cast or an Identity of it."""
        k = self.rng.integers(0, 5)
        if k == 1:
            return self.commuted("Add", value, self.const(0.0))
        if k == 2:
            return self.commuted("Mul", value, self.const(1.0))
        if k == 3:
            return self.op("Cast", value, to=T.FLOAT)
        return self.op("Identity", value) if k == 4 else value

    def model(self, inputs: list[tuple[str, tuple]], output: str) -> onnx.ModelProto:
        self.nodes.append(h.make_node("Identity", [output], ["out"]))
        graph = h.make_graph(self.nodes, "g", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                             [h.make_tensor_value_info("out", T.FLOAT, (N,))], self.inits)
        return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _sign(g: _Graph, x: str, keep_nan: bool = True) -> str:
    """sign(x), as Sign or from comparisons; those give 0 for NaN, so `keep_nan` adds x * 0."""
    k = g.rng.integers(0, 3)
    zero = g.const(0.0)
    if k == 0:
        return g.op("Sign", x)
    if k == 1:  # where(x > 0, 1, where(x < 0, -1, 0))
        inner = g.op("Where", g.op("Less", x, zero), g.const(-1.0), zero)
        sign = g.op("Where", g.op("Greater", x, zero), g.const(1.0), inner)
    else:
        sign = g.op("Sub", g.op("Cast", g.op("Greater", x, zero), to=T.FLOAT),
                    g.op("Cast", g.op("Less", x, zero), to=T.FLOAT))
    return g.commuted("Add", sign, g.commuted("Mul", x, zero)) if keep_nan else sign


def _smooth_l1_ratio(g: _Graph, x: str, wrong: str = "") -> str:
    """x/sigma inside |x| < sigma, sign(x) outside, in one of several spellings; `wrong` perturbs
    it into something else: "swap" exchanges or changes a branch, "constant" moves one kink."""
    k = g.rng.integers(0, 4)
    b = g.const(SIGMA)
    moved = g.const(SIGMA * 1.25)
    if k == 0:  # torch's where
        compare = "LessOrEqual" if g.rng.random() < 0.5 else "Less"
        inside, outside = g.noise(g.op("Div", x, b)), g.noise(_sign(g, x))
        if wrong == "swap":
            inside, outside = outside, inside
        return g.op("Where", g.op(compare, g.op("Abs", x), moved if wrong == "constant" else b), inside, outside)
    if k == 1:  # clip(x / sigma, -1, 1), as Clip or Min(Max())
        ratio = g.op("Div", x, b)
        low, high = g.const(-1.25 if wrong == "constant" else -1.0), g.const(0.5 if wrong == "swap" else 1.0)
        if g.rng.random() < 0.5:
            return g.op("Clip", ratio, low, high)
        return g.op("Min", g.op("Max", ratio, low), high)
    if k == 2:  # sign(x) * min(|x| / sigma, 1)
        cap = g.commuted("Max" if wrong == "swap" else "Min", g.op("Div", g.op("Abs", x), b), g.const(1.0))
        shifted = g.op("Sub", x, g.const(0.01)) if wrong == "constant" else x
        return g.commuted("Mul", _sign(g, shifted), cap)
    # float masks: m * x / sigma + (1 - m) * sign(x)
    m = g.op("Cast", g.op("Less", g.op("Abs", x), moved if wrong == "constant" else b), to=T.FLOAT)
    rest = g.op("Sub", g.const(1.0), m) if wrong != "swap" else m
    return g.commuted("Add", g.commuted("Mul", m, g.op("Div", x, b)), g.commuted("Mul", rest, _sign(g, x)))


def smooth_l1_model(seed: int, wrong: str = "") -> onnx.ModelProto:
    """dout * (x/sigma if |x| < sigma else sign(x)), x = predict - label, sigma = 0.5; `wrong` as in
    _smooth_l1_ratio, or "sign" (-sign(x) outside), "no-dout" (one branch without dout)."""
    g = _Graph(np.random.default_rng(seed))
    x = g.op("Sub", "predict", "label")
    if wrong in ("no-dout", "sign"):
        b = g.const(SIGMA)
        inside = g.commuted("Mul", g.op("Div", x, b), "dout")
        outside = g.op("Sign", x) if wrong == "no-dout" else g.commuted("Mul", g.op("Neg", _sign(g, x)), "dout")
        grad = g.op("Where", g.op("Less", g.op("Abs", x), b), inside, outside)
        return g.model([("predict", (N,)), ("label", (N,)), ("dout", ())], grad)
    scaled = g.commuted("Mul", _smooth_l1_ratio(g, x, wrong), "dout")
    return g.model([("predict", (N,)), ("label", (N,)), ("dout", ())], g.noise(scaled))


def proximal_model(seed: int, wrong: str = "") -> onnx.ModelProto:
    """sign(p) * max(|p| - 0.0625, 0) / 1.03125, p = var - 0.125 delta; `wrong`: "sign" takes the
    sign of var + 0.125 delta, "constant" floors the clamp at 0.01."""
    g = _Graph(np.random.default_rng(seed))
    rng = g.rng
    step = g.commuted("Mul", "delta", g.const(0.125))
    p = g.op("Sub", "var", step) if rng.random() < 0.5 else g.commuted("Add", "var", g.op("Neg", step))
    t = g.const(0.0625)
    shrunk_abs = g.op("Sub", g.op("Abs", p), t)
    k = rng.integers(0, 3) if wrong != "constant" else 1
    if k == 0:
        clamp = g.op("Relu", shrunk_abs)
    elif k == 1:
        clamp = g.commuted("Max", shrunk_abs, g.const(0.01 if wrong == "constant" else 0.0))
    else:
        clamp = g.op("Clip", shrunk_abs, g.const(0.0))
    sign = _sign(g, g.op("Add", "var", step) if wrong == "sign" else p)
    out = g.commuted("Mul", sign, clamp)
    out = g.op("Div", out, g.const(1.03125)) if rng.random() < 0.5 else g.commuted("Mul", out, g.const(1 / 1.03125))
    return g.model([("var", (N,)), ("delta", (N,))], g.noise(out))


def _feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        feeds[vi.name] = (rng.standard_normal(shape) * 0.6).astype(np.float32)
    first = model.graph.input[0].name
    feeds[first][:7] = [0.0, -0.0, SIGMA, -SIGMA, 0.0625 + 0.125 * feeds["delta"][5] if "delta" in feeds else 0.1,
                        np.nan, np.inf]
    return feeds


def _assert_fuses(model: onnx.ModelProto, op_type: str, seed: int) -> None:
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {op_type: 1}, f"seed {seed}:\n{report.summary()}"
    feeds = _feeds(model, np.random.default_rng(seed))
    for before, after in zip(run_ort(model, feeds), run_ort(fused, feeds)):
        assert_same(before, after)


@pytest.mark.parametrize("seed", range(40))
def test_random_smooth_l1_spellings_fuse(seed: int) -> None:
    _assert_fuses(smooth_l1_model(seed), "SmoothL1LossGradV2", seed)


@pytest.mark.parametrize("seed", range(30))
def test_random_proximal_spellings_fuse(seed: int) -> None:
    _assert_fuses(proximal_model(seed), "ApplyProximalGradientDescent", seed)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("family, wrong", [("sl1", "swap"), ("sl1", "sign"), ("sl1", "constant"), ("sl1", "no-dout"),
                                           ("prox", "sign"), ("prox", "constant")])
def test_random_perturbations_are_refused_with_a_counterexample(family: str, wrong: str, seed: int) -> None:
    model = smooth_l1_model(seed, wrong) if family == "sl1" else proximal_model(seed, wrong)
    _, report = lowering.fuse(model)
    assert not report.fusions, f"seed {seed}:\n{report.summary()}"
    assert report.rejections, f"seed {seed}: no reason given"
    # without the patterns' own reasons in the way, the recogniser's is a counterexample
    _, report = fuse_proto(model, patterns=())
    assert not report.fusions, f"seed {seed}:\n{report.summary()}"
    assert any("differs from" in r.reason and "the graph gives" in r.reason for r in report.rejections), \
        f"seed {seed}:\n{report.summary()}"


@pytest.mark.parametrize("seed", range(6))
def test_a_sign_from_comparisons_that_loses_nan_is_refused(seed: int) -> None:
    # where(x > 0, 1, where(x < 0, -1, 0)) is sign(x) but for NaN, which it maps to 0; selected
    # outside |x| < sigma, it makes the gradient 0 where the fused op gives NaN
    g = _Graph(np.random.default_rng(seed))
    x = g.op("Sub", "predict", "label")
    while (sign := _sign(g, x, keep_nan=False)) and g.nodes[-1].op_type == "Sign":
        pass
    b = g.const(SIGMA)
    grad = g.op("Mul", g.op("Where", g.op("Less", g.op("Abs", x), b), g.op("Div", x, b), sign), "dout")
    _, report = lowering.fuse(g.model([("predict", (N,)), ("label", (N,)), ("dout", ())], grad))
    assert not report.fusions, f"seed {seed}:\n{report.summary()}"
    assert report.rejections, f"seed {seed}"


def test_a_changed_branch_names_the_input_where_it_differs() -> None:
    g = _Graph(np.random.default_rng(0))
    x = g.op("Sub", "predict", "label")
    b = g.const(SIGMA)
    # the inside branch forgets to divide by sigma
    grad = g.op("Mul", g.op("Where", g.op("Less", g.op("Abs", x), b), x, g.op("Sign", x)), "dout")
    model = g.model([("predict", (N,)), ("label", (N,)), ("dout", ())], grad)
    _, report = fuse_proto(model, patterns=())
    reasons = [r.reason for r in report.rejections if r.pattern.endswith("/meaning")]
    assert reasons and reasons[0].startswith("differs from SmoothL1LossGradV2("), report.summary()
    assert "the graph gives" in reasons[0] and "the fused op" in reasons[0]


def _new_exporter_entries() -> list[dict]:
    """The fixtures of the exporters taught by meaning (JAX, onnxruntime-training, Paddle)."""
    out = []
    for folder in ("jax", "ort_training", "paddle"):
        path = REPO / "tests" / "fixtures" / folder / "manifest.json"
        out += [as_proved(e) for e in json.loads(path.read_text())] if path.exists() else []
    return out


# NaN in p gives 0 in these (the where's 0 branch, ONNX Shrink): the op's nan_to_zero variant
_JAX_NAN_TO_ZERO = {"prox_const_where_f32.onnx", "prox_tensor_where_f32.onnx", "prox_const_softshrink.onnx"}
# grad_t = -grad_p reads the first instance's output: one fused node, and grad_t stays its Neg
# (a second kernel would recompute what the Neg derives)
_JAX_ONE_OF_TWO = {"sl1_optax_huber_both_grads_sum_d1_f32.onnx"}


@pytest.mark.parametrize("entry", _new_exporter_entries(),
                         ids=lambda e: e["file"].split("/")[-2] + "/" + Path(e["file"]).stem)
def test_new_exporter_fixture_fuses_as_its_manifest_says(entry: dict) -> None:
    name = Path(entry["file"]).name
    model = onnx.load(REPO / entry["file"])
    fused, report = lowering.fuse(model)
    want = {k: v for k, v in entry["expected"].items() if v}
    if name in _JAX_NAN_TO_ZERO:
        assert [f.attributes["nonfinite"] for f in report.fusions] == ["nan_to_zero"], report.summary()
    if name in _JAX_ONE_OF_TWO:
        want = {k: 1 for k in want}
    assert report.counts() == want, report.summary()
    rng = np.random.default_rng(18)
    feeds = {}
    for input_name, spec in entry["inputs"].items():
        if "value" in spec:  # a flag such as onnxruntime-training's lazy_reset_grad
            feeds[input_name] = np.full(spec["shape"], spec["value"], np.dtype(spec["dtype"]))
            continue
        dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[spec["dtype"]]
        values = rng.standard_normal(spec["shape"]).astype(np.float32)
        values.reshape(-1)[:4] = [0.0, -0.0, np.nan, np.inf][:values.size]
        feeds[input_name] = values.astype(dtype)
    # onnxruntime-training's training-only ops run as the ONNX ops they are defined by
    runnable = [runnable_copy(m, [], onnx.TensorProto.FLOAT) for m in (model, fused)]
    for before, after in zip(run_ort(runnable[0], feeds), run_ort(runnable[1], feeds)):
        assert_same(before, after)


def test_a_runtime_loss_weight_is_dout_to_the_recogniser() -> None:
    # tf.compat.v1.losses.huber_loss(weights=w): the patterns take a constant weight only; the
    # recogniser binds w as dout, and the region equals the op except at +-inf inputs, so it
    # fuses under assume_finite only
    model = onnx.load(REPO / "tests/fixtures/tf2onnx/nm_sl1_v1_huber_runtime_weight_f32_op13.onnx")
    _, report = lowering.fuse(model, by_meaning=False)
    assert not report.fusions
    assert any("read with a constant weight only" in r.reason for r in report.rejections), report.summary()
    assert not lowering.fuse(model)[1].fusions
    fused, report = lowering.fuse(model, assume_finite=True)
    fusion, = report.fusions
    assert fusion.pattern == "smooth_l1_grad/meaning" and fusion.inputs[2] == "w", report.summary()
    rng = np.random.default_rng(18)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
             for vi in model.graph.input}
    feeds["p"].reshape(-1)[:3] = [np.nan, 1.0, -1.0]
    feeds["t"].reshape(-1)[:3] = [0.0, 0.0, 0.0]
    for before, after in zip(run_ort(model, feeds), run_ort(fused, feeds)):
        assert_same(before, after)


def test_var_and_delta_with_dims_named_apart_lower_and_verify(tmp_path: Path, capsys) -> None:
    # tf2onnx's [unk__0, 16] and [unk__1, 16]: each is expanded to the other's shape, which the
    # kernel then sees as one shape; lower builds it and --verify runs it against the graph
    from app.cli import main

    model = REPO / "tests/fixtures/tf2onnx/nm_prox_tensor_maximum_f32_dynamic_op13.onnx"
    code = main([str(model), "--target", "ascend950", "-o", str(tmp_path), "--verify",
                 "--shape", "var=7,16", "--shape", "delta=7,16"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS: 2 of 2 comparisons" in out
    fused = onnx.load(str(tmp_path / f"{model.stem}.fused.onnx"))
    expands = [n for n in fused.graph.node if n.op_type == "Expand"]
    assert len(expands) == 2
    typed = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
             for vi in fused.graph.value_info}
    assert typed[expands[0].output[0]] == typed[expands[1].output[0]] == ["unk__0_or_unk__1", 16]


def test_a_region_op_the_evaluator_does_not_run_is_refused_not_raised() -> None:
    # sign(x) through an int8 Cast and back: a valid graph whose region holds a Cast the evaluator
    # does not run; inferring sigma evaluates the region before any proof does, and that must end
    # in a refusal, not an exception out of the pass
    g = _Graph(np.random.default_rng(0))
    x = g.op("Sub", "predict", "label")
    b = g.const(SIGMA)
    sign = g.op("Cast", g.op("Cast", g.op("Sign", x), to=T.INT8), to=T.FLOAT)
    grad = g.op("Mul", g.op("Where", g.op("Less", g.op("Abs", x), b), g.op("Div", x, b), sign), "dout")
    model = g.model([("predict", (N,)), ("label", (N,)), ("dout", ())], grad)
    onnx.checker.check_model(model, full_check=True)
    for patterns in ((), DEFAULT_PATTERNS):
        _, report = fuse_proto(model, patterns=patterns)
        assert not report.fusions, report.summary()
        assert any(r.pattern.endswith("/meaning") for r in report.rejections), report.summary()


_SYMMETRY_BREAKERS = {
    # a residual sum and its Relu: a kink over a difference of two tensors that is no loss gradient
    "relu of a sum": lambda g, a, b: g.op("Relu", g.op("Add", a, b)),
    "relu of a difference": lambda g, a, b: g.op("Relu", g.op("Sub", a, b)),
    "relu of a difference times b": lambda g, a, b: g.op("Mul", g.op("Relu", g.op("Sub", a, b)), b),
    "even in the difference": lambda g, a, b: g.op("Max", g.op("Sub", g.op("Abs", g.op("Sub", a, b)), g.const(0.5)),
                                                   g.const(0.0)),
}


@pytest.mark.parametrize("kind", sorted(_SYMMETRY_BREAKERS))
def test_a_kink_that_breaks_the_fused_ops_symmetries_is_refused_at_two_points_of_the_graph(kind: str, rng) -> None:
    """Both fused functions are odd in their tensor inputs, and SmoothL1's gradient is a function
    of predict - label: a region without that symmetry is refused with two points where the graph's
    own values show it, and onnxruntime on the graph gives those values there."""
    g = _Graph(rng)
    model = g.model([("a", (N,)), ("b", (N,))], _SYMMETRY_BREAKERS[kind](g, "a", "b"))
    _, report = fuse_proto(model, patterns=())
    assert not report.fusions
    reasons = [r.reason for r in report.rejections if r.reason.startswith("differs from every")]
    assert reasons, report.summary()
    number = r"(-?[0-9.e+-]+|-?inf|nan)"
    found = re.search(rf"\): at a={number}, b={number} the graph gives {number}, at a={number}, b={number} {number}$",
                      reasons[0])
    assert found, reasons[0]
    a0, b0, v0, a1, b1, v1 = (float(x) for x in found.groups())
    feeds = {"a": np.array([a0, a1] * (N // 2), np.float32), "b": np.array([b0, b1] * (N // 2), np.float32)}
    np.testing.assert_allclose(run_ort(model, feeds)[0][:2], [v0, v1], rtol=1e-6, atol=1e-6)
    # the symmetry the reason names is broken by those values
    same_sign = "alone" in reasons[0]
    assert not np.isclose(v1, v0 if same_sign else -v0), reasons[0]


def _screened(model: onnx.ModelProto, output: str, family: str) -> str | None:
    """The symmetry screen's verdict on the region computing `output` from inputs a and b."""
    from lowering.algebra import Algebra
    from lowering.graph import GraphIndex, GraphInfo, decode_nodes
    from lowering.patterns.meaning.region import Walks, build
    from lowering.patterns.meaning.screen import screen_region

    index = GraphIndex(decode_nodes(model.graph), GraphInfo(model))
    region = build(Walks(Algebra(index), set()), output, ("a", "b"))
    return screen_region(index, region, family)


def test_an_unbounded_function_of_the_difference_is_no_smooth_l1_gradient(rng) -> None:
    # x + clip(x, -1, 1): odd and a function of x = a - b, but it grows where the gradient is constant
    g = _Graph(rng)
    x = g.op("Sub", "a", "b")
    out = g.op("Add", x, g.op("Clip", x, g.const(-1.0), g.const(1.0)))
    model = g.model([("a", (N,)), ("b", (N,))], out)
    reason = _screened(model, out, "smooth_l1_grad")
    assert reason is not None and "stays constant once |a - b| passes sigma" in reason, reason
    # the gradient itself passes, and so does the shrink for the proximal family
    g = _Graph(rng)
    x = g.op("Sub", "a", "b")
    grad = g.op("Clip", g.op("Div", x, g.const(SIGMA)), g.const(-1.0), g.const(1.0))
    shrink = g.op("Sub", x, g.op("Clip", x, g.const(-SIGMA), g.const(SIGMA)))
    model = g.model([("a", (N,)), ("b", (N,))], grad)
    assert _screened(model, grad, "smooth_l1_grad") is None
    assert _screened(model, shrink, "proximal_gd") is None
