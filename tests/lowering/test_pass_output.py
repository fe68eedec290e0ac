"""What the pass writes besides the fusions: no dead nodes left behind, types for every value a
fused node touches even when the exporter wrote none, the input's value_info kept, and the
structural check that replaces a second run of the ONNX checker."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import lowering
from contracts.errors import LoweringError
from contracts.fused_ops import DOMAIN
from lowering import verify
from lowering.graph import GraphInfo, Node, decode_nodes, value_type_of

from .fixture_manifests import manifest_entries
from .pass_forms import G, sl1, splice

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = manifest_entries()
FUSING = [e for e in MANIFEST if any(e["expected"].values())]


def _load(entry: dict) -> onnx.ModelProto:
    return onnx.load(str(ROOT / entry["file"]))


@pytest.mark.parametrize("entry", FUSING, ids=[Path(e["file"]).stem for e in FUSING])
def test_no_dead_nodes_and_value_info_kept(entry: dict) -> None:
    model = _load(entry)
    fused, _ = lowering.fuse(model)
    graph = fused.graph
    used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
    dead = [n.name or n.op_type for n in graph.node if not any(o in used for o in n.output)]
    assert not dead, f"nodes nothing reads were left behind: {dead}"
    produced = {o for n in graph.node for o in n.output}
    assert all(vi.name in produced for vi in graph.value_info)
    kept = {vi.name for vi in model.graph.value_info} & produced
    assert kept <= {vi.name for vi in graph.value_info}, "value_info of surviving values was dropped"
    inits = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    assert all(t.name in used or t.name in inits for t in graph.initializer)


@pytest.mark.parametrize("entry", FUSING[::4], ids=[Path(e["file"]).stem for e in FUSING[::4]])
def test_untyped_exporter_model_still_fuses_and_types_fused_values(entry: dict) -> None:
    model = _load(entry)
    del model.graph.value_info[:]
    fused, report = lowering.fuse(model)
    # shape inference runs on demand and finds what the fusions need; only a shape the exporter
    # alone knew (a dynamic one, a slice with computed bounds) may keep a fusion back, with a reason
    if not report.fusions:
        assert report.rejections and all("unknown" in r.reason for r in report.rejections), report.rejections
        return
    typed = {vi.name for vi in list(fused.graph.value_info) + list(fused.graph.input) + list(fused.graph.output)}
    typed |= {t.name for t in fused.graph.initializer}
    constants = {o for n in fused.graph.node if n.op_type == "Constant" for o in n.output}
    for node in fused.graph.node:
        if node.domain == DOMAIN:
            missing = [v for v in list(node.input) + list(node.output) if v not in typed | constants]
            assert not missing, f"{node.name}: no type written for {missing}"


def test_types_are_inferred_only_when_asked_for_an_untyped_value() -> None:
    model = _load(FUSING[0])
    info = GraphInfo(model)
    typed = next(vi.name for vi in model.graph.value_info
                 if (vt := value_type_of(vi)) is not None and vt.shape is not None and None not in vt.shape)
    assert info.types.get(typed) is not None and not info.types.inferred
    del model.graph.value_info[:]
    info = GraphInfo(model)
    assert info.types.get(typed) is not None and info.types.inferred


def _nodes(*specs: tuple[str, list[str], list[str]]) -> list[Node]:
    graph = onnx.helper.make_graph([onnx.helper.make_node(op, i, o) for op, i, o in specs], "g", [], [])
    return decode_nodes(graph)


def _check(nodes: list[Node], available: set[str], outputs: list[str]) -> None:
    producer = {name: i for i, n in enumerate(nodes) for name in n.output}
    verify.check_graph(nodes, list(range(len(nodes))), producer, {}, set(), {}, available.__contains__, outputs)


def test_structural_check_accepts_a_valid_order() -> None:
    _check(_nodes(("Abs", ["x"], ["a"]), ("Add", ["a", "w"], ["y"])), {"x", "w"}, ["y"])


@pytest.mark.parametrize("specs, outputs, message", [
    ([("Add", ["a", "x"], ["y"]), ("Abs", ["x"], ["a"])], ["y"], "reads a, which is computed only later"),
    ([("Abs", ["x"], ["a"]), ("Neg", ["b"], ["c"])], ["c"], "reads b, which is not computed any more"),
    ([("Abs", ["x"], ["a"])], ["y"], "graph output y is no longer computed"),
])
def test_structural_check_names_what_is_broken(specs, outputs, message) -> None:
    with pytest.raises(LoweringError, match=message):
        _check(_nodes(*specs), {"x"}, outputs)


def test_replacements_may_not_define_a_name_twice() -> None:
    nodes = _nodes(("Abs", ["x"], ["a"]), ("Neg", ["a"], ["b"]))
    verify.check_replacements({1: nodes[1]}, {"a": 0, "b": 1}, set())
    with pytest.raises(LoweringError, match="defines a twice"):
        verify.check_replacements({1: nodes[0]}, {"a": 0, "b": 1}, set())


def test_function_check_refuses_an_open_body() -> None:
    body = onnx.helper.make_function(DOMAIN, "F", ["p"], ["out"], [onnx.helper.make_node("Mul", ["p", "k"], ["out"])],
                                     [onnx.helper.make_opsetid("", 18)])
    with pytest.raises(LoweringError, match="reads k before it is defined"):
        verify.check_function(body)


def test_fusing_a_fused_model_again_keeps_overloads_unique() -> None:
    first, _ = lowering.fuse(sl1(beta=0.5))
    g = G()
    outputs = [splice(g, first, {}, "a_"), splice(g, sl1(beta=0.75), {}, "b_")]
    for rename, source in zip(outputs, (first, first)):
        for vi in source.graph.output:
            g.output(rename[vi.name])
    model = g.model()
    model.functions.extend(first.functions)
    model.opset_import.extend([o for o in first.opset_import if o.domain == DOMAIN])
    model.ir_version = first.ir_version
    fused, report = lowering.fuse(model)
    assert len(report.fusions) == 1
    keys = [(f.domain, f.name, f.overload) for f in fused.functions]
    assert len(keys) == len(set(keys)) == 2
    onnx.checker.check_model(fused, full_check=True)
