"""The emitted operators named like CANN's have CANN's ops-nn prototypes exactly, whatever the
fused nodes add; what CANN's prototype cannot express is an operator of the project's own name.

CANN's prototypes, as facts (hicann/ops-nn):
  SmoothL1LossGradV2: inputs predict, label, dout; output gradient; attributes sigma (float,
    default 1.0) and reduction (string, default "mean"); bfloat16, float16 and float, ND.
  ApplyProximalGradientDescent (experimental/optim): inputs var, alpha, l1, l2, delta; output
    var_out; no attributes; float and float16, every input of one dtype, ND; aclnn
    aclnnApplyProximalGradientDescentGetWorkspaceSize(var, alpha, l1, l2, delta, varOut, ...).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.emit import project_files
from codegen.nodes import InputSpec, NodeSpec
from codegen.project import operator_projects
from codegen.targets import TARGETS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twin"))  # twin_cases: every prox variant
from twin_cases import prox_variant_specs  # noqa: E402

CANN = {
    "SmoothL1LossGradV2": {
        "inputs": ["predict", "label", "dout"], "outputs": ["gradient"],
        "attrs": [("sigma", "Float", "1.0f"), ("reduction", "String", '"mean"')],
        "dtypes": {"ge::DT_BF16", "ge::DT_FLOAT16", "ge::DT_FLOAT"},
    },
    "ApplyProximalGradientDescent": {
        "inputs": ["var", "alpha", "l1", "l2", "delta"], "outputs": ["var_out"], "attrs": [],
        "dtypes": {"ge::DT_FLOAT16", "ge::DT_FLOAT"},
    },
}


def _sl1_spec(dtype: str, scale: float, sigma: float = 0.5, reduction: str = "mean") -> NodeSpec:
    inputs = {"predict": InputSpec(dtype, (8, 16)), "label": InputSpec(dtype, (8, 16)), "dout": InputSpec(dtype, ())}
    return NodeSpec("sl1", "SmoothL1LossGradV2", inputs, {"sigma": sigma, "reduction": reduction, "scale": scale})


def _specs() -> list[NodeSpec]:
    sl1 = [_sl1_spec(d, s, sigma, r) for d in ("float32", "float16", "bfloat16") for s in (1.0, 0.5)
           for sigma, r in ((0.5, "mean"), (0.0, "sum"))]
    return sl1 + prox_variant_specs()


def _opdef(text: str) -> dict:
    inputs = re.findall(r'this->Input\("(\w+)"\)', text)
    outputs = re.findall(r'this->Output\("(\w+)"\)', text)
    attrs = re.findall(r'this->Attr\("(\w+)"\)\.AttrType\(OPTIONAL\)\.(\w+)\(([^)]*)\)', text)
    dtypes = [set(t.strip() for t in m.split(",")) for m in re.findall(r"\.DataType\(\{([^}]*)\}\)", text)]
    return {"inputs": inputs, "outputs": outputs, "attrs": attrs, "dtypes": dtypes}


@pytest.mark.parametrize("target", list(TARGETS))
def test_operators_with_cann_names_have_cann_prototypes(target):
    projects = operator_projects([artifact_for_target(kernel_for_spec(s), target) for s in _specs()])
    names = {p.op_name for p in projects}
    assert set(CANN) <= names
    assert names - set(CANN) == {"AscendLoweringSmoothL1LossGrad", "AscendLoweringApplyProximalGradientDescent"}
    for project in projects:
        files = project_files(project)
        opdef = _opdef(files[f"op_host/{project.file_stem}_def.cpp"])
        want = CANN.get(project.op_name)
        if want is None:  # the project's own: CANN's inputs and outputs, its attributes on top
            cann = CANN["SmoothL1LossGradV2" if "SmoothL1" in project.op_name else "ApplyProximalGradientDescent"]
            assert opdef["inputs"] == cann["inputs"] and opdef["outputs"] == cann["outputs"]
            assert len(opdef["attrs"]) > len(cann["attrs"])
            continue
        assert f"class {project.op_name} : public OpDef" in files[f"op_host/{project.file_stem}_def.cpp"]
        assert opdef["inputs"] == want["inputs"] and opdef["outputs"] == want["outputs"], project.op_name
        assert opdef["attrs"] == want["attrs"], project.op_name
        assert opdef["dtypes"] == [want["dtypes"]] * (len(want["inputs"]) + len(want["outputs"])), project.op_name
        # every input and output lists CANN's dtypes in one order (one dtype for all per column)
        lists = re.findall(r"\.DataType\(\{([^}]*)\}\)", files[f"op_host/{project.file_stem}_def.cpp"])
        assert len(set(lists)) == 1


def test_which_kernels_cann_operators_take():
    """CANN's SmoothL1LossGradV2 takes scale 1 only; CANN's ApplyProximalGradientDescent the raw
    form without a clamp, float or float16, scalars of the tensors' dtype."""
    def op(spec: NodeSpec) -> str:
        return kernel_for_spec(spec).op_type

    assert op(_sl1_spec("bfloat16", 1.0)) == "SmoothL1LossGradV2"
    assert op(_sl1_spec("float32", 0.5)) == "AscendLoweringSmoothL1LossGrad"
    taken = {(s.inputs["var"].dtype, s.inputs["alpha"].dtype, s.inputs["l1"].dtype, str(s.attrs["scalar_form"]),
              math.isinf(float(s.attrs["shrink_max"])))  # type: ignore[arg-type]
             for s in prox_variant_specs() if op(s) == "ApplyProximalGradientDescent"}
    assert taken == {("float32", "float32", "float32", "raw", True), ("float16", "float16", "float16", "raw", True)}


def test_the_aclnn_example_calls_cann_prototype():
    art = artifact_for_target(kernel_for_spec(prox_variant_specs()[0]), "ascend910b")
    assert art.op_name == "ApplyProximalGradientDescent"
    (project,) = operator_projects([art])
    example = project_files(project)["examples/test_aclnn_apply_proximal_gradient_descent.cpp"]
    call = re.search(r"aclnnApplyProximalGradientDescentGetWorkspaceSize\(([^;]*)\);", example, re.S)
    assert call is not None
    args = [a.strip() for a in call.group(1).replace("\n", " ").split(",")]
    assert args[:6] == [f"d_{n}.tensor" for n in ("var", "alpha", "l1", "l2", "delta", "var_out")]
    assert args[6:] == ["&workspaceSize", "&executor)"]
