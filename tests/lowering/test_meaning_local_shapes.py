"""Graphs the recogniser by meaning needs shapes and values worked out for, and perturbations of
each refused with a reason:

- JAX's gradient with respect to label, -grad_p, stays the Neg of the fused gradient;
- a dout built by shape arithmetic (paddle2onnx's ones_like of a Max of shapes) is evaluated
  locally: a uniform fill is a constant, and its shape is known;
- a graph without value_info behind com.microsoft ops (onnxruntime-training) gets the types its
  match needs from the producers of its leaves.

Every fused model runs under onnxruntime as the original does, and each fused node meets the
precision standard against the contract's float64 formula on its own inputs and attributes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from new_exporter_check import runnable_copy
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from pass_numerics import assert_same, fused_nodes, golden_of, precision_ok, run_ort

import lowering

REPO = Path(__file__).resolve().parents[2]
N = 24
SIGMA = 0.5
SL1 = "SmoothL1LossGradV2"


def _edge_feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Normal inputs with predict - label at 0, -0, +-sigma exactly, NaN and inf in the first elements."""
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if vi.type.tensor_type.elem_type == T.BOOL:
            feeds[vi.name] = np.ones(shape, bool)
            continue
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    first, second = (vi.name for vi in model.graph.input[:2])
    edges = [(0.0, 0.0), (-0.0, 0.0), (SIGMA, 0.0), (-SIGMA, 0.0), (0.0, SIGMA), (1.0, 1.0), (np.nan, 0.0),
             (np.inf, 0.0)]
    for k, (a, b) in enumerate(edges[:feeds[first].size]):
        feeds[first].reshape(-1)[k], feeds[second].reshape(-1)[k] = a, b
    return feeds


def _assert_meaning_kept(model: onnx.ModelProto, fused: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """The fused model's outputs equal the original's, and every fused node's output meets the
    precision standard against its contract on its own inputs."""
    runnable = [runnable_copy(m, [], T.FLOAT) for m in (model, fused)]
    for before, after in zip(run_ort(runnable[0], feeds), run_ort(runnable[1], feeds)):
        assert_same(before, after)
    names = [o.name for o in model.graph.output]
    outputs = dict(zip(names, run_ort(runnable[0], feeds)))
    for node in fused_nodes(fused):
        if node.output[0] in outputs:
            ok, detail = precision_ok(outputs[node.output[0]], golden_of(fused, node, feeds), np.float32)
            assert ok, f"{node.name}: {detail}"


# ---------------------------------------------------------------------------------------------
# (a) a multiple of a fused output

def test_jax_label_gradient_stays_the_neg_of_the_fused_gradient(rng: np.random.Generator) -> None:
    # grad_t = -grad_p reads the fused output: one Neg derives it from there, where a second kernel
    # would read predict and label again to recompute it
    model = onnx.load(REPO / "tests/fixtures/jax/sl1_optax_huber_both_grads_sum_d1_f32.onnx")
    fused, report = lowering.fuse(model)
    assert [f.output for f in report.fusions] == ["grad_p"], report.summary()
    assert [n.op_type for n in fused.graph.node if n.output[0] == "grad_t"] == ["Neg"]
    _assert_meaning_kept(model, fused, _edge_feeds(model, rng))


# ---------------------------------------------------------------------------------------------
# (b) a dout built by shape arithmetic

PADDLE = REPO / "tests/fixtures/paddle/sl1_huber_value_and_grad_sum_d1.onnx"


def _paddle(**constants: np.ndarray) -> onnx.ModelProto:
    """The paddle2onnx value_and_grad fixture with some of its Constant nodes given other values."""
    model = onnx.load(PADDLE)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] in constants:
            old = numpy_helper.to_array(node.attribute[0].t)
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(constants[node.output[0]].astype(old.dtype),
                                                                 node.output[0]))
    return model


def test_paddle_ones_like_from_shape_arithmetic_is_a_constant_dout(rng: np.random.Generator) -> None:
    model = _paddle()
    fused, report = lowering.fuse(model)
    fusion, = report.fusions
    assert {k: v for k, v in fusion.attributes.items() if k != "nonfinite"} == \
        {"sigma": 1.0, "reduction": "sum", "scale": 1.0}, report.summary()
    # dout is the constant 1 the shape arithmetic proves, not the graph's tensor of ones
    assert fusion.inputs[:2] == ["p", "t"] and fusion.inputs[2] != "p2o.pd_op.expand.0.0"
    _assert_meaning_kept(model, fused, _edge_feeds(model, rng))


def test_paddle_dout_of_another_uniform_constant_fuses_with_the_scale_it_implies(rng: np.random.Generator) -> None:
    model = _paddle(**{"p2o.pd_op.full.4.0": np.array([2.5], np.float32)})
    fused, report = lowering.fuse(model)
    fusion, = report.fusions
    assert fusion.attributes["scale"] == 2.5, report.summary()
    _assert_meaning_kept(model, fused, _edge_feeds(model, rng))


def test_paddle_dout_of_zeros_is_refused_with_a_counterexample() -> None:
    # ones_like written with a 0: the region is 0 everywhere, which no SmoothL1 gradient is
    _, report = lowering.fuse(_paddle(**{"p2o.pd_op.full.4.0": np.array([0.0], np.float32)}))
    assert not report.fusions, report.summary()
    assert any("differs from every SmoothL1LossGradV2" in r.reason and "the graph gives 0" in r.reason
               for r in report.rejections), report.summary()


def test_paddle_dout_of_a_larger_shape_is_refused_with_a_reason() -> None:
    # Max(Shape(.), [2, 4, 5]): the dout broadcasts the gradient to [2, 4, 5], which no fused node gives
    model = _paddle(**{"p2o.pd_op.full_int_array.2.0": np.array([2, 4, 5], np.int64)})
    del model.graph.value_info[:]
    model.graph.output[1].CopyFrom(h.make_tensor_value_info(model.graph.output[1].name, T.FLOAT, (2, 4, 5)))
    _, report = lowering.fuse(model)
    assert not report.fusions, report.summary()
    assert report.rejections, "no reason given"


# ---------------------------------------------------------------------------------------------
# (c) onnxruntime-training graphs without value_info

def _ort_entries() -> list[dict]:
    entries = json.loads((REPO / "tests/fixtures/ort_training/manifest.json").read_text())
    return [e for e in entries if e["family"] != "near_miss"]


def _without_value_info(path: Path) -> onnx.ModelProto:
    model = onnx.load(path)
    del model.graph.value_info[:]
    return model


@pytest.mark.parametrize("entry", _ort_entries(), ids=lambda e: Path(e["file"]).stem)
def test_ort_training_graph_without_value_info_fuses_as_with_it(entry: dict, rng: np.random.Generator) -> None:
    typed = onnx.load(REPO / entry["file"])
    bare = _without_value_info(REPO / entry["file"])
    _, with_types = lowering.fuse(typed)
    fused, report = lowering.fuse(bare)
    assert report.counts() == with_types.counts() == {SL1: 1}, report.summary()
    seen = [(f.op_type, f.inputs, f.attributes, f.pattern) for f in report.fusions]
    assert seen == [(f.op_type, f.inputs, f.attributes, f.pattern) for f in with_types.fusions]
    onnx.checker.check_model(fused)
    feeds = {}
    for name, spec in entry["inputs"].items():
        feeds[name] = np.full(spec["shape"], spec["value"], np.dtype(spec["dtype"])) if "value" in spec \
            else rng.standard_normal(spec["shape"]).astype(np.float32)
    runnable = [runnable_copy(m, [], T.FLOAT) for m in (bare, fused)]
    for before, after in zip(run_ort(runnable[0], feeds), run_ort(runnable[1], feeds)):
        assert_same(before, after)


def test_a_contrib_op_with_no_type_rule_is_refused_with_the_reason() -> None:
    model = _without_value_info(REPO / "tests/fixtures/ort_training/sl1_functional_mean_b05_f32.onnx")
    for node in model.graph.node:
        if node.op_type == "Scale":
            node.op_type = "ScaleOfUnknownShape"
    _, report = lowering.fuse(model)
    assert not report.fusions, report.summary()
    assert any("com.microsoft ScaleOfUnknownShape" in r.reason for r in report.rejections), report.summary()


def test_a_slice_whose_bounds_inference_does_not_follow_fuses_without_value_info(rng: np.random.Generator) -> None:
    # head[:, :4] - t with each Slice bound from Reshape(Cast(Constant)): ONNX's data propagation
    # stops there; the sliced predict's shape is derived from its producers
    model = _without_value_info(REPO / "tests/fixtures/exporters/sl1_hand_where_sliced_mean_b05_f32_dyn.onnx")
    fused, report = lowering.fuse(model)
    fusion, = report.fusions
    assert fusion.attributes == {"sigma": 0.5, "reduction": "mean", "scale": 1.0}, report.summary()
    feeds = {"go": np.array(1.5, np.float32), "head": rng.standard_normal((16, 6)).astype(np.float32),
             "t": rng.standard_normal((16, 4)).astype(np.float32)}
    feeds["head"][0, :4] = [0.0, SIGMA, -SIGMA, np.nan]
    feeds["t"][0, :4] = 0.0
    for before, after in zip(run_ort(model, feeds), run_ort(fused, feeds)):
        assert_same(before, after)


@pytest.mark.parametrize("fixture", ["jax/sl1_optax_huber_both_grads_sum_d1_f32.onnx",
                                     "paddle/sl1_huber_value_and_grad_sum_d1.onnx"])
def test_lower_builds_and_verifies_the_new_fusions(fixture: str, tmp_path: Path, capsys) -> None:
    # the kernels of JAX's gradient (its label gradient a Neg of it) and of paddle's gradient with
    # its constant dout run on the CPU backend against the unfused graph
    from app.cli import main

    code = main([str(REPO / "tests/fixtures" / fixture), "--target", "ascend950", "-o", str(tmp_path), "--verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL" not in out and "PASS:" in out, out
