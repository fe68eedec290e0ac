"""Fusion inside If/Loop/Scan bodies (lowering.subgraphs): the fixtures of real exporters and
hand-built graphs in tests/fixtures/subgraphs/ fuse where their program holds an instance, the
report names the body, the fused model passes the checker and onnxruntime runs it as the original;
captured values, worked-out carried shapes, names and kernels across bodies."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import pytest

from app.cli import main
from codegen.api import build_kernels
from contracts.fused_ops import DOMAIN, PROXIMAL_GD
from lowering import fuse

from .pass_numerics import assert_same
from .subgraph_fixtures import FOLDER, entries, feeds, load, run_ort

ENTRIES = entries()


def _bodies(model: onnx.ModelProto):
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        yield graph
        stack.extend(a.g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)


def _fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in _bodies(model) for n in g.node if n.domain == DOMAIN]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_a_fixture_fuses_inside_its_bodies_and_runs_as_the_original(entry: dict, seed: int) -> None:
    model = load(entry)
    original = model.SerializeToString()
    fused, report = fuse(model)
    assert model.SerializeToString() == original  # the input is never modified
    assert report.counts() == entry["fuses"], report.summary()
    assert all(f.graph for f in report.fusions), report.summary()  # every instance is inside a body
    if "bodies" in entry:
        assert sorted(f.graph for f in report.fusions) == sorted(entry["bodies"])
    if "refused_because" in entry:
        assert any(entry["refused_because"] in r.reason and r.graph for r in report.rejections), report.summary()
    assert len(_fused_nodes(fused)) == len(report.fusions)
    onnx.checker.check_model(fused, full_check=True)
    inputs = feeds(entry, model, seed)
    for before, after in zip(run_ort(model, inputs), run_ort(fused, inputs)):
        assert_same(before, after)  # each fused node's function body is the matched subgraph


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["fuses"]], ids=lambda e: e["file"])
def test_codegen_builds_a_kernel_for_every_fused_node_in_a_body(entry: dict) -> None:
    fused, report = fuse(load(entry))
    kernels = build_kernels(fused, "ascend910b")
    assert sorted(n for k in kernels for n in k.nodes) == sorted(f.node for f in report.fusions)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if "untyped" in e and e["fuses"]], ids=lambda e: e["file"])
def test_an_undeclared_body_input_takes_the_shape_worked_out(entry: dict) -> None:
    model = load(entry)
    fused, _ = fuse(model)
    found = [vi for graph in list(_bodies(fused))[1:] for vi in graph.input if vi.name in entry["untyped"]]
    assert [vi.name for vi in found] == entry["untyped"]
    for vi in found:
        assert vi.type.tensor_type.HasField("shape")
        assert [d.dim_value for d in vi.type.tensor_type.shape.dim] == [8, 16], vi.name
    # the main graph's signature stays the model's own
    assert [vi.SerializeToString() for vi in fused.graph.input] == [vi.SerializeToString()
                                                                    for vi in model.graph.input]


def test_a_carried_value_whose_shape_changes_is_refused_with_the_reason_and_the_body() -> None:
    entry = next(e for e in ENTRIES if e["file"] == "hand_loop_growing_carried.onnx")
    _, report = fuse(load(entry))
    rejection, = report.rejections
    assert rejection.graph == "Loop(w)/body"
    assert "win: its shape is not loop-invariant: it enters as float32[1,16] and leaves as float32[2,16]" \
        in rejection.reason
    assert "skipped  Div -> upd in Loop(w)/body" in report.summary()


HEADER = '<ir_version: 9, opset_import: ["" : 18]>'
PROX = """
      p{k} = Sub({w}, st{k})
      t{k} = Mul(lr, l1)
      a{k} = Abs(p{k})
      d{k} = Sub(a{k}, t{k})
      z{k} = Max(d{k}, zero)
      s{k} = Sign(p{k})
      n{k} = Mul(s{k}, z{k})
      q{k} = Mul(lr, l2)
      den{k} = Add(one, q{k})
      {out} = Div(n{k}, den{k})"""
# one update in the main graph, one in a loop body; the body's delta is an outer intermediate
# (g2) the model gives no type, and its zero and one are outer constants
TWO_PLACES = f"""{HEADER}
main (float[8,16] w0, float[8,16] g, float lr, float l1, float l2) => (float[8,16] w) {{
  zero = Constant<value = float {{0}}>()
  one = Constant<value = float {{1}}>()
  two = Constant<value = float {{2}}>()
  m = Constant<value = int64 {{4}}>()
  c = Constant<value = bool {{1}}>()
  st0 = Mul(lr, g){PROX.format(k=0, w="w0", out="w1")}
  g2 = Mul(g, two)
  w = Loop(m, c, w1) <body = steps (int64 i, bool cin, float[8,16] win) => (bool cout, float[8,16] wout) {{
      cout = Identity(cin)
      st1 = Mul(lr, g2){PROX.format(k=1, w="win", out="wout")}
  }}>
}}"""


def _step_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"w0": rng.standard_normal((8, 16)).astype(np.float32), "g": rng.standard_normal((8, 16)).astype(np.float32),
            "lr": np.array(rng.uniform(0.05, 0.2), np.float32), "l1": np.array(0.02, np.float32),
            "l2": np.array(0.05, np.float32)}


def test_fusions_in_the_main_graph_and_a_body_have_names_unique_in_the_model(rng: np.random.Generator) -> None:
    model = onnx.parser.parse_model(TWO_PLACES)
    fused, report = fuse(model)
    assert [(f.node, f.graph) for f in report.fusions] == [("ApplyProximalGradientDescent_0", ""),
                                                           ("ApplyProximalGradientDescent_1", "Loop(w)/body")]
    nodes = _fused_nodes(fused)
    assert len({n.overload for n in nodes}) == 2  # overloads are unique across the model's graphs
    assert {(f.name, f.overload) for f in fused.functions} == {(n.op_type, n.overload) for n in nodes}
    body_node = next(n for n in nodes if n.name.endswith("_1"))
    assert list(body_node.input) == ["win", "lr", "l1", "l2", "g2"]  # the captured delta, by its outer name
    onnx.checker.check_model(fused, full_check=True)
    inputs = _step_feeds(rng)
    assert_same(run_ort(model, inputs)[0], run_ort(fused, inputs)[0])
    # g2's type is declared nowhere in the model: the body says it, so the kernel can be built
    kernels = build_kernels(fused, "ascend950")
    assert sorted(n for k in kernels for n in k.nodes) == sorted(n.name for n in nodes)


def test_a_fused_model_fused_again_changes_nothing() -> None:
    model = onnx.parser.parse_model(TWO_PLACES)
    once, _ = fuse(model)
    twice, report = fuse(once)
    assert not report.fusions
    assert twice.SerializeToString() == once.SerializeToString()


def test_a_match_never_takes_nodes_on_both_sides_of_a_body_boundary() -> None:
    entry = next(e for e in ENTRIES if e["file"] == "torch_script_if_smooth_l1_outer_sub.onnx")
    fused, report = fuse(load(entry))
    assert not report.fusions and not _fused_nodes(fused)
    assert [(r.graph, r.reason) for r in report.rejections] == [("/If/then_branch", "x is not predict - label")]


def test_lower_writes_where_each_fusion_is(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main([str(FOLDER / "hand_if_in_loop.onnx"), "--target", "ascend950", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fused    ApplyProximalGradientDescent_0 in Loop(w)/body/If(wout)/then_branch:" in printed
    data = json.loads((out / "report.json").read_text())
    assert [f["graph"] for f in data["fusions"]] == ["Loop(w)/body/If(wout)/then_branch"]
    # CANN's operator, or the project's own for what CANN's prototype cannot express
    assert {p.name for p in (out / "kernels").iterdir()} & {"apply_proximal_gradient_descent",
                                                             "ascend_lowering_apply_proximal_gradient_descent"}


IN_A_FUNCTION = f"""<ir_version: 10, opset_import: ["" : 18, "local" : 1]>
main (float[8,16] w0, float[8,16] g, float lr, float l1, float l2) => (float[8,16] w) {{
  w = local.Solve(w0, g, lr, l1, l2)
}}
<domain: "local", opset_import: ["" : 18]>
Solve (w0, g, lr, l1, l2) => (w) {{
  m = Constant<value = int64 {{5}}>()
  c = Constant<value = bool {{1}}>()
  zero = Constant<value = float {{0}}>()
  one = Constant<value = float {{1}}>()
  w = Loop(m, c, w0) <body = step (int64 i, bool cin, float[8,16] win) => (bool cout, float[8,16] wout) {{
      cout = Identity(cin)
      st1 = Mul(lr, g){PROX.format(k=1, w="win", out="wout")}
  }}>
}}"""


def test_a_loop_inside_a_model_local_function_is_inlined_and_fused(rng: np.random.Generator) -> None:
    model = onnx.parser.parse_model(IN_A_FUNCTION)
    fused, report = fuse(model)
    assert report.inlined_functions == ["local.Solve"]
    assert [(f.op_type, f.graph) for f in report.fusions] == [(PROXIMAL_GD, "Loop(w)/body")]
    assert not [f for f in fused.functions if f.domain == "local"]
    onnx.checker.check_model(fused, full_check=True)
    inputs = _step_feeds(rng)
    assert_same(run_ort(model, inputs)[0], run_ort(fused, inputs)[0])
