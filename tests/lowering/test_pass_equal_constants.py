"""Equal constants are one constant: an exporter that writes an expression once per use gives each
copy its own constants (dynamo without its optimizer: torch.sub(v, g, alpha=a) twice is two
CastLike(a) chains; slices repeat their Reshape(Cast(c)) index chains), and the copies merge only
when their constants do. Values the user can override, and constants that differ in any bit
(-0.0 and 0.0), stay apart."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from pass_numerics import assert_runs_as_fused, assert_same, make_feeds, run_ort

import lowering

from .pass_forms import PGD, SL1, G


def _prox_with_copies(make_lr) -> onnx.ModelProto:
    """sign(p1) * relu(|p2| - t) / k, where p1 and p2 each compute v - lr*g with their own lr."""
    g = G()
    v, d = g.input("v"), g.input("d")
    p1 = g.op("Sub", v, g.op("Mul", d, make_lr(g)))
    p2 = g.op("Sub", v, g.op("Mul", d, make_lr(g)))
    shrunk = g.op("Relu", g.op("Sub", g.op("Abs", p2), g.const(0.005)))
    out = g.op("Div", g.op("Mul", g.op("Sign", p1), shrunk), g.const(1.001))
    g.output(out)
    return g.model()


def _fused(model: onnx.ModelProto) -> tuple[onnx.ModelProto, lowering.FusionReport]:
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, report


def _initializer(g: G) -> str:
    return g.const(0.1)


def _constant_node(g: G) -> str:
    return g.const_node(0.1)


def _folded(g: G) -> str:  # dynamo's CastLike(literal, g), one per use
    return g.op("Cast", g.const(0.1, dtype=onnx.TensorProto.DOUBLE), to=onnx.TensorProto.FLOAT)


@pytest.mark.parametrize("make_lr", [_initializer, _constant_node, _folded],
                         ids=["initializer", "constant-node", "folded"])
def test_copies_with_their_own_equal_constants_fuse(make_lr, rng: np.random.Generator) -> None:
    model = _prox_with_copies(make_lr)
    fused, report = _fused(model)
    assert [f.op_type for f in report.fusions] == [PGD]
    assert report.normalization["equal constants merged"] >= 1
    assert report.normalization["common subexpressions merged"] >= 2  # the Mul and the Sub
    feeds = make_feeds(model, rng, edges=(0.005,))
    assert_runs_as_fused(model, fused, feeds)


@pytest.mark.xfail(strict=True, reason="coverage the proof does not reach: sign(p1) * max(|p2| - t, 0) with steps "
                   "one bit apart differs from the update over the reals where |delta| > 6.7e5 puts var / delta "
                   "between the two steps; that float32 inputs (almost) never land there is not what it proves")
def test_constants_differing_in_one_bit_stay_apart() -> None:
    values = iter([np.float32(0.1), np.nextafter(np.float32(0.1), np.float32(1))])
    model = _prox_with_copies(lambda g: g.const(float(next(values))))
    _, report = lowering.fuse(model, by_meaning=False)
    assert not report.fusions
    assert "equal constants merged" not in report.normalization
    # sign(p1) and sign(p2) differ only where |p2| is far below t and the clamp is 0: by meaning the
    # update is the contract with the step of p2
    fused, report = _fused(model)
    assert [(f.op_type, f.pattern) for f in report.fusions] == [(PGD, "proximal_gd/meaning")], report.summary()
    assert_runs_as_fused(model, fused, make_feeds(model, np.random.default_rng(18), edges=(0.005,)))


def test_negative_zero_is_not_zero() -> None:
    g = G()
    x = g.input("x")
    a = g.op("Add", x, g.const(0.0))
    b = g.op("Add", x, g.const(-0.0))
    g.output(a)
    g.output(b)
    _, report = _fused(g.model())
    assert "equal constants merged" not in report.normalization
    assert "common subexpressions merged" not in report.normalization


def test_an_overridable_initializer_is_not_merged() -> None:
    # an initializer that is also a graph input is the user's to change at runtime
    model = _prox_with_copies(_initializer)
    second_lr = model.graph.initializer[1]
    model.graph.input.append(helper.make_tensor_value_info(second_lr.name, onnx.TensorProto.FLOAT, []))
    _, report = _fused(model)
    assert "equal constants merged" not in report.normalization
    assert not report.fusions  # sign(p1) and |p2| read different values


def test_a_constant_that_is_a_graph_output_keeps_its_name() -> None:
    g = G()
    x = g.input("x")
    first, second = g.const_node(2.0), g.const_node(2.0)
    g.output(g.op("Mul", x, first))
    g.output(second, shape=())
    model = g.model()
    fused, _ = _fused(model)
    assert second in {n.output[0] for n in fused.graph.node if n.op_type == "Constant"} | {
        t.name for t in fused.graph.initializer}


def test_sliced_predictions_repeated_per_use_fuse(rng: np.random.Generator) -> None:
    """SmoothL1 of out[:, :4] written three times, each slice with its own index constants."""
    g = G()
    out, t, go = g.input("out", shape=(3, 6)), g.input("t"), g.input("go")

    def index(value: float) -> str:  # dynamo: Reshape(Cast(Constant), Constant [1])
        shape = g.fresh("shape")
        g.nodes.append(helper.make_node("Constant", [], [shape],
                                        value=numpy_helper.from_array(np.array([1], np.int64))))
        return g.op("Reshape", g.op("Cast", g.const_node(value), to=onnx.TensorProto.INT64), shape)

    slices = []

    def pred() -> str:
        slices.append(g.op("Slice", out, index(0.0), index(4.0), index(1.0)))
        return slices[-1]

    beta = 0.5
    small = g.op("Less", g.op("Abs", g.op("Sub", pred(), t)), g.const(beta))
    grad = g.op("Where", small, g.op("Div", g.op("Sub", pred(), t), g.const(beta)),
                g.op("Sign", g.op("Sub", pred(), t)))
    g.output(g.op("Mul", grad, go))
    model = g.model()
    # as the exporter writes them: shape inference cannot see through the computed indices
    model.graph.value_info.extend(helper.make_tensor_value_info(s, onnx.TensorProto.FLOAT, [3, 4]) for s in slices)
    fused, report = _fused(model)
    assert [f.op_type for f in report.fusions] == [SL1]
    feeds = make_feeds(model, rng, edges=(0.5,))
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


def test_merged_initializers_leave_the_output() -> None:
    model = _prox_with_copies(_initializer)
    names = [t.name for t in model.graph.initializer]
    fused, _ = _fused(model)
    kept = {t.name for t in fused.graph.initializer}
    assert names[1] not in kept and not any(names[1] in n.input for n in fused.graph.node)
    assert numpy_helper.to_array(model.graph.initializer[0]) == np.float32(0.1)
