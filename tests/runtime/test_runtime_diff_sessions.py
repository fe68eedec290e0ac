"""`lower diff` / `--verify` stay linear in the number of fused nodes: the function-body
references of all fused nodes share one onnxruntime session, and every session loads only the
local functions its nodes call. (Speed itself is measured by benchmarks/diff_scaling.py.)"""

from __future__ import annotations

import json

import onnx
import pytest

import lowering
import runtime.ort_exec as ort_exec
from app.diff_cli import run_verify
from contracts.fused_ops import DOMAIN


@pytest.fixture
def sessions(monkeypatch):
    """Every model onnxruntime is asked to load during the test: (graph name, functions, nodes)."""
    made: list[tuple[str, int, int]] = []
    real = ort_exec._session

    def counting(model: onnx.ModelProto):
        made.append((model.graph.name, len(model.functions), len(model.graph.node)))
        return real(model)

    monkeypatch.setattr(ort_exec, "_session", counting)
    return made


@pytest.mark.parametrize("count", [2, 9])
def test_one_reference_session_whatever_the_node_count(build, diff_args, capsys, sessions, count):
    model = build.prox_chain_model(count)
    fused, report = lowering.fuse(model)
    assert len(report.fusions) == count and len(fused.functions) == count
    assert run_verify(model, fused, "ascend950", diff_args()) == 0, capsys.readouterr().out
    references = [s for s in sessions if s[0] == "fused_node_references"]
    assert references == [("fused_node_references", count, count)]
    # the unfused model has no functions, each Neg segment none: every function is loaded once
    assert sum(functions for _, functions, _ in sessions) == count


def test_batched_references_go_to_their_own_nodes(build, diff_args, tmp_path, capsys):
    """Node 2's function body computes |x| where Relu(x) was: only that node's row FAILs."""
    model = build.prox_chain_model(4)
    fused, _ = lowering.fuse(model)
    fused_nodes = [n for n in fused.graph.node if n.domain == DOMAIN]
    fn = next(f for f in fused.functions if (f.name, f.overload) == (fused_nodes[2].op_type, fused_nodes[2].overload))
    relu = next(n for n in fn.node if n.op_type == "Relu")
    relu.op_type = "Abs"
    out_json = tmp_path / "r.json"
    assert run_verify(model, fused, "ascend950", diff_args("--json", str(out_json))) == 1
    rows = json.loads(out_json.read_text())["rows"]
    failing = [r["name"] for r in rows if r["status"] == "FAIL"]
    assert failing == [fused_nodes[2].name], capsys.readouterr().out


def test_fused_nodes_sharing_a_name_still_get_their_references(build, diff_args, tmp_path, capsys):
    model = build.prox_chain_model(3)
    fused, _ = lowering.fuse(model)
    for node in fused.graph.node:
        if node.domain == DOMAIN:
            node.name = "same"
    out_json = tmp_path / "r.json"
    assert run_verify(model, fused, "ascend950", diff_args("--json", str(out_json))) == 0, capsys.readouterr().err
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["name"] for r in rows if r["kind"] == "node"] == ["same"] * 3
    assert all(r["reference"] == "matched subgraph" for r in rows if r["kind"] == "node")


def test_references_split_into_batches_when_inputs_are_large(build, diff_args, capsys, sessions, monkeypatch):
    import runtime.node_references as node_references

    model = build.prox_chain_model(5)
    fused, _ = lowering.fuse(model)
    # each node reads var and delta (64 elements each) and three scalars: 131 elements
    monkeypatch.setattr(node_references, "BATCH_ELEMENTS", 2 * 131)
    assert run_verify(model, fused, "ascend950", diff_args()) == 0, capsys.readouterr().out
    references = [s for s in sessions if s[0] == "fused_node_references"]
    assert [nodes for _, _, nodes in references] == [2, 2, 1]
    assert [functions for _, functions, _ in references] == [2, 2, 1]


def test_segments_load_only_the_functions_their_nodes_call(build, diff_args, capsys, sessions):
    """A standard segment calling a local function that did not fuse gets that one function,
    not the fused nodes' ones."""
    model = build.prox_chain_model(3)
    fused, _ = lowering.fuse(model)
    helper_fn = onnx.helper.make_function("local.fns", "Twice", ["x"], ["y"],
                                          [onnx.helper.make_node("Add", ["x", "x"], ["y"])],
                                          [onnx.helper.make_opsetid("", 17)])
    for graph_model in (model, fused):
        graph = graph_model.graph
        last = graph.output[0].name
        graph.node.append(onnx.helper.make_node("Twice", [last], ["twice"], domain="local.fns"))
        graph.output[0].name = "twice"
        graph_model.functions.append(helper_fn)
        graph_model.opset_import.append(onnx.helper.make_opsetid("local.fns", 1))
    assert run_verify(model, fused, "ascend950", diff_args()) == 0, capsys.readouterr().out
    segments = [s for s in sessions if s[0] == "segment"]
    assert [functions for _, functions, _ in segments] == [0, 0, 1]


@pytest.mark.parametrize("count", [3, 10])
def test_parallel_fused_nodes_share_the_standard_sessions(build, diff_args, capsys, sessions, count):
    """Independent updates (an optimizer step): the standard nodes before all of them run as one
    model, those after as another, whatever the count."""
    model = build.prox_chain_model(count, parallel=True)
    fused, report = lowering.fuse(model)
    assert len(report.fusions) == count
    assert run_verify(model, fused, "ascend950", diff_args()) == 0, capsys.readouterr().out
    segments = [nodes for name, _, nodes in sessions if name == "segment"]
    # the pass merges the identical Neg(var) of every update into one
    assert len(segments) == 2 and segments[1] == count


def test_rows_follow_graph_order_not_run_order(build, diff_args, tmp_path, capsys):
    """A chain and independent updates mixed: the schedule runs them by level, the report lists
    fused nodes as the graph holds them."""
    model = build.prox_chain_model(4, parallel=True)
    fused, _ = lowering.fuse(model)
    out_json = tmp_path / "r.json"
    assert run_verify(model, fused, "ascend950", diff_args("--json", str(out_json))) == 0
    names = [r["name"] for r in json.loads(out_json.read_text())["rows"] if r["kind"] == "node"]
    assert names == [n.name for n in fused.graph.node if n.domain == DOMAIN]
