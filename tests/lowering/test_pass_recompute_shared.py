"""`recompute_shared` (the default; `lower --no-recompute-shared` turns it off): a match whose
intermediates the rest of the graph also reads fuses, and the matched nodes that compute them stay
for those readers. Every post-processing optimizer merges a forward loss's |x|, comparison and
sign with its gradient's (onnxruntime's own offline optimizer too); without the option the
gradient is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from pass_forms import SL1, G
from pass_numerics import assert_same_outputs, fused_nodes

import lowering

ROOT = Path(__file__).resolve().parents[2]
BOX_HEAD = ROOT / "tests/fixtures/exporters/mixed_box_head_step_with_loss_dyn.onnx"


def _loss_and_gradient() -> onnx.ModelProto:
    """sum(smooth_l1(p, t, beta=0.5)) and its gradient, sharing x, |x| and |x| < beta."""
    g = G()
    p, t, go = g.input("predict"), g.input("label"), g.input("dout", shape=())
    x = g.op("Sub", p, t)
    a = g.op("Abs", x)
    b = g.const(0.5)
    c = g.op("Less", a, b)
    inside = g.op("Div", g.op("Mul", g.op("Mul", a, a), g.const(0.5)), b)
    loss = g.op("ReduceSum", g.op("Where", c, inside, g.op("Sub", a, g.const(0.25))), keepdims=0)
    grad = g.op("Where", c, g.op("Div", g.op("Mul", go, x), b), g.op("Mul", go, g.op("Sign", x)))
    g.output(loss, shape=())
    g.output(grad)
    return g.model()


def _feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def test_shared_intermediates_are_refused_without_recompute_with_the_way_out() -> None:
    _, report = lowering.fuse(_loss_and_gradient(), recompute_shared=False)
    assert not report.fusions
    assert any("outside the match (lower fuses it by default" in r.reason for r in report.rejections), report.summary()


def test_recompute_shared_fuses_and_keeps_what_the_loss_reads(rng: np.random.Generator) -> None:
    model = _loss_and_gradient()
    fused, report = lowering.fuse(model, recompute_shared=True)
    onnx.checker.check_model(fused, full_check=True)
    fusion, = report.fusions
    assert fusion.op_type == SL1 and fusion.attributes["sigma"] == 0.5
    assert any("computes those values twice" in c for c in fusion.caveats)
    # the loss keeps its own Sub, Abs and Less; the gradient's Sign, Mul, Div and Where are gone
    ops = sorted(n.op_type for n in fused.graph.node)
    assert ops.count("Abs") == 1 and ops.count("Less") == 1 and "Sign" not in ops
    for _ in range(3):
        assert_same_outputs(model, fused, _feeds(model, rng))


def test_recompute_shared_on_onnxruntimes_optimized_training_step(tmp_path: Path, rng: np.random.Generator) -> None:
    # onnxruntime's basic offline optimizer merges the loss's and the gradient's common nodes
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(BOX_HEAD), options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(tmp_path / "optimized.onnx"))
    _, plain = lowering.fuse(model, recompute_shared=False)
    fused, report = lowering.fuse(model)
    assert SL1 not in plain.counts() and report.counts()[SL1] == 1, (plain.summary(), report.summary())
    assert report.counts() == lowering.fuse(onnx.load(str(BOX_HEAD)))[1].counts()
    feeds = _feeds(model, rng)
    assert_same_outputs(model, fused, feeds)
    assert len(fused_nodes(fused)) == sum(report.counts().values())


def test_cli_flag(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_loss_and_gradient(), str(path))
    for flag, fusions in ((["--no-recompute-shared"], 0), ([], 1), (["--recompute-shared"], 1)):
        out = tmp_path / f"out{'_'.join(flag)}"
        done = subprocess.run([sys.executable, "-m", "app.cli", str(path), "--target", "ascend950",
                               "--emit", "onnx", "-o", str(out), *flag], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert len(fused_nodes(onnx.load(str(out / "m.fused.onnx")))) == fusions


@pytest.mark.parametrize("recompute", [False, True])
def test_the_onnx_ir_pass_takes_the_option(recompute: bool) -> None:
    import onnx_ir

    from lowering.ir_pass import FuseAscendPass

    fuse_pass = FuseAscendPass(recompute_shared=recompute)
    result = fuse_pass(onnx_ir.serde.deserialize_model(_loss_and_gradient()))
    assert result.modified == recompute and len(fuse_pass.report.fusions) == int(recompute)
