"""Patterns inside model-local functions (TorchScript's export_modules_as_functions, onnxscript
models): the pass inlines the calls that could hold one, and only the functions whose nodes a
fusion took stay inlined."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from app.cli import main
from contracts.fused_ops import DOMAIN, PROXIMAL_GD, SMOOTH_L1_GRAD
from lowering import fuse
from lowering.functions import candidates

from .pass_numerics import assert_runs_as_fused, assert_same, run_ort

# made by models/make_models.py: TorchScript with export_modules_as_functions=True, so the step
# itself, its Linear + ReLU backbone, the SmoothL1 gradient and the prox update are all functions
ALL_MODULES = Path(__file__).resolve().parents[1] / "fixtures" / "functions" / "all_modules_as_functions_ts.onnx"
HEADER = '<ir_version: 10, opset_import: ["" : 18, "local" : 1]>'
SL1_BODY = """
    x = Sub(p, t)
    ax = Abs(x)
    beta = Constant<value = float {0.5}>()
    near = Less(ax, beta)
    gx = Mul(go, x)
    a = Div(gx, beta)
    s = Sign(x)
    b = Mul(go, s)
    g = Where(near, a, b)
"""


def _model(main_body: str, *functions: str, outputs: str = "float[4,8] grad") -> onnx.ModelProto:
    text = (f"{HEADER}\nmain (float[4,8] p, float[4,8] t, float go) => ({outputs}) {{\n{main_body}\n}}\n"
            + "\n".join(functions))
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


def _function(name: str, inputs: str, outputs: str, body: str) -> str:
    return f'<domain: "local", opset_import: ["" : 18, "local" : 1]>\n{name} ({inputs}) => ({outputs}) {{{body}}}'


SL1_FN = _function("SL1", "p, t, go", "g", SL1_BODY)


def _feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    p = rng.standard_normal((4, 8)).astype(np.float32)
    t = rng.standard_normal((4, 8)).astype(np.float32)
    t[0, :4] = p[0, :4] - np.float32(0.5)  # |x| == beta exactly
    t[1, 0] = p[1, 0]  # x == 0
    p[2, 0], p[2, 1] = np.inf, np.nan
    return {"p": p, "t": t, "go": np.array(rng.uniform(0.5, 2.0), np.float32)}


@pytest.mark.parametrize("draw", [1, 2])  # two draws of the rng, each seeded by its node id
def test_a_pattern_inside_a_called_function_fuses(draw: int, rng: np.random.Generator) -> None:
    model = _model("grad = local.SL1(p, t, go)", SL1_FN)
    fused, report = fuse(model)
    assert [f.op_type for f in report.fusions] == [SMOOTH_L1_GRAD]
    assert report.inlined_functions == ["local.SL1"]
    assert [n.op_type for n in fused.graph.node] == [SMOOTH_L1_GRAD]
    assert {f.name for f in fused.functions if f.domain != DOMAIN} == set()  # the inlined function is gone
    onnx.checker.check_model(fused, full_check=True)
    assert_runs_as_fused(model, fused, _feeds(rng))


def test_a_pattern_two_calls_deep_fuses(rng: np.random.Generator) -> None:
    outer = _function("Outer", "p, t, go", "y", "\n    y = local.SL1(p, t, go)\n")
    model = _model("grad = local.Outer(p, t, go)", outer, SL1_FN)
    assert candidates(model) == [("local", "Outer"), ("local", "SL1")]
    fused, report = fuse(model)
    assert len(report.fusions) == 1 and set(report.inlined_functions) == {"local.Outer", "local.SL1"}
    assert_runs_as_fused(model, fused, _feeds(rng))


def test_functions_without_a_pattern_are_kept_as_they_are() -> None:
    relu_abs = _function("Mag", "v", "y", "\n    a = Abs(v)\n    y = Relu(a)\n")
    plain = _function("Twice", "v", "y", "\n    y = Add(v, v)\n")
    model = _model("d = Sub(p, t)\n    m = local.Mag(d)\n    grad = local.Twice(m)", relu_abs, plain)
    assert candidates(model) == [("local", "Mag")]  # Twice has no op any pattern needs: never inlined
    fused, report = fuse(model)
    assert not report.fusions and not report.inlined_functions
    assert [n.op_type for n in fused.graph.node] == ["Sub", "Mag", "Twice"]
    assert [f.name for f in fused.functions] == ["Mag", "Twice"]


def test_only_the_functions_a_fusion_took_stay_inlined(rng: np.random.Generator) -> None:
    mag = _function("Mag", "v", "y", "\n    a = Abs(v)\n    y = Relu(a)\n")
    model = _model("g = local.SL1(p, t, go)\n    grad = local.Mag(g)", SL1_FN, mag)
    assert set(candidates(model)) == {("local", "SL1"), ("local", "Mag")}
    fused, report = fuse(model)
    assert len(report.fusions) == 1 and report.inlined_functions == ["local.SL1"]
    assert [n.op_type for n in fused.graph.node] == [SMOOTH_L1_GRAD, "Mag"]
    assert [f.name for f in fused.functions if f.domain != DOMAIN] == ["Mag"]
    # the working copy's origin marks never reach the output
    assert not any(m.key.startswith("lowering.") for n in fused.graph.node for m in n.metadata_props)
    feeds = _feeds(rng)
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


def test_a_function_that_only_calls_one_that_fused_is_inlined_with_it() -> None:
    outer = _function("Outer", "p, t, go", "y", "\n    y = local.SL1(p, t, go)\n")
    mag = _function("Mag", "v", "y", "\n    a = Abs(v)\n    y = Relu(a)\n")
    model = _model("g = local.Outer(p, t, go)\n    grad = local.Mag(g)", outer, SL1_FN, mag)
    fused, report = fuse(model)
    assert sorted(report.inlined_functions) == ["local.Outer", "local.SL1"]
    assert [n.op_type for n in fused.graph.node] == [SMOOTH_L1_GRAD, "Mag"]


def test_a_near_miss_inside_a_function_is_reported_and_the_function_kept() -> None:
    # the function also returns |x|, which the main graph reads: the select's intermediates escape
    leaky = _function("SL1Leaky", "p, t, go", "g, ax", SL1_BODY)
    model = _model("grad, mag = local.SL1Leaky(p, t, go)", leaky, outputs="float[4,8] grad, float[4,8] mag")
    fused, report = fuse(model)
    assert not report.fusions and not report.inlined_functions
    assert [n.op_type for n in fused.graph.node] == ["SL1Leaky"]
    reasons = [r.reason for r in report.rejections]
    assert reasons and all(r.startswith("inside local function local.SL1Leaky: ") for r in reasons), reasons
    assert any("graph output" in r or "outside the match" in r for r in reasons), reasons


def test_a_model_fused_before_is_not_unfused_again(rng: np.random.Generator) -> None:
    fused, _ = fuse(_model("grad = local.SL1(p, t, go)", SL1_FN))
    assert candidates(fused) == []  # the fused ops' own functions hold the matched subgraphs
    again, report = fuse(fused)
    assert not report.fusions and not report.inlined_functions
    assert [n.op_type for n in again.graph.node] == [SMOOTH_L1_GRAD]
    feeds = _feeds(rng)
    assert_same(run_ort(fused, feeds)[0], run_ort(again, feeds)[0])


def test_the_cli_reports_the_inlined_functions(tmp_path, capsys) -> None:
    src = tmp_path / "modular.onnx"
    onnx.save(_model("grad = local.SL1(p, t, go)", SL1_FN), src)
    assert main([str(src), "--target", "ascend950", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 nodes -> 1 nodes; 1 fused")
    assert "inlined  the calls of local functions local.SL1 to fuse inside them (1 -> 9 nodes before fusing)" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["inlined_functions"] == ["local.SL1"]


def test_the_onnx_ir_pass_looks_into_local_functions() -> None:
    import onnx_ir

    from lowering.ir_pass import FuseAscendPass

    result = FuseAscendPass()(onnx_ir.serde.deserialize_model(_model("grad = local.SL1(p, t, go)", SL1_FN)))
    assert result.modified
    assert [n.op_type for n in result.model.graph] == [SMOOTH_L1_GRAD]
    assert all(domain == DOMAIN for domain, _, _ in result.model.functions)


@pytest.mark.parametrize("draw", [1, 2])  # two draws of the rng, each seeded by its node id
def test_an_export_with_every_module_a_function_fuses_and_keeps_the_backbone(draw: int, rng: np.random.Generator
                                                                             ) -> None:
    model = onnx.load(str(ALL_MODULES))
    assert [n.op_type for n in model.graph.node] == ["ModularNet"]
    fused, report = fuse(model)
    assert sorted(f.op_type for f in report.fusions) == [PROXIMAL_GD, SMOOTH_L1_GRAD]
    assert sorted(name.rsplit(".", 1)[-1] for name in report.inlined_functions) == [
        "ModularNet", "ProxModule", "SL1GradModule"]
    assert sorted(f.name for f in fused.functions if f.domain != DOMAIN) == ["Linear", "ReLU", "Sequential"]
    onnx.checker.check_model(fused, full_check=True)
    feeds = {"x": rng.standard_normal((16, 8)).astype(np.float32),
             "target": rng.standard_normal((16, 4)).astype(np.float32),
             "W": (0.5 * rng.standard_normal((8, 4))).astype(np.float32),
             "lr": np.array(rng.uniform(0.05, 0.2), np.float32), "l1": np.array(rng.uniform(0.005, 0.05), np.float32),
             "l2": np.array(rng.uniform(0.01, 0.1), np.float32)}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


def test_a_failure_on_the_inlined_graph_falls_back_to_the_model_as_it_is() -> None:
    from contracts.errors import LoweringError
    from lowering.functions import fuse_through_functions
    from lowering.patterns import DEFAULT_PATTERNS
    from lowering.rewrite import _fuse_proto

    model = _model("grad = local.SL1(p, t, go)", SL1_FN)
    seen = []

    def run(m: onnx.ModelProto):
        seen.append(len(m.graph.node))
        if len(m.graph.node) > 1:  # the inlined graph
            raise LoweringError("internal error: planted")
        return _fuse_proto(m, DEFAULT_PATTERNS, True)

    fused, report = fuse_through_functions(model, run)
    assert seen == [9, 1] and not report.fusions
    assert [n.op_type for n in fused.graph.node] == ["SL1"]


def test_when_every_candidate_fused_the_result_is_that_of_a_plain_inlining() -> None:
    import onnx.inliner

    from lowering.patterns import DEFAULT_PATTERNS
    from lowering.rewrite import _fuse_proto

    outer = _function("Outer", "p, t, go", "y", "\n    y = local.SL1(p, t, go)\n")
    model = _model("grad = local.Outer(p, t, go)", outer, SL1_FN)
    fused, report = fuse(model)
    plain = onnx.inliner.inline_selected_functions(model, candidates(model), exclude=False)
    expected, _ = _fuse_proto(plain, DEFAULT_PATTERNS, True)
    assert fused.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert sorted(report.inlined_functions) == ["local.Outer", "local.SL1"]
