"""`--verify` / `lower diff` of graphs onnxruntime cannot run whole: the partial check.

The fixtures are real onnxruntime-training graphs (tests/fixtures/ort_training, made by
models/make_ort_training_models.py with onnxruntime-training 1.19.2): they hold com.microsoft Scale
and InPlaceAccumulatorV2, which the onnxruntime package here does not register. Where a test needs
an op that neither onnxruntime nor lower runs, it respells one node of such a graph as another
real training op of the same meaning (InPlaceAccumulator, MixedPrecisionScale).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import lowering
from app.diff_cli import run_diff, run_verify
from runtime.backends import get_backend
from runtime.coverage import OrtOps, plan
from runtime.graph_exec import GraphExecError, run_fused_model, run_graph

REPO = Path(__file__).resolve().parents[2]
TRAINING = REPO / "tests" / "fixtures" / "ort_training"
FUSING = sorted(p.name for p in TRAINING.glob("sl1_*.onnx"))
ONE = "sl1_functional_mean_b05_f32.onnx"  # one Scale, one accumulator, one fused node
LINEAR = "sl1_linear_mean_b2_f32.onnx"  # a linear layer: two accumulators downstream of the fused node


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(TRAINING / name))


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_plan_names_what_onnxruntime_cannot_run_and_what_lower_runs():
    model = _load(ONE)
    cov = plan(model)
    assert not cov.complete
    assert dict(cov.not_in_ort) == {"com.microsoft Scale": 1, "com.microsoft InPlaceAccumulatorV2": 1}
    assert cov.lower_ran == cov.not_in_ort and not cov.dead and not cov.skipped
    labels = [f"{n.domain} {n.op_type}" for k, n in enumerate(model.graph.node) if k in cov.by_lower]
    assert labels == ["com.microsoft Scale", "com.microsoft InPlaceAccumulatorV2"]
    # the loss is forward only; the accumulator's flag rests on both ops
    assert "loss" not in cov.via
    assert cov.via["pred_grad.accumulation.out"] == {"com.microsoft Scale", "com.microsoft InPlaceAccumulatorV2"}


def test_plan_of_a_graph_onnxruntime_runs_is_empty(build):
    assert plan(build.prox_model()).complete


def test_a_value_downstream_of_an_op_nothing_runs_cannot_be_computed():
    nodes = [h.make_node("Mystery", ["x"], ["y"], domain="com.example", name="m"),
             h.make_node("Abs", ["y"], ["z"]), h.make_node("Neg", ["x"], ["w"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                         [h.make_tensor_value_info("z", T.FLOAT, [3]), h.make_tensor_value_info("w", T.FLOAT, [3])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    cov = plan(model)
    assert cov.skipped == {0, 1} and set(cov.dead) == {"y", "z"}
    assert cov.dead["z"] == "needs com.example Mystery, which neither onnxruntime nor lower runs"
    run = run_graph(model, {"x": np.array([-1, 0, 2], np.float32)}, get_backend("cpu"), "ascend950")
    assert np.array_equal(run.outputs["w"], [1, 0, -2]) and set(run.missing) == {"z"}
    with pytest.raises(GraphExecError, match="graph output 'z' cannot be computed: it needs com.example Mystery"):
        run_fused_model(model, {"x": np.zeros(3, np.float32)}, get_backend("cpu"), "ascend950")


def test_a_local_function_runs_in_onnxruntime_only_when_its_body_does():
    def model_calling(body_op: onnx.NodeProto) -> onnx.ModelProto:
        fn = h.make_function("local", "f", ["a"], ["b"], [body_op], [h.make_opsetid("", 17),
                                                                     h.make_opsetid("com.microsoft", 1)])
        graph = h.make_graph([h.make_node("f", ["x"], ["y"], domain="local")], "g",
                             [h.make_tensor_value_info("x", T.FLOAT, [3])],
                             [h.make_tensor_value_info("y", T.FLOAT, [3])])
        return h.make_model(graph, functions=[fn], opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)])

    plain = model_calling(h.make_node("Neg", ["a"], ["b"]))
    training = model_calling(h.make_node("InPlaceAccumulator", ["a", "a"], ["b"], domain="com.microsoft"))
    assert OrtOps(plain).runs(plain.graph.node[0])
    assert not OrtOps(training).runs(training.graph.node[0])
    assert "local f" in plan(training).dead["y"]


@pytest.mark.parametrize("name", FUSING)
def test_every_training_graph_verifies_its_fused_nodes_with_the_partial_check_stated(diff_args, tmp_path, capsys,
                                                                                     name):
    model = _load(name)
    fused, report = lowering.fuse(model)
    assert report.fusions, name
    out = tmp_path / "r.json"
    rc = run_verify(model, fused, "ascend950", diff_args("--seed", "2", "--json", str(out)))
    text = capsys.readouterr().out
    assert rc == 0, text
    data = _json(out)
    nodes = [r for r in data["rows"] if r["kind"] == "node"]
    assert nodes and all(r["status"] == "PASS" and r["reference"] == "matched subgraph" for r in nodes)
    updates = [r for r in data["rows"] if r["kind"] == "update"]
    assert updates and all(r["status"] == "PASS" and r["partial"] for r in updates)
    partial = data["partial"]
    assert "com.microsoft InPlaceAccumulatorV2" in partial["not_run_by_onnxruntime"]
    assert partial["run_by_lower"] == partial["not_run_by_onnxruntime"] and partial["skipped"] == []
    assert f"partial check: {partial['reason']}" in text.splitlines()


def test_a_broken_fused_node_of_a_training_graph_fails_at_the_node_and_the_gradient_buffers(diff_args, capsys):
    model = _load(LINEAR)
    fused, _ = lowering.fuse(model)
    node = next(n for n in fused.graph.node if n.op_type == "SmoothL1LossGradV2")
    next(a for a in node.attribute if a.name == "sigma").f = 0.5  # the graph's beta is 2
    assert run_verify(model, fused, "ascend950", diff_args()) == 1
    text = capsys.readouterr().out
    assert f"  fused node {node.name} (SmoothL1LossGradV2): MERE over threshold" in text
    assert "  updated input linear.weight_grad.accumulation.buffer: MERE over threshold" in text
    assert "  updated input linear.bias_grad.accumulation.buffer: MERE over threshold" in text
    assert text.splitlines()[-1].startswith("partial check: onnxruntime cannot run")


def _respelled(name: str, op: str) -> onnx.ModelProto:
    """The fixture with its Scale as MixedPrecisionScale(scale, x), or its InPlaceAccumulatorV2 as
    the older InPlaceAccumulator (both real training ops with the same meaning here, which lower
    does not implement)."""
    model = _load(name)
    for node in model.graph.node:
        if op == "MixedPrecisionScale" and node.op_type == "Scale":
            node.op_type = op
            node.input[:] = [node.input[1], node.input[0]]
            del node.attribute[:]
            node.attribute.append(h.make_attribute("to", T.FLOAT))
        if op == "InPlaceAccumulator" and node.op_type == "InPlaceAccumulatorV2":
            node.op_type = op
    return model


def test_a_fused_node_whose_inputs_nothing_here_computes_is_skipped_and_the_rest_checked(diff_args, tmp_path,
                                                                                        capsys):
    model = _respelled(ONE, "MixedPrecisionScale")
    fused, _ = lowering.fuse(model)
    node = next(n for n in fused.graph.node if n.op_type == "SmoothL1LossGradV2")
    out = tmp_path / "r.json"
    rc = run_verify(model, fused, "ascend950", diff_args("--json", str(out)))
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = {(r["kind"], r["name"]): r for r in _json(out)["rows"]}
    assert rows[("output", "loss")]["status"] == "PASS" and not rows[("output", "loss")]["partial"]
    skipped = rows[("node", node.name)]
    assert skipped["status"] == "SKIP" and "com.microsoft MixedPrecisionScale" in skipped["skipped"]
    assert rows[("output", "pred_grad.accumulation.out")]["status"] == "SKIP"
    assert "PASS: 1 of 1 comparisons that ran (2 skipped)" in text
    line = text.splitlines()[-1]
    assert line.startswith("partial check: onnxruntime cannot run the unfused graph's com.microsoft "
                           "MixedPrecisionScale (1 node), com.microsoft InPlaceAccumulatorV2 (1 node)")
    assert (f"not checked: output pred_grad.accumulation.out, fused node {node.name} (SmoothL1LossGradV2): "
            "needs com.microsoft MixedPrecisionScale") in line
    data = _json(out)["partial"]
    assert {s["check"] for s in data["skipped"]} == {"output pred_grad.accumulation.out",
                                                     f"fused node {node.name} (SmoothL1LossGradV2)"}


def test_outputs_past_an_op_nothing_runs_are_skipped_while_the_fused_node_is_checked(diff_args, tmp_path, capsys):
    model = _respelled(LINEAR, "InPlaceAccumulator")
    fused, _ = lowering.fuse(model)
    out = tmp_path / "r.json"
    assert run_verify(model, fused, "ascend950", diff_args("--json", str(out))) == 0
    statuses = [(r["kind"], r["status"]) for r in _json(out)["rows"]]
    assert statuses == [("output", "PASS"), ("output", "SKIP"), ("output", "SKIP"), ("node", "PASS")]
    assert "lower ran com.microsoft Scale as onnxruntime-training's CPU kernels do" in capsys.readouterr().out


def test_quiet_prints_only_the_partial_line_on_success(diff_args, capsys):
    model = _load(ONE)
    fused, _ = lowering.fuse(model)
    args = diff_args()
    args.quiet = True
    assert run_verify(model, fused, "ascend950", args) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("partial check: ") and captured.out.count("\n") == 1 and not captured.err


def test_nothing_to_check_is_exit_2(diff_args, tmp_path, capsys):
    nodes = [h.make_node("Mystery", ["x"], ["y"], domain="com.example")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [3])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert run_diff(str(path), str(path), diff_args()) == 2
    captured = capsys.readouterr()
    assert "SKIP" in captured.out
    assert captured.err == "lower diff: error: nothing could be checked (see the partial check above)\n"


def test_a_training_op_lower_cannot_run_as_onnxruntime_would_is_exit_2(diff_args, capsys):
    model = _load(ONE)
    scale = next(n for n in model.graph.node if n.op_type == "Scale")
    zero = h.make_node("Constant", [], ["zero_scale"], value=h.make_tensor("z", T.INT64, [], [0]))
    model.graph.node.insert(0, zero)
    scale.input[1] = "zero_scale"
    fused, _ = lowering.fuse(model)
    assert run_verify(model, fused, "ascend950", diff_args()) == 2
    assert "com.microsoft Scale node 'node_ReduceMean_3_Grad/Scale_3': scale is 0" in capsys.readouterr().err


def test_a_fused_node_whose_matched_subgraph_onnxruntime_cannot_run_is_held_to_the_formula(diff_args, tmp_path,
                                                                                          capsys):
    model = _load(ONE)
    fused, _ = lowering.fuse(model)
    body = fused.functions[0]
    assert list(body.input) == ["predict", "label", "dout"]
    for n in body.node:  # dout goes through Scale(dout, 1) first: the same values
        n.input[:] = ["dout_scaled" if i == "dout" else i for i in n.input]
    body.node.insert(0, h.make_node("Scale", ["dout", "one"], ["dout_scaled"], domain="com.microsoft"))
    body.node.insert(0, h.make_node("Constant", [], ["one"], value=h.make_tensor("o", T.FLOAT, [], [1.0])))
    if not any(o.domain == "com.microsoft" for o in body.opset_import):
        body.opset_import.append(h.make_opsetid("com.microsoft", 1))
    out = tmp_path / "r.json"
    assert run_verify(model, fused, "ascend950", diff_args("--json", str(out))) == 0
    data = _json(out)
    row = next(r for r in data["rows"] if r["kind"] == "node")
    assert row["status"] == "PASS" and row["reference"] == "float64 formula" and "float64 formula" in row["partial"]
    assert data["partial"]["held_to_formula"] == [f"fused node {row['name']} (SmoothL1LossGradV2)"]
    assert "held to the float64 formula: the matched subgraph holds such ops" in capsys.readouterr().out


def test_a_full_check_says_nothing_partial(build, diff_args, tmp_path, capsys):
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    out = tmp_path / "r.json"
    assert run_verify(model, fused, "ascend950", diff_args("--json", str(out))) == 0
    data = _json(out)
    assert data["partial"] is None and all(r["partial"] is None and r["skipped"] is None for r in data["rows"])
    assert "partial" not in capsys.readouterr().out


def test_a_reference_run_leaves_fused_nodes_to_their_function_bodies():
    # `lower diff A B` with a fused model as A: its reference must not be the kernel under test
    model = _load(LINEAR)
    fused, _ = lowering.fuse(model)
    feeds = {"x": np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3),
             "target": np.linspace(1, -1, 20, dtype=np.float32).reshape(4, 5),
             "linear.weight": np.full((5, 3), 0.25, np.float32), "linear.bias": np.zeros(5, np.float32),
             "linear.weight_grad.accumulation.buffer": np.ones((5, 3), np.float32),
             "linear.bias_grad.accumulation.buffer": np.ones(5, np.float32), "lazy_reset_grad": np.array([False])}
    cpu = get_backend("cpu")
    reference = run_graph(model, feeds, cpu, "ascend950", kernels=False)
    bodies = run_graph(fused, feeds, cpu, "ascend950", kernels=False)
    kernels = run_graph(fused, feeds, cpu, "ascend950")
    assert bodies.runs == [] and len(kernels.runs) == 1
    for name, update in reference.updates.items():
        assert np.array_equal(bodies.updates[name].value, update.value)
        np.testing.assert_allclose(kernels.updates[name].value, update.value, rtol=1e-6)
