"""The twin backend runs fused nodes inside loop bodies: the emitted C++ kernel in every
iteration, each run held to its reference (the kernels are those the session's twin fixture
compiled for the sample models: float32 proximal updates with runtime scalars)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import OP_SPECS, PROXIMAL_GD
from lowering import fuse
from runtime import aclnn
from runtime.diff import diff_models
from runtime.report import DiffReport, format_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from subgraph_fixtures import entries, feeds, load  # noqa: E402

LOOPS = [e for e in entries() if e["file"] in ("hand_loop_ista_100.onnx", "tf_while_ista_dynamic.onnx",
                                               "jax_fori_ista.onnx", "torch_script_loop_ista.onnx")]


@pytest.mark.parametrize("entry", LOOPS, ids=lambda e: e["file"])
def test_twin_runs_the_kernel_in_every_iteration(twin, entry: dict, seed: int) -> None:
    model = load(entry)
    fused, _ = fuse(model)
    report = DiffReport("unfused", "fused", "twin", "ascend950", "manifest", {})
    start = time.perf_counter()
    diff_models(model, fused, feeds(entry, model, seed), twin, "ascend950", report)
    elapsed = time.perf_counter() - start
    assert report.passed, format_table(report)
    node, = (r for r in report.rows if r.kind == "node")
    iterations = 100 if "100" in entry["file"] else 20
    assert node.checked.startswith(f"checked in {iterations} iterations")
    assert elapsed < 10, f"{elapsed:.1f} s"


def test_inputs_that_lie_back_to_back_in_memory_are_told_apart(twin, rng: np.random.Generator) -> None:
    """onnxruntime's arena hands out adjacent tensors: var's end is delta's start. A pointer to
    delta's first byte is delta's, not one past var's end."""
    shape = (8, 16)
    buffer = rng.standard_normal(2 * 128).astype(np.float32)
    inputs = {"var": buffer[:128].reshape(shape), "delta": buffer[128:].reshape(shape),
              "alpha": np.array(0.1, np.float32), "l1": np.array(0.02, np.float32), "l2": np.array(0.05, np.float32)}
    scalar = InputSpec("float32", ())
    spec = NodeSpec("adjacent", PROXIMAL_GD, {"var": InputSpec("float32", shape), "alpha": scalar, "l1": scalar,
                                              "l2": scalar, "delta": InputSpec("float32", shape)},
                    {"scalar_form": "raw"})
    out = aclnn.run_fused(spec, inputs, twin, "ascend950")["var_out"]
    golden, = OP_SPECS[PROXIMAL_GD].golden(inputs, {"scalar_form": "raw"})
    np.testing.assert_allclose(out, golden, rtol=2.0**-13, atol=1e-7)
