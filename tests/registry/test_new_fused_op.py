"""A new fused op type is one contract, one pattern and one lowering rule: a toy op registered
from a test-only module (toy_op.py) goes through match, fuse, lower, emit, the C++ twin and the
diff without any change to the project's sources."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from app.cli import main
from codegen.api import build_kernels, emit_kernels
from codegen.registry import register_rule, unregister_rule
from contracts.fused_ops import register, unregister
from lowering.patterns import DEFAULT_PATTERNS
from lowering.rewrite import fuse_proto
from runtime.ort_exec import run_model

sys.path.insert(0, str(Path(__file__).parent))

import toy_op  # noqa: E402


@pytest.fixture
def registered():
    register(toy_op.CONTRACT)
    register_rule(toy_op.RULE)
    yield
    unregister(toy_op.OP)
    unregister_rule(toy_op.OP)


def _model(scalar_dout: bool) -> onnx.ModelProto:
    shape = [4, 67]
    nodes = [
        helper.make_node("Sub", ["p", "l"], ["x"], name="sub"),
        helper.make_node("Mul", ["x", "two"], ["y"], name="scale"),
        helper.make_node("Mul", ["dout", "y"], ["g"], name="times_dout"),
    ]
    graph = helper.make_graph(
        nodes, "squared_error_backward",
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("l", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("dout", TensorProto.FLOAT, [] if scalar_dout else shape)],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, shape)],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("scalar_dout", [False, True], ids=["tile-dout", "scalar-dout"])
def test_toy_op_goes_through_every_stage(registered, tmp_path: Path, rng, scalar_dout: bool) -> None:
    model = _model(scalar_dout)
    fused, report = fuse_proto(model, patterns=(*DEFAULT_PATTERNS, toy_op.PATTERN))
    assert [(f.op_type, f.attributes) for f in report.fusions] == [(toy_op.OP, {"scale": 2.0})]
    assert [n.op_type for n in fused.graph.node] == [toy_op.OP]

    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    np.testing.assert_array_equal(run_model(fused, feeds)["g"], run_model(model, feeds)["g"])

    kernels = build_kernels(fused, "ascend910b")
    assert len(kernels) == 1 and kernels[0].op_name == toy_op.OP
    files = emit_kernels(kernels, tmp_path / "kernels")
    stem = kernels[0].file_stem
    def_cpp = (tmp_path / "kernels" / stem / "op_host" / f"{stem}_def.cpp").read_text()
    assert 'this->Attr("scale")' in def_cpp and "predict" in def_cpp
    assert toy_op.CONTRACT.formula in (tmp_path / "kernels" / stem / "README.md").read_text()
    assert len(files) > 10

    unfused_path, fused_path = tmp_path / "toy.onnx", tmp_path / "toy.fused.onnx"
    onnx.save(model, unfused_path)
    onnx.save(fused, fused_path)
    backends = ["cpu", "twin"] if shutil.which("g++") else ["cpu"]
    for backend in backends:
        out = tmp_path / f"{backend}.json"
        code = main(["diff", str(unfused_path), str(fused_path), "--backend", backend, "--target", "ascend910b",
                     "--json", str(out), "-q"])
        rows = json.loads(out.read_text())["rows"]
        assert code == 0, rows
        assert {r["kind"] for r in rows} == {"output", "node"} and all(r["status"] == "PASS" for r in rows)


def test_a_rule_whose_attribute_default_differs_from_the_contract_is_refused(registered) -> None:
    import dataclasses

    from codegen.registry import Attribute, OpInterface
    from contracts.errors import InternalError

    unregister_rule(toy_op.OP)
    op = toy_op.RULE.operators[0]
    drifted = dataclasses.replace(toy_op.RULE, operators=(dataclasses.replace(op, interface=OpInterface(
        outputs=("gradient",), attributes=(Attribute("scale", "float", 3.0, False, "drifted"),))),))
    with pytest.raises(InternalError, match="defaults to 3.0 in the operator interface but to 2.0"):
        register_rule(drifted)
