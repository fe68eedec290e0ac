"""Every emitted operator project installs as a vendor of its own (codegen/emit/vendor.py), named
by CANN's rules: a Python identifier (the op build installs `<vendor>_impl` as a Python package)
that occurs inside no other vendor name (install.sh deletes its name from config.ini's
load_priority line as a plain substring in some template versions, as a word in others)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.emit import project_files
from codegen.emit.vendor import vendor_name
from codegen.errors import CodegenError
from codegen.nodes import InputSpec, NodeSpec
from codegen.project import OperatorProject, operator_projects
from codegen.targets import TARGETS
from contracts.fused_ops import SMOOTH_L1_GRAD

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twin"))  # twin_cases: every prox variant
from twin_cases import prox_variant_specs  # noqa: E402

IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")


def _sl1(scale: float) -> NodeSpec:
    inputs = {r: InputSpec("float32", (8, 16)) for r in ("predict", "label", "dout")}
    return NodeSpec("sl1", SMOOTH_L1_GRAD, inputs, {"sigma": 0.5, "reduction": "mean", "scale": scale})


def _projects(target: str) -> list[OperatorProject]:
    specs = [_sl1(1.0), _sl1(0.5), *prox_variant_specs()]
    return operator_projects([artifact_for_target(kernel_for_spec(s), target) for s in specs])


def _substring_pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a in names for b in names if a != b and a in b]


@pytest.mark.parametrize("target", list(TARGETS))
def test_each_operator_project_installs_as_a_vendor_of_its_own(target: str) -> None:
    projects = _projects(target)
    assert len(projects) == 4  # CANN's two operators and the project's own two
    vendors = []
    for project in projects:
        files = project_files(project)
        preset = json.loads(files["CMakePresets.json"])["configurePresets"][0]["cacheVariables"]
        vendor = preset["vendor_name"]["value"]
        assert vendor == vendor_name(project.op_name), project.op_name
        assert IDENTIFIER.match(vendor) and IDENTIFIER.match(f"{vendor}_impl"), vendor
        # the package installs under packages/vendors/${vendor_name}; the example links that vendor
        assert "set(VENDOR_DIR packages/vendors/${vendor_name})" in files["op_host/CMakeLists.txt"]
        assert f"set(VENDOR_DIR ${{ASCEND_OPP_PATH}}/vendors/{vendor})" in files["examples/CMakeLists.txt"]
        assert f"installs vendors/{vendor} under ASCEND_OPP_PATH" in files["README.md"]
        vendors.append(vendor)
    assert len(set(vendors)) == len(vendors)
    # nor inside the template's default vendor or CANN's own ops-nn vendor, nor they inside ours
    assert _substring_pairs([*vendors, "customize", "custom_nn"]) == []


def test_vendor_names_are_deterministic_and_never_inside_one_another(rng: np.random.Generator) -> None:
    """Op names built from a few words, so that many share prefixes and suffixes (as
    AscendLoweringApplyProximalGradientDescent ends with ApplyProximalGradientDescent)."""
    words = ["Ascend", "Lowering", "Apply", "Smooth", "L1", "Loss", "Grad", "V2", "Op", "X"]
    names = {"".join(rng.choice(words, size=int(rng.integers(1, 6)))) for _ in range(400)}
    names |= {"ApplyProximalGradientDescent", "AscendLoweringApplyProximalGradientDescent",
              "SmoothL1LossGrad", "SmoothL1LossGradV2", "AscendLoweringSmoothL1LossGrad"}
    vendors = {n: vendor_name(n) for n in sorted(names)}
    assert {n: vendor_name(n) for n in vendors} == vendors
    distinct = set(vendors.values())
    assert len(distinct) == len(vendors)  # distinct op names, distinct vendors
    assert all(IDENTIFIER.match(v) for v in distinct)
    assert _substring_pairs(sorted(distinct)) == []


@pytest.mark.parametrize("op_name", ["Foo__Bar", "_Foo", "Foo_", "Föö", ""])
def test_an_op_name_that_makes_no_vendor_name_is_refused(op_name: str) -> None:
    with pytest.raises(CodegenError, match="makes no vendor name"):
        vendor_name(op_name)
