"""Exporter spellings that reach the pass from real exporters and their post-processing: tf2onnx's
SmoothL1 backward with predict and label dims named apart, onnxconverter-common's float16
conversion of PyTorch's backward (whole and with keep_io_types), Keras 3's Huber gradient on the
JAX backend in float16, MindSpore's backward graphs, and the group-lasso spelling of the proximal
update. Each fixture that fuses lowers and verifies end to end (lower --verify) against
onnxruntime on the unfused graph; the group-lasso spelling stays refused where float32 loses the
significance the fused op keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from pass_numerics import run_ort

import lowering
from app.cli import main
from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

# (fixture, --shape options, backend): at least one fixture per fused op runs on the twin
VERIFIED = [
    ("tf2onnx/sl1_custom_grad_head_mean_b05_f32_dynamic_op13.onnx", ["x=7,8", "target=7,4"], "twin"),
    ("tf2onnx/sl1_hand_where_mean_b05_f32_dynamic_op13.onnx", ["p=7,5", "t=7,5"], "cpu"),
    # a batch of 1 against 7: the graph broadcasts p, and so does the Expand before the fused node
    ("tf2onnx/sl1_hand_where_mean_b05_f32_dynamic_op13.onnx", ["p=1,5", "t=7,5"], "cpu"),
    ("fp16_converted/sl1_aten_mean_b05_dynopt_fp16conv.onnx", [], "cpu"),
    ("fp16_converted/sl1_aten_mean_b05_dynopt_fp16conv_keepio.onnx", [], "cpu"),
    ("fp16_converted/sl1_autograd_mean_b05_dynopt_fp16conv_keepio.onnx", [], "cpu"),
    ("jax/sl1_keras_huber_sum_d1_vjp_f16.onnx", [], "cpu"),
    ("jax/sl1_keras_huber_fn_none_d05_vjp_f16.onnx", [], "cpu"),
    ("jax/sl1_keras_ops_huber_mean_d1_vjp_f16.onnx", [], "cpu"),
    ("mindspore/sl1_select_sign_mean_b05_f32.onnx", [], "cpu"),
    ("mindspore/sl1_kernel_mean_b05_f32.onnx", [], "twin"),
]


@pytest.mark.parametrize("fixture, shapes, backend", VERIFIED,
                         ids=[f"{Path(f).stem}-{'-'.join(s) or 'static'}-{b}" for f, s, b in VERIFIED])
def test_fixture_lowers_and_verifies(fixture: str, shapes: list[str], backend: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(FIXTURES / fixture), "--target", "ascend950", "-o", str(tmp_path), "--verify", "--backend", backend]
    for shape in shapes:
        args += ["--shape", shape]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL" not in out and "PASS:" in out, out
    fused = onnx.load(str(tmp_path / f"{Path(fixture).stem}.fused.onnx"))
    assert [n.op_type for n in fused.graph.node if n.domain == "com.huawei.ascend"] == [SMOOTH_L1_GRAD]


def test_predict_and_label_named_apart_are_expanded_to_one_shape() -> None:
    model = onnx.load(str(FIXTURES / "tf2onnx/sl1_custom_grad_head_mean_b05_f32_dynamic_op13.onnx"))
    fused, report = lowering.fuse(model)
    fusion, = report.fusions
    # the graph divides by numel(x), x = y - target: its quotient is the dout the fused node reads
    assert fusion.attributes["reduction"] == "sum" and fusion.inputs[2] not in ("x", "target")
    expands = [n for n in fused.graph.node if n.op_type == "Expand"]
    assert sorted(n.input[0] for n in expands) == ["target", "y"]


def _group_lasso(name: str) -> onnx.ModelProto:
    return onnx.load(str(FIXTURES / "exporters" / name))


@pytest.mark.xfail(strict=True, reason="a difference the precision standard does not excuse: p * relu(1 - t/|p|) "
                   "computes, in float32, the shrink at t(1 +- 2^-24) per element, 2.4% off the update one ulp above "
                   "|p| = t = 0.001 (and the proof leaves the sign of the zero |p| divides t by open, so p = 0 "
                   "would not prove either); over the reals it is the update")
@pytest.mark.parametrize("name", ["prox_const_group_lasso_f32_dynopt.onnx", "prox_const_group_lasso_f32_ts.onnx"])
def test_group_lasso_spelling_at_group_size_one_fuses(name: str) -> None:
    _, report = lowering.fuse(_group_lasso(name))
    assert report.counts() == {PROXIMAL_GD: 1}, report.summary()


@pytest.mark.parametrize("name", ["prox_const_group_lasso_f32_dynopt.onnx", "prox_const_group_lasso_f32_ts.onnx",
                                  "nm_prox_group_lasso_tensor_f32_dynopt.onnx"])
def test_group_lasso_spelling_is_refused_with_a_counterexample(name: str) -> None:
    """The recogniser reaches the kink through 1 - t/|p| and says where the graph and the update
    differ; the counterexample is real in float32 (onnxruntime agrees)."""
    model = _group_lasso(name)
    _, report = lowering.fuse(model)
    assert not report.fusions
    reason, = [r.reason for r in report.rejections if r.pattern == "proximal_gd/meaning"]
    assert reason.startswith("differs from ApplyProximalGradientDescent"), reason
    if "const" in name:
        t = np.float32(0.1 * 0.01)  # the graph's threshold constant
        var = np.zeros((8, 16), np.float32)
        var.reshape(-1)[0] = np.nextafter(t, np.float32(1))
        got = run_ort(model, {"var": var, "delta": np.zeros_like(var)})[0].reshape(-1)[0]
        exact = (float(var.reshape(-1)[0]) - float(t)) / float(np.float32(1.005))
        assert abs(got / exact - 1) > 10 * 2.0**-13  # beyond the CANN bound on one element
