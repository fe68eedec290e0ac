"""The NPU backend calls the emitted operator's aclnn API with the arguments in the order the
emitted example program passes them (no device needed: the plan is checked, not run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codegen.api import build_kernels, emit_kernels
from lowering import fuse
from runtime.backends.npu import aclnn_arguments

SAMPLE = Path(__file__).resolve().parents[2] / "models" / "box_head_train_step.onnx"


def _example_call(project: Path, op: str) -> list[str]:
    text = next((project / "examples").glob("test_aclnn_*.cpp")).read_text()
    call = re.search(rf"aclnn{op}GetWorkspaceSize\((.*?)&workspaceSize", text, re.S)
    assert call is not None
    return [re.sub(r"/\*.*?\*/", "", a).strip() for a in call.group(1).split(",") if a.strip()]


@pytest.mark.parametrize("target", ["ascend950", "ascend910b"])
def test_npu_arguments_follow_the_emitted_aclnn_signature(tmp_path: Path, target: str) -> None:
    kernels = build_kernels(fuse(str(SAMPLE))[0], target)
    emit_kernels(kernels, tmp_path)
    for art in kernels:
        plan = aclnn_arguments(art.kernel)
        example = _example_call(tmp_path / art.file_stem, art.op_name)
        assert len(plan) == len(example), (plan, example)
        for arg, written in zip(plan, example):
            if arg.kind == "tensor":
                assert written == f"d_{arg.name}.tensor"
            else:
                assert arg.name in {"sigma", "reduction", "scale", "use_locking", "scalar_form", "shrink_max"}


def test_apgd_takes_cann_prototype_with_its_own_output() -> None:
    """CANN's aclnnApplyProximalGradientDescentGetWorkspaceSize(var, alpha, l1, l2, delta, varOut):
    not in place (a caller may pass var as varOut), no attributes."""
    kernels = build_kernels(fuse(str(SAMPLE))[0], "ascend950")
    apgd = next(k for k in kernels if k.op_name == "ApplyProximalGradientDescent")
    assert [(a.kind, a.name) for a in aclnn_arguments(apgd.kernel)] == [
        ("tensor", n) for n in ("var", "alpha", "l1", "l2", "delta", "var_out")]
