"""SmoothL1 backward with a label (or dout) that broadcasts to predict's shape (p - t[:, None], a
per-row target): fused with the fused node reading the label as it is, since the kernel broadcasts
it (a broadcast load); labels that do not broadcast to predict's shape stay refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator
from pass_forms import SL1, F, G, H, autograd_where_loss
from pass_numerics import assert_same_outputs, fused_nodes, precision_ok, run_ort

import lowering
from codegen.api import build_kernels
from codegen.nodes import node_spec
from contracts.fused_ops import smooth_l1_grad_reference
from lowering.rewrite import fuse_proto
from runtime.backend import KernelCall
from runtime.backends.cpu import CpuBackend

_PREDICT = object()  # the output shape default: predict's


def _where_form(label_shape, predict_shape=(3, 4), dtype: int = F, out_shape=_PREDICT,
                dout_shape=()) -> onnx.ModelProto:
    """PyTorch's decomposition, sum reduction, beta 0.5, Cast-wrapped for float16."""
    g = G()
    p, t, go = g.input("predict", dtype, predict_shape), g.input("label", dtype,
                                                                 label_shape), g.input("dout", dtype, dout_shape)
    if dtype != F:
        p, t, go = (g.op("Cast", v, to=F) for v in (p, t, go))
    x = g.op("Sub", p, t)
    b = g.const(0.5)
    y = g.op("Where", g.op("Less", g.op("Abs", x), b), g.op("Div", g.op("Mul", go, x), b),
             g.op("Mul", go, g.op("Sign", x)))
    if dtype != F:
        y = g.op("Cast", y, to=dtype)
    g.output(y, dtype, predict_shape if out_shape is _PREDICT else out_shape)
    return g.model()


def _feeds(model: onnx.ModelProto, rng: np.random.Generator,
           dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value if d.HasField("dim_value") else dims[d.dim_param]
                      for d in vi.type.tensor_type.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = np.asarray(rng.standard_normal(shape)).astype(dtype)
    p, t = feeds["predict"].reshape(-1), feeds["label"].reshape(-1)
    p[:4] = np.asarray([0.5, -0.5, 0.0, np.nan]) + t[:4].astype(np.float64) if t.size >= 4 else p[:4]
    return feeds


def _assert_fuses_with_broadcast(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                                 roles: tuple[str, ...] = ("label",)) -> onnx.NodeProto:
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {SL1: 1}, report.summary()
    fusion, = report.fusions
    for role in roles:
        assert any(c.startswith(f"{role} (") and "broadcasts to predict's shape in the kernel" in c
                   for c in fusion.caveats), fusion.caveats
    node, = fused_nodes(fused)
    # the fused node reads the broadcast inputs as they are: the pass adds no Expand or Shape
    def expands(m: onnx.ModelProto) -> int:
        return sum(n.op_type in ("Expand", "Shape") for n in m.graph.node)

    assert expands(fused) <= expands(model)
    assert node.input[1] == "label" and ("dout" not in roles or node.input[2] == "dout")
    assert_same_outputs(model, fused, feeds)
    # the node (its function body) and the kernel against the float64 formula
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    # the node's inputs as the graph computes them (dout may be an intermediate value)
    values = dict(zip(node.input, ReferenceEvaluator(fused).run(list(node.input), feeds)))
    predict, label, dout = (values[v] for v in node.input)
    golden = smooth_l1_grad_reference(predict, label, dout, sigma=attrs["sigma"],
                                      reduction=attrs["reduction"].decode(), scale=attrs["scale"])
    actual = run_ort(fused, feeds)[0]
    ok, detail = precision_ok(actual, golden, actual.dtype)
    assert ok, detail
    kernel, = build_kernels(fused, "ascend950")
    assert kernel.kernel.param("label").broadcast
    spec = node_spec(fused, node)
    inputs = {"predict": predict, "label": label, "dout": dout}
    out = CpuBackend().run(KernelCall(spec, inputs, "ascend950"))["gradient"]
    ok, detail = precision_ok(out, golden, out.dtype)
    assert ok, detail
    return node


@pytest.mark.parametrize("label_shape", [(4,), (3, 1), (1, 4), (1,), ()])
def test_label_that_broadcasts_to_predict_fuses(label_shape, rng: np.random.Generator) -> None:
    model = _where_form(label_shape)
    _assert_fuses_with_broadcast(model, _feeds(model, rng))


@pytest.mark.parametrize("dout_shape", [(4,), (3, 1), (1, 4)])
def test_dout_that_broadcasts_to_predict_fuses(dout_shape, rng: np.random.Generator) -> None:
    model = _where_form((3, 1), dout_shape=dout_shape)
    _assert_fuses_with_broadcast(model, _feeds(model, rng), ("label", "dout"))


def test_dout_that_would_grow_the_gradient_is_refused(rng: np.random.Generator) -> None:
    model = _where_form((4,), out_shape=(2, 3, 4), dout_shape=(2, 1, 1))
    fused, report = lowering.fuse(model, by_meaning=False)
    assert not report.fusions, report.summary()
    assert any("dout's shape does not broadcast to predict's" in r.reason for r in report.rejections), report.summary()


def test_broadcast_label_with_a_dynamic_batch_fuses(rng: np.random.Generator) -> None:
    model = _where_form((4,), predict_shape=("batch", 4))
    _assert_fuses_with_broadcast(model, _feeds(model, rng, {"batch": 6}))


def test_broadcast_label_of_a_cast_wrapped_float16_graph_fuses(rng: np.random.Generator) -> None:
    model = _where_form((3, 1), dtype=H)
    node = _assert_fuses_with_broadcast(model, _feeds(model, rng))
    assert node.input[:1] == ["predict"]  # the Casts were absorbed: the fused node is float16


def test_broadcast_label_in_autograd_of_a_where_loss_fuses(rng: np.random.Generator) -> None:
    model = autograd_where_loss((3, 1))  # p - t[:, None]
    node = _assert_fuses_with_broadcast(model, _feeds(model, rng))
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["reduction"] == b"mean"


@pytest.mark.parametrize("label_shape, predict_shape", [((3,), (3, 4)), ((2, 4), (3, 4)), ((3, 4), (4,)),
                                                         ((2, 3, 4), (3, 4))])
def test_label_that_does_not_broadcast_to_predict_is_refused(label_shape, predict_shape,
                                                             rng: np.random.Generator) -> None:
    # the first two do not line up with predict's dims; a label bigger than predict makes the
    # gradient bigger than predict, which is no gradient of predict that the kernel writes
    try:
        out_shape = np.broadcast_shapes(label_shape, predict_shape)
    except ValueError:  # a graph onnxruntime would refuse to run: the pass must still say no
        out_shape = predict_shape
    model = _where_form(label_shape, predict_shape, out_shape=out_shape)
    _, report = lowering.fuse(model, by_meaning=False)
    assert not report.fusions, report.summary()
    assert any("only a label that broadcasts to predict's shape" in r.reason
               for r in report.rejections), report.summary()
    fused, report = lowering.fuse(model)
    if out_shape != tuple(label_shape):
        assert not report.fusions, report.summary()
        return
    # a label bigger than predict: the values are the gradient with the two swapped, times -1
    # (sign(t - p) = -sign(p - t)), which the recogniser proves; predict is then the label
    fusion, = report.fusions
    assert fusion.attributes["scale"] == -1.0 and fusion.pattern == "smooth_l1_grad/meaning", report.summary()
    assert_same_outputs(model, fused, _feeds(model, rng))


def test_a_divide_by_the_broadcast_labels_numel_stays_outside(rng: np.random.Generator) -> None:
    # dividing by numel(label) is not the mean over predict, which is all a reduction of the
    # kernel can say: the select fuses (reduction sum) and the divide stays after it
    g = G()
    p, t, go = g.input("predict", shape=(3, "n")), g.input("label", shape=("n",)), g.input("dout", shape=())
    x = g.op("Sub", p, t)
    b = g.const(0.5)
    sel = g.op("Where", g.op("Less", g.op("Abs", x), b), g.op("Div", g.op("Mul", go, x), b),
               g.op("Mul", go, g.op("Sign", x)))
    g.output(g.op("Div", sel, g.op("Cast", g.op("Size", t), to=F)), shape=(3, "n"))
    model = g.model()
    fused, report = lowering.fuse(model)
    assert report.counts() == {SL1: 1} and report.fusions[0].attributes["reduction"] == "sum"
    div = next(n for n in fused.graph.node if n.op_type == "Div")
    assert div.input[0] == fused_nodes(fused)[0].output[0]
    assert_same_outputs(model, fused, _feeds(model, rng, {"n": 5}))


def _named_apart(predict_dims=("a", 4), label_dims=("b", 4), mean_of: str | None = "predict") -> onnx.ModelProto:
    """tf2onnx's hand-written mean gradient with each dynamic dim named on its own: g = go /
    numel(mean_of), where(|x| < 0.5, x/0.5, sign(x)) * g."""
    g = G()
    p, t, go = g.input("predict", shape=predict_dims), g.input("label", shape=label_dims), g.input("dout", shape=())
    x = g.op("Sub", p, t)
    scale = go if mean_of is None else g.op("Div", go, g.op("Cast", g.op("Size", mean_of), to=F))
    b = g.const(0.5)
    sel = g.op("Where", g.op("Less", g.op("Abs", x), b), g.op("Div", x, b), g.op("Sign", x))
    g.output(g.op("Mul", sel, scale), shape=("c", 4))
    return g.model()


@pytest.mark.parametrize("by_meaning", [False, True])
@pytest.mark.parametrize("mean_of", ["predict", "label", None])
def test_predict_and_label_with_dims_named_apart_fuse_expanded_to_their_broadcast(
        by_meaning: bool, mean_of: str | None, rng: np.random.Generator) -> None:
    """Nothing says [a, 4] and [b, 4] agree: the rewrite expands each to the other's shape, which
    is their broadcast, so the fused node computes what the graph computes for every a and b the
    graph runs with; a count of one of them is not the broadcast's, so it stays the graph's own
    (dout is the quotient, reduction sum)."""
    model = _named_apart(mean_of=mean_of)
    fused, report = fuse_proto(model, patterns=()) if by_meaning else lowering.fuse(model, by_meaning=False)
    fusion, = report.fusions
    assert fusion.op_type == SL1 and fusion.attributes["reduction"] == "sum", report.summary()
    assert any("are each expanded to the other's shape" in c for c in fusion.caveats), fusion.caveats
    assert sum(n.op_type == "Expand" for n in fused.graph.node) == 2
    for a, b in ((6, 6), (1, 6), (6, 1)):
        assert_same_outputs(model, fused, _feeds(model, rng, {"a": a, "b": b}))


@pytest.mark.parametrize("predict_dims, label_dims", [((3, 4), (5, 4)), (("a", 3), ("b", 4)),
                                                      (("a", 4), ("b", "c", 4))])
def test_dims_known_to_differ_are_refused(predict_dims, label_dims) -> None:
    model = _named_apart(predict_dims, label_dims)
    for _, report in (lowering.fuse(model, by_meaning=False), fuse_proto(model, patterns=())):
        assert not report.fusions, report.summary()


@pytest.mark.parametrize("by_meaning", [False, True])
def test_a_constant_count_of_a_predict_named_apart_is_a_scale_not_the_mean(by_meaning: bool,
                                                                         rng: np.random.Generator) -> None:
    """predict [1, 4] against label [b, 4]: the graph's 1/4 is 1/numel(predict) as declared, but the
    fused node reads predict expanded to [b, 4], whose mean would divide by 4b."""
    g = G()
    p, t, go = g.input("predict", shape=(1, 4)), g.input("label", shape=("b", 4)), g.input("dout", shape=())
    x = g.op("Sub", p, t)
    b = g.const(0.5)
    sel = g.op("Where", g.op("Less", g.op("Abs", x), b), g.op("Div", x, b), g.op("Sign", x))
    g.output(g.op("Mul", sel, g.op("Mul", go, g.const(0.25))), shape=("b", 4))
    model = g.model()
    fused, report = fuse_proto(model, patterns=()) if by_meaning else lowering.fuse(model, by_meaning=False)
    fusion, = report.fusions
    assert fusion.attributes["reduction"] != "mean", report.summary()
    for rows in (6, 1):
        assert_same_outputs(model, fused, _feeds(model, rng, {"b": rows}))
