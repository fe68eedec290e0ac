"""Patterns inside model-local functions (TorchScript's export_modules_as_functions, onnxscript
models): the pass inlines the calls that could hold one, and keeps the inlining only where
something inside a function fused."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import pytest

from lowering import fuse
from lowering.cli import main
from lowering.fused_ops import DOMAIN, SMOOTH_L1_GRAD
from lowering.functions import candidates

from .pass_numerics import assert_runs_as_fused, assert_same, run_ort

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


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((4, 8)).astype(np.float32)
    t = rng.standard_normal((4, 8)).astype(np.float32)
    t[0, :4] = p[0, :4] - np.float32(0.5)  # |x| == beta exactly
    t[1, 0] = p[1, 0]  # x == 0
    p[2, 0], p[2, 1] = np.inf, np.nan
    return {"p": p, "t": t, "go": np.array(rng.uniform(0.5, 2.0), np.float32)}


@pytest.mark.parametrize("seed", np.random.SeedSequence().generate_state(2).tolist())
def test_a_pattern_inside_a_called_function_fuses(seed: int) -> None:
    model = _model("grad = local.SL1(p, t, go)", SL1_FN)
    fused, report = fuse(model)
    assert [f.op_type for f in report.fusions] == [SMOOTH_L1_GRAD]
    assert report.inlined_functions == ["local.SL1"]
    assert [n.op_type for n in fused.graph.node] == [SMOOTH_L1_GRAD]
    assert {f.name for f in fused.functions if f.domain != DOMAIN} == set()  # the inlined function is gone
    onnx.checker.check_model(fused, full_check=True)
    assert_runs_as_fused(model, fused, _feeds(seed))


def test_a_pattern_two_calls_deep_fuses() -> None:
    outer = _function("Outer", "p, t, go", "y", "\n    y = local.SL1(p, t, go)\n")
    model = _model("grad = local.Outer(p, t, go)", outer, SL1_FN)
    assert candidates(model) == [("local", "Outer"), ("local", "SL1")]
    fused, report = fuse(model)
    assert len(report.fusions) == 1 and set(report.inlined_functions) == {"local.Outer", "local.SL1"}
    assert_runs_as_fused(model, fused, _feeds(1))


def test_functions_without_a_pattern_are_kept_as_they_are() -> None:
    relu_abs = _function("Mag", "v", "y", "\n    a = Abs(v)\n    y = Relu(a)\n")
    plain = _function("Twice", "v", "y", "\n    y = Add(v, v)\n")
    model = _model("d = Sub(p, t)\n    m = local.Mag(d)\n    grad = local.Twice(m)", relu_abs, plain)
    assert candidates(model) == [("local", "Mag")]  # Twice has no op any pattern needs: never inlined
    fused, report = fuse(model)
    assert not report.fusions and not report.inlined_functions
    assert [n.op_type for n in fused.graph.node] == ["Sub", "Mag", "Twice"]
    assert [f.name for f in fused.functions] == ["Mag", "Twice"]


def test_a_near_miss_inside_a_function_is_reported_and_the_function_kept() -> None:
    # the function also returns |x|, which the main graph reads: the select's intermediates escape
    leaky = _function("SL1Leaky", "p, t, go", "g, ax", SL1_BODY)
    model = _model("grad, mag = local.SL1Leaky(p, t, go)", leaky, outputs="float[4,8] grad, float[4,8] mag")
    fused, report = fuse(model)
    assert not report.fusions and not report.inlined_functions
    assert [n.op_type for n in fused.graph.node] == ["SL1Leaky"]
    reasons = [r.reason for r in report.rejections]
    assert reasons and all(r.startswith("inside a local function's body: ") for r in reasons), reasons
    assert any("graph output" in r or "outside the match" in r for r in reasons), reasons


def test_a_model_fused_before_is_not_unfused_again() -> None:
    fused, _ = fuse(_model("grad = local.SL1(p, t, go)", SL1_FN))
    assert candidates(fused) == []  # the fused ops' own functions hold the matched subgraphs
    again, report = fuse(fused)
    assert not report.fusions and not report.inlined_functions
    assert [n.op_type for n in again.graph.node] == [SMOOTH_L1_GRAD]
    feeds = _feeds(2)
    assert_same(run_ort(fused, feeds)[0], run_ort(again, feeds)[0])


def test_the_cli_reports_the_inlined_functions(tmp_path, capsys) -> None:
    src = tmp_path / "modular.onnx"
    onnx.save(_model("grad = local.SL1(p, t, go)", SL1_FN), src)
    assert main([str(src), "--target", "ascend950", "-o", str(tmp_path / "out")]) == 0
    assert "inlined  the calls of local functions local.SL1 to fuse inside them" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["inlined_functions"] == ["local.SL1"]


def test_the_onnx_ir_pass_looks_into_local_functions() -> None:
    import onnx_ir

    from lowering.ir_pass import FuseAscendPass

    result = FuseAscendPass()(onnx_ir.serde.deserialize_model(_model("grad = local.SL1(p, t, go)", SL1_FN)))
    assert result.modified
    assert [n.op_type for n in result.model.graph] == [SMOOTH_L1_GRAD]
    assert all(domain == DOMAIN for domain, _, _ in result.model.functions)
